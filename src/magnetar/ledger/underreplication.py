"""Under-replication records and bookie states in the metadata store, as BookKeeper's
underreplication manager and bookie registration keep them.

Why this module exists: the auditor marks ledgers that lost a replica, recovery workers
claim and clear those marks, the admin API lists them and decommissions bookies, and topic
stats report whether a ledger is under-replicated. They all read and write the same keys
(docs/metadata.md, "Key layout"), so the layout and its JSON live here, below all of them:

* ``/underreplication/ledgers/<ledger id>``: the mark, ``missingReplicas`` (bookie ids the
  ledger must be moved off), ``lackingEntries`` (those of them found alive but without
  entries they should hold: moved off even while registered), ``ctime`` (ms) — persistent,
  written by the auditor;
* ``/underreplication/locks/<ledger id>``: a worker's claim — leased by its session, so a
  killed worker's claim disappears with its lease and another worker takes the ledger;
* ``/bookies/state/<bookie id>``: ``state`` (``decommissioning`` / ``decommissioned``) and
  the ``instanceId`` of the cookie it applies to — a bookie that comes back with a fresh
  disk has a new instance id and is not bound by its predecessor's state.
"""

from __future__ import annotations

import contextlib
import enum
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.ledger import racks
from magnetar.ledger.placement import DEFAULT_RACK
from magnetar.metadata import api, keys


class BookieState(enum.Enum):
    RW = "rw"
    RO = "ro"
    DECOMMISSIONING = "decommissioning"
    DECOMMISSIONED = "decommissioned"
    GONE = "gone"
    """Has a cookie (was formatted) but no live registration."""


@dataclass(frozen=True, slots=True)
class BookieStatus:
    bookie_id: str
    state: BookieState
    rack: str
    registered: bool
    instance_id: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "bookieId": self.bookie_id,
            "state": self.state.value,
            "rack": self.rack,
            "registered": self.registered,
            "instanceId": self.instance_id,
        }


@dataclass(frozen=True, slots=True)
class Mark:
    """A ledger marked under-replicated."""

    ledger_id: int
    missing: tuple[str, ...]
    ctime_ms: int
    version: api.Version
    lacking: tuple[str, ...] = ()
    """Bookies of ``missing`` the periodic check found alive but without their entries."""

    def to_json(self) -> dict[str, object]:
        return {
            "ledgerId": self.ledger_id,
            "missingReplicas": list(self.missing),
            "lackingEntries": list(self.lacking),
            "ctime": self.ctime_ms,
        }


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(b) for b in value) if isinstance(value, list) else ()


def _mark(ledger_id: int, record: api.Record) -> Mark:
    doc = _json(record.value)
    return Mark(
        ledger_id=ledger_id,
        missing=_strings(doc.get("missingReplicas")),
        ctime_ms=int(str(doc.get("ctime", 0))),
        version=record.version,
        lacking=_strings(doc.get("lackingEntries")),
    )


def _json(raw: bytes) -> dict[str, object]:
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


# --- bookies ---------------------------------------------------------------------------------


async def operator_state(store: api.MetadataStore, bookie_id: str) -> tuple[str, str | None]:
    """The operator-set state of ``bookie_id`` ("" when none) and its instance id."""
    record = await store.get(keys.bookie_state(bookie_id))
    if record is None:
        return "", None
    doc = _json(record.value)
    instance = doc.get("instanceId")
    return str(doc.get("state", "")), str(instance) if instance else None


async def _instance_of(store: api.MetadataStore, bookie_id: str) -> str | None:
    record = await store.get(keys.bookie_cookie(bookie_id))
    if record is None:
        return None
    instance = _json(record.value).get("instance_id")
    return str(instance) if instance else None


async def bookie_statuses(store: api.MetadataStore) -> list[BookieStatus]:
    """Every bookie known to the cluster (registered, formatted or with a state), sorted."""
    registered: dict[str, tuple[bool, str, str | None]] = {}  # id -> (read-only, rack, instance)
    for prefix, read_only in ((keys.BOOKIES_AVAILABLE, False), (keys.BOOKIES_READONLY, True)):
        async for record in store.scan_all(prefix):
            bookie_id = keys.unsegment(record.key.rsplit("/", 1)[-1])
            info = _json(record.value)
            ro = read_only or bool(info.get("readOnly", False))
            live = info.get("instanceId")
            registered[bookie_id] = (
                ro or registered.get(bookie_id, (False, "", None))[0],
                str(info.get("rack") or DEFAULT_RACK),
                str(live) if live else None,
            )
    cookies: dict[str, str | None] = {}
    async for record in store.scan_all(keys.BOOKIE_COOKIES):
        instance = _json(record.value).get("instance_id")
        cookies[keys.unsegment(record.key.rsplit("/", 1)[-1])] = str(instance) if instance else None
    states: dict[str, tuple[str, str | None]] = {}
    async for record in store.scan_all(keys.BOOKIE_STATES):
        doc = _json(record.value)
        instance = doc.get("instanceId")
        states[keys.unsegment(record.key.rsplit("/", 1)[-1])] = (
            str(doc.get("state", "")),
            str(instance) if instance else None,
        )
    assigned = await racks.overrides(store)
    out: list[BookieStatus] = []
    for bookie_id in sorted({*registered, *cookies, *states}):
        read_only, rack, live = registered.get(bookie_id, (False, DEFAULT_RACK, None))
        rack = assigned.get(bookie_id, rack)
        instance = live or cookies.get(bookie_id)
        state_name, state_instance = states.get(bookie_id, ("", None))
        # A state binds the instance it was set for: a bookie back with a fresh disk (a new
        # instance id) is not its predecessor's decommission.
        applies = bool(state_name) and (
            state_instance is None or instance is None or state_instance == instance
        )
        if applies and state_name == BookieState.DECOMMISSIONING.value:
            state = BookieState.DECOMMISSIONING
        elif applies and state_name == BookieState.DECOMMISSIONED.value:
            state = BookieState.DECOMMISSIONED
        elif bookie_id not in registered:
            state = BookieState.GONE
        else:
            state = BookieState.RO if read_only else BookieState.RW
        out.append(BookieStatus(bookie_id, state, rack, bookie_id in registered, instance))
    return out


