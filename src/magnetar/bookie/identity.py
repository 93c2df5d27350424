"""A bookie's identity: the cookie that ties a bookie id to its directories.

Why: a bookie that comes back with the wrong disks (an empty replacement volume, another
bookie's journal, two processes claiming one id) would silently serve data it does not have.
As in BookKeeper, a cookie is written into every directory and into the metadata store when
a bookie is first formatted; every start compares them and refuses, with a message saying
what is wrong, when they disagree. The live registration is an ephemeral key under the
bookie's session, so a second process with the same id is refused too.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from magnetar.common import backoff, errors
from magnetar.metadata import api, keys

COOKIE_FILE = "COOKIE"


class IdentityError(errors.PermanentError):
    """The bookie's directories and its registered identity disagree: refuse to start."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    journal_dir: str
    data_dir: str

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes, *, where: str) -> Cookie:
        try:
            return cls(**json.loads(raw))
        except (ValueError, TypeError) as err:
            raise IdentityError(f"unreadable cookie in {where}: {err}") from None


def _read_local(directory: Path) -> Cookie | None:
    path = directory / COOKIE_FILE
    if not path.exists():
        return None
    return Cookie.decode(path.read_bytes(), where=str(path))


def _write_local(directory: Path, cookie: Cookie) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (COOKIE_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(cookie.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / COOKIE_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _resolve(path: Path) -> Path:
    return path.resolve()


def _has_data(directory: Path) -> bool:
    return directory.exists() and any(p.name != COOKIE_FILE for p in directory.iterdir())


async def verify_or_format(
    store: api.MetadataStore, *, bookie_id: str, journal_dir: Path, data_dir: Path
) -> Cookie:
    """Check this bookie's cookies (directories and metadata store) or create them for a new
    bookie. Raises IdentityError naming the problem when they disagree."""
    journal_dir, data_dir = _resolve(journal_dir), _resolve(data_dir)
    local_j, local_d = _read_local(journal_dir), _read_local(data_dir)
    record = await store.get(keys.bookie_cookie(bookie_id))
    remote = Cookie.decode(record.value, where="metadata store") if record else None

    if local_j is None and local_d is None:
        if remote is not None:
            raise IdentityError(
                f"bookie {bookie_id} is registered (instance {remote.instance_id}, data dir "
                f"{remote.data_dir}) but {data_dir} and {journal_dir} hold no cookie: these "
                "are not its directories (wiped or replaced disks?). Use the original "
                "directories, or decommission the old bookie id first."
            )
        if _has_data(journal_dir) or _has_data(data_dir):
            raise IdentityError(
                f"{journal_dir} or {data_dir} holds files but no cookie: refusing to take over "
                "directories that belong to something else"
            )
        cookie = Cookie(bookie_id, uuid.uuid4().hex, str(journal_dir), str(data_dir))
        await store.put(
            keys.bookie_cookie(bookie_id), cookie.encode(), expected_version=api.NOT_EXISTS
        )
        _write_local(journal_dir, cookie)
        _write_local(data_dir, cookie)
        return cookie

    if local_j is None or local_d is None:
        missing = journal_dir if local_j is None else data_dir
        raise IdentityError(f"{missing} has no cookie while its sibling directory does")
    if local_j.instance_id != local_d.instance_id:
        raise IdentityError(
            f"journal dir {journal_dir} (instance {local_j.instance_id}) and data dir "
            f"{data_dir} (instance {local_d.instance_id}) belong to different bookies"
        )
    if local_d.bookie_id != bookie_id:
        raise IdentityError(
            f"{data_dir} belongs to bookie {local_d.bookie_id}, not {bookie_id}: start it with "
            f"--advertised-address/--port giving id {local_d.bookie_id}, or use other directories"
        )
    if remote is None:
        raise IdentityError(
            f"{data_dir} holds the cookie of bookie {bookie_id} (instance {local_d.instance_id}) "
            "but the metadata store has none: wrong metadata store?"
        )
    if remote.instance_id != local_d.instance_id:
        raise IdentityError(
            f"bookie id {bookie_id} is registered to instance {remote.instance_id}, but "
            f"{data_dir} belongs to instance {local_d.instance_id}: the id was reused"
        )
    return local_d


async def register(
    store: api.MetadataStore,
    session: api.Session,
    *,
    bookie_id: str,
    info: dict[str, object],
    wait: float,
) -> api.Version:
    """Announce this bookie as available under its session.

    A registration left by a previous process of this bookie (killed before its lease ran
    out) is waited out for up to ``wait`` seconds; if the id is still live after that,
    another process holds it and this one refuses.
    """
    key = keys.bookie_available(bookie_id)
    value = json.dumps(info, sort_keys=True).encode()
    deadline = asyncio.get_running_loop().time() + wait
    delays = backoff.Backoff(initial_s=0.25, max_s=1.0)
    while True:
        try:
            return await store.put(key, value, expected_version=api.NOT_EXISTS, session=session)
        except api.BadVersionError:
            if asyncio.get_running_loop().time() > deadline:
                raise IdentityError(
                    f"bookie id {bookie_id} is already registered by a live process"
                ) from None
            await asyncio.sleep(delays.next())