async def start_decommission(store: api.MetadataStore, bookie_id: str) -> BookieStatus:
    """Mark ``bookie_id`` decommissioning: it turns read-only, the auditor marks every ledger
    on it and recovery workers move them off. KeyError when the cluster does not know it."""
    statuses = {s.bookie_id: s for s in await bookie_statuses(store)}
    status = statuses.get(bookie_id)
    if status is None or status.state is BookieState.DECOMMISSIONED:
        raise KeyError(bookie_id)
    if status.state is not BookieState.DECOMMISSIONING:
        doc = {
            "format": 1,
            "state": BookieState.DECOMMISSIONING.value,
            "instanceId": status.instance_id,
            "ctime": int(time.time() * 1000),
        }
        await store.put(keys.bookie_state(bookie_id), json.dumps(doc).encode())
    return BookieStatus(
        bookie_id, BookieState.DECOMMISSIONING, status.rack, status.registered, status.instance_id
    )


async def finish_decommission(
    store: api.MetadataStore, bookie_id: str, instance_id: str | None
) -> None:
    """No ledger references the bookie any more: forget its cookie (its disks cannot serve
    again; a fresh disk at the same address formats a new instance) and record it done."""
    if instance_id is not None and await _instance_of(store, bookie_id) == instance_id:
        with contextlib.suppress(api.NotFoundError):
            await store.delete(keys.bookie_cookie(bookie_id))
    doc = {
        "format": 1,
        "state": BookieState.DECOMMISSIONED.value,
        "instanceId": instance_id,
        "ctime": int(time.time() * 1000),
    }
    await store.put(keys.bookie_state(bookie_id), json.dumps(doc).encode())


# --- marks -----------------------------------------------------------------------------------


async def marks(store: api.MetadataStore) -> list[Mark]:
    """Every ledger marked under-replicated, by ledger id."""
    return [
        _mark(keys.id_in_key(record.key), record)
        async for record in store.scan_all(keys.UNDERREPLICATED_LEDGERS)
    ]


async def mark_of(store: api.MetadataStore, ledger_id: int) -> Mark | None:
    record = await store.get(keys.underreplicated_ledger(ledger_id))
    return None if record is None else _mark(ledger_id, record)


async def mark(
    store: api.MetadataStore,
    ledger_id: int,
    missing: Iterable[str],
    *,
    lacking: Iterable[str] = (),
) -> bool:
    """Mark ``ledger_id`` under-replicated (adding to an existing mark's bookies); True when
    the mark is new or grew. ``lacking``: bookies alive but missing entries (also missing)."""
    lacks = set(lacking)
    wanted = set(missing) | lacks
    while True:
        current = await mark_of(store, ledger_id)
        if current is not None and wanted <= set(current.missing) and lacks <= set(current.lacking):
            return False
        doc = {
            "format": 1,
            "missingReplicas": sorted(wanted | set(current.missing if current else ())),
            "lackingEntries": sorted(lacks | set(current.lacking if current else ())),
            "ctime": current.ctime_ms if current else int(time.time() * 1000),
        }
        try:
            await store.put(
                keys.underreplicated_ledger(ledger_id),
                json.dumps(doc).encode(),
                expected_version=current.version if current else api.NOT_EXISTS,
            )
            return True
        except api.BadVersionError:
            continue


async def clear(store: api.MetadataStore, found: Mark) -> bool:
    """Remove the mark if nobody changed it since ``found`` was read; False otherwise (the
    auditor added bookies meanwhile: the worker goes round again)."""
    try:
        await store.delete(
            keys.underreplicated_ledger(found.ledger_id), expected_version=found.version
        )
        return True
    except api.NotFoundError:
        return True
    except api.BadVersionError:
        return False


async def claim(store: api.MetadataStore, session: api.Session, ledger_id: int, owner: str) -> bool:
    """Take the worker lock of ``ledger_id`` under ``session``; False when another holds it."""
    try:
        await store.put(
            keys.underreplication_lock(ledger_id),
            json.dumps({"format": 1, "owner": owner}).encode(),
            expected_version=api.NOT_EXISTS,
            session=session,
        )
        return True
    except api.BadVersionError:
        return False


async def release(store: api.MetadataStore, ledger_id: int) -> None:
    with contextlib.suppress(api.NotFoundError):
        await store.delete(keys.underreplication_lock(ledger_id))


async def is_underreplicated(store: api.MetadataStore, ledger_id: int) -> bool:
    return await store.get(keys.underreplicated_ledger(ledger_id)) is not None
