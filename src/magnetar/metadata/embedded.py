"""The embedded metadata store: durable on local disk, inside the process that opens it.

Why this module exists: ``magnetar standalone`` and fast tests need the full metadata
contract (versions, compare-and-set, transactions, watches, sessions) without running etcd.
It mirrors etcd's model so one contract test suite covers both backends:

* one store-wide **revision**, bumped once per write transaction that changes something;
  a key's version is the revision that last modified it;
* a ``kv`` table and a bounded ``events`` history (one row per changed key, grouped by
  revision) from which watches with a ``start_revision`` are served; history older than the
  compaction point is gone and asking for it raises :class:`api.WatchCompactedError`;
* **sessions** are leases with a TTL. In-process there is no network to lose, but a process
  that stalls (its event loop blocked) for longer than the TTL loses its session exactly like
  an etcd client would: the keep-alive finds the deadline passed, deletes the session's
  ephemeral keys and calls the ``on_lost`` callbacks. Leases left by a previous process
  (crash or clean close) are expired when the store is reopened, with DELETE events.

Storage is SQLite (stdlib) in WAL mode with ``synchronous=FULL``: a write is on disk before
its call returns. All SQLite work runs on one dedicated thread (the single writer, reads
included, so they see a consistent order); the event loop only hands jobs over. After each
commit the writer thread posts the changes to the loop with ``call_soon_threadsafe``, which
keeps watch delivery in commit order. A ``LOCK`` file (``flock``) keeps a second process
from opening the same directory.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import fcntl
import functools
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from magnetar.metadata import api, keys, stats
from magnetar.metadata.lease import LeaseState

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_HISTORY = 100_000
"""Revisions of watch history kept by default before older ones are compacted away."""

_MAX_PENDING_BATCHES = 10_000
"""A watcher further behind than this drops its queue and catches up from history."""

_PUT, _DELETE = 0, 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    mod_rev INTEGER NOT NULL,
    create_rev INTEGER NOT NULL,
    lease INTEGER
);
CREATE INDEX IF NOT EXISTS kv_lease ON kv (lease) WHERE lease IS NOT NULL;
CREATE TABLE IF NOT EXISTS events (
    rev INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    type INTEGER NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (rev, seq)
);
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, ttl REAL NOT NULL);
"""


_SCAN_FROM = (
    "SELECT key, value, mod_rev, create_rev, lease FROM kv "
    "WHERE key >= ? AND key < ? ORDER BY key LIMIT ?"
)
_SCAN_AFTER = (
    "SELECT key, value, mod_rev, create_rev, lease FROM kv "
    "WHERE key > ? AND key < ? ORDER BY key LIMIT ?"
)
_CHILDREN_PAGE_SIZE = 1000
_CHILDREN_PAGE = "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key LIMIT 1000"
_HISTORY_RANGE = (
    "SELECT rev, type, key, value FROM events WHERE rev >= ? AND key >= ? AND key < ? "
    "ORDER BY rev, seq"
)
_HISTORY_KEY = (
    "SELECT rev, type, key, value FROM events WHERE rev >= ? AND key = ? ORDER BY rev, seq"
)


def _range_end(prefix_slash: str) -> str:
    """The smallest string above every string starting with ``prefix_slash`` (ends in '/')."""
    return prefix_slash[:-1] + "0"  # '0' is the character after '/'


@dataclass(slots=True)
class _Change:
    """One key changed by a committed write (the writer thread's view of an event)."""

    type: int
    key: str
    value: bytes


@dataclass(slots=True, eq=False)
class _Watcher:
    key: str
    prefix: str | None
    """The prefix with its trailing '/', or None for a single-key watch."""
    last_rev: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    batches: collections.deque[tuple[int, list[_Change]]] = field(default_factory=collections.deque)
    need_history: bool = False
    closed: bool = False

    def matches(self, key: str) -> bool:
        return key.startswith(self.prefix) if self.prefix is not None else key == self.key


class EmbeddedSession(LeaseState):
    """A lease of the embedded store, renewed by a task on the store's event loop."""

    def __init__(self, store: EmbeddedStore, lease_id: int, ttl: float) -> None:
        super().__init__(lease_id, ttl)
        self._store = store
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + ttl
        self._task = loop.create_task(self._keepalive(), name=f"embedded-lease-{lease_id}")

    async def close(self) -> None:
        """Revoke the lease: its ephemeral keys are deleted now."""
        if self._closed or self._lost:
            self._closed = True
            return
        self._closed = True
        self._task.cancel()
        await self._store._expire_lease(self._id)

    async def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._ttl / 3)
            now = loop.time()
            if now <= self._deadline:
                self._deadline = now + self._ttl
                continue
            # We could not renew in time (the loop stalled): the lease expired.
            log.warning("session %d expired: not renewed within %.1fs", self._id, self._ttl)
            try:
                await self._store._expire_lease(self._id)
            except api.StoreClosedError:
                return
            self._mark_lost()
            return

    def _mark_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._tell_lost()

    def _stop(self) -> None:
        self._task.cancel()


class EmbeddedStore:
    """The embedded backend of :class:`api.MetadataStore`. Open it with :meth:`open`."""

    def __init__(self, directory: Path, *, history: int) -> None:
        self._dir = directory
        self._history = history
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="magnetar-embedded-store"
        )
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._closed = False
        self._watchers: set[_Watcher] = set()
        self._sessions: dict[int, EmbeddedSession] = {}
        self._dispatched_rev = 0
        # Writer-thread state (touched only on the writer thread):
        self._rev = 0
        self._compact_rev = 0
        self._live_leases: set[int] = set()
        self._pending: list[_Change] = []

    # --- life cycle ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, directory: str | os.PathLike[str], *, history: int = DEFAULT_HISTORY
    ) -> EmbeddedStore:
        """Open (creating if needed) the store in ``directory``; expire old sessions."""
        if history < 1:
            raise ValueError(f"history must be at least 1 revision, got {history}")
        store = cls(Path(directory), history=history)
        try:
            await store._run(store._open_sync)
        except BaseException:
            await store._loop.run_in_executor(store._executor, store._close_sync)
            store._executor.shutdown(wait=False)
            raise
        store._dispatched_rev = store._rev
        return store

    def _open_sync(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise api.MetadataError(
                f"embedded store {self._dir} is already open (by another process or store)"
            ) from None
        self._lock_fd = fd
        conn = sqlite3.connect(self._dir / "metadata.db", isolation_level=None)
        self._conn = conn
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        self._rev = self._meta("revision")
        self._compact_rev = self._meta("compact_revision")
        # Leases of a previous process: nobody renews them any more, expire them now.
        old = [row[0] for row in conn.execute("SELECT id FROM leases")]
        if old:
            self._write(lambda rev: self._expire_leases_sync(old, rev))

    async def close(self) -> None:
        """Stop keep-alives and watches, close the database. Sessions are not revoked."""
        if self._closed:
            return
        self._closed = True
        for session in self._sessions.values():
            session._stop()
        self._sessions.clear()
        for watcher in self._watchers:
            watcher.closed = True
            watcher.wake.set()
        self._watchers.clear()
        await self._loop.run_in_executor(self._executor, self._close_sync)
        self._executor.shutdown(wait=True)

    def _close_sync(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def _run(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise api.StoreClosedError("the embedded store is closed")
        try:
            return await self._loop.run_in_executor(self._executor, fn)
        except RuntimeError as exc:  # executor shut down under us
            if self._closed:
                raise api.StoreClosedError("the embedded store is closed") from exc
            raise
        except sqlite3.OperationalError as exc:
            raise api.StoreUnavailableError(f"embedded store: {exc}") from exc

    # --- writer-thread helpers ----------------------------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise api.StoreClosedError("the embedded store is closed")
        return self._conn

    def _meta(self, name: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def _set_meta(self, name: str, value: int) -> None:
        self._db.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def _write(self, body: Callable[[int], T]) -> T:
        """Run ``body(new_revision)`` in one transaction; commit and publish what it changed.

        ``body`` returns a value whose changes are in ``self._pending``; nothing changed means
        the revision is not consumed.
        """
        db = self._db
        self._pending = []
        db.execute("BEGIN IMMEDIATE")
        try:
            result = body(self._rev + 1)
            if self._pending:
                rev = self._rev + 1
                db.executemany(
                    "INSERT INTO events (rev, seq, type, key, value) VALUES (?, ?, ?, ?, ?)",
                    [(rev, i, c.type, c.key, c.value) for i, c in enumerate(self._pending)],
                )
                self._set_meta("revision", rev)
                if rev - self._compact_rev > self._history + self._history // 10:
                    self._compact_sync(rev - self._history + 1)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            self._pending = []
            raise
        if self._pending:
            self._rev += 1
            changes, self._pending = self._pending, []
            self._loop.call_soon_threadsafe(self._dispatch, self._rev, changes)
        return result

    def _record(self, key: str) -> api.Record | None:
        row = self._db.execute(
            "SELECT value, mod_rev, create_rev, lease FROM kv WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return api.Record(
            key=key,
            value=bytes(row[0]),
            version=api.Version(row[1]),
            create_revision=row[2],
            session_id=row[3],
        )

    def _version(self, key: str) -> api.Version:
        row = self._db.execute("SELECT mod_rev FROM kv WHERE key = ?", (key,)).fetchone()
        return api.Version(row[0]) if row else api.NOT_EXISTS

    def _put_sync(self, key: str, value: bytes, lease: int | None, rev: int) -> None:
        if lease is not None and lease not in self._live_leases:
            raise api.SessionLostError(f"session {lease} is expired or closed")
        self._db.execute(
            "INSERT INTO kv (key, value, mod_rev, create_rev, lease) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "mod_rev = excluded.mod_rev, lease = excluded.lease",
            (key, value, rev, rev, lease),
        )
        self._pending.append(_Change(_PUT, key, value))

    def _delete_sync(self, key: str) -> bool:
        if self._db.execute("DELETE FROM kv WHERE key = ?", (key,)).rowcount == 0:
            return False
        self._pending.append(_Change(_DELETE, key, b""))
        return True

    def _delete_range_sync(self, start: str, end: str) -> int:
        deleted = [
            row[0]
            for row in self._db.execute(
                "DELETE FROM kv WHERE key >= ? AND key < ? RETURNING key", (start, end)
            )
        ]
        deleted.sort()
        self._pending.extend(_Change(_DELETE, k, b"") for k in deleted)
        return len(deleted)

    def _expire_leases_sync(self, lease_ids: Iterable[int], rev: int) -> None:
        del rev
        db = self._db
        for lease_id in lease_ids:
            doomed = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM kv WHERE lease = ? ORDER BY key", (lease_id,)
                )
            ]
            for key in doomed:
                self._delete_sync(key)
            db.execute("DELETE FROM leases WHERE id = ?", (lease_id,))
            self._live_leases.discard(lease_id)

    def _compact_sync(self, revision: int) -> None:
        if revision <= self._compact_rev:
            return
        self._db.execute("DELETE FROM events WHERE rev < ?", (revision,))
        self._set_meta("compact_revision", revision)
        self._compact_rev = revision

    # --- reads --------------------------------------------------------------------------------

    @stats.timed("get")
    async def get(self, key: str) -> api.Record | None:
        api.check_key(key)
        return await self._run(lambda: self._record(key))

    async def revision(self) -> int:
        return await self._run(lambda: self._rev)

    async def scan(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = api.DEFAULT_PAGE_SIZE,
    ) -> api.Page:
        p = api.check_prefix(prefix)
        api.check_limit(limit)
        end = _range_end(p)

        def job() -> api.Page:
            if start_after is not None and start_after >= p:
                sql, start = _SCAN_AFTER, start_after
            else:
                sql, start = _SCAN_FROM, p
            rows = self._db.execute(sql, (start, end, limit + 1)).fetchall()
            records = [
                api.Record(
                    key=r[0],
                    value=bytes(r[1]),
                    version=api.Version(r[2]),
                    create_revision=r[3],
                    session_id=r[4],
                )
                for r in rows[:limit]
            ]
            return api.Page(records=records, more=len(rows) > limit)

        return await self._run(job)

    def scan_all(
        self, prefix: str, *, page_size: int = api.DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[api.Record]:
        return api.scan_pages(self.scan, prefix, page_size)

    async def children(self, parent: str) -> list[str]:
        p = api.check_prefix(parent)
        end = _range_end(p)

        def job() -> list[str]:
            names: list[str] = []
            start = p
            while True:
                rows = self._db.execute(_CHILDREN_PAGE, (start, end)).fetchall()
                for (key,) in rows:
                    name = key[len(p) :].split("/", 1)[0]
                    if name and (not names or names[-1] != name):
                        names.append(name)
                if len(rows) < _CHILDREN_PAGE_SIZE:
                    return sorted(set(names))
                last: str = rows[-1][0]
                child = p + last[len(p) :].split("/", 1)[0]
                # Skip the rest of the last child's subtree (keys like child + '-x' sort
                # before child + '/', so they were already seen).
                start = child + "0" if last.startswith(child + "/") else last + "\x00"

        return await self._run(job)

    # --- writes -------------------------------------------------------------------------------

    @stats.timed("put")
    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version: api.Version | None = None,
        session: api.Session | None = None,
    ) -> api.Version:
        api.check_key(key)
        api.check_value(key, value)
        data = bytes(value)
        lease = self._lease_of(session)

        def body(rev: int) -> api.Version:
            if expected_version is not None:
                actual = self._version(key)
                if actual != expected_version:
                    raise api.BadVersionError(key, expected_version, actual)
            self._put_sync(key, data, lease, rev)
            return api.Version(rev)

        version = await self._run(lambda: self._write(body))
        stats.put_bytes(len(data))
        return version

    @stats.timed("del")
    async def delete(self, key: str, *, expected_version: api.Version | None = None) -> None:
        api.check_key(key)

        def body(rev: int) -> None:
            del rev
            actual = self._version(key)
            if actual == api.NOT_EXISTS:
                raise api.NotFoundError(key)
            if expected_version is not None and actual != expected_version:
                raise api.BadVersionError(key, expected_version, actual)
            self._delete_sync(key)

        await self._run(lambda: self._write(body))

    async def delete_prefix(self, prefix: str) -> int:
        p = api.check_prefix(prefix)

        def body(rev: int) -> int:
            del rev
            count = 0
            if prefix != "/":
                count += self._delete_sync(prefix)
            return count + self._delete_range_sync(p, _range_end(p))

        return await self._run(lambda: self._write(body))

    async def txn(
        self,
        compares: Sequence[api.Compare],
        success: Sequence[api.Op],
        failure: Sequence[api.Op] = (),
    ) -> api.TxnResult:
        api.check_txn(compares, success, failure)
        leases = {
            id(op): self._lease_of(op.session)
            for op in (*success, *failure)
            if isinstance(op, api.Put)
        }

        def body(rev: int) -> api.TxnResult:
            ok = all(self._version(c.key) == c.version for c in compares)
            versions: dict[str, api.Version] = {}
            for op in success if ok else failure:
                if isinstance(op, api.Put):
                    self._put_sync(op.key, bytes(op.value), leases[id(op)], rev)
                    versions[op.key] = api.Version(rev)
                else:
                    self._delete_sync(op.key)
                    versions[op.key] = api.NOT_EXISTS
            return api.TxnResult(succeeded=ok, versions=versions)

        return await self._run(lambda: self._write(body))

    async def next_id(self, name: str) -> int:
        key = keys.id_counter(name)

        def body(rev: int) -> int:
            record = self._record(key)
            value = int(record.value) + 1 if record is not None else 1
            self._put_sync(key, str(value).encode(), None, rev)
            return value

        return await self._run(lambda: self._write(body))

    async def compact(self, revision: int) -> None:
        def job() -> None:
            if revision > self._rev:
                raise ValueError(f"cannot compact at {revision}: the revision is {self._rev}")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._compact_sync(revision)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

        await self._run(job)

    # --- sessions -----------------------------------------------------------------------------

    def _lease_of(self, session: api.Session | None) -> int | None:
        if session is None:
            return None
        if not isinstance(session, EmbeddedSession) or session._store is not self:
            raise ValueError("the session belongs to another store")
        if not session.usable:
            raise api.SessionLostError(f"session {session.id} is lost or closed")
        return session.id

    async def session(self, ttl: float) -> api.Session:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")

        def job() -> int:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                lease_id = self._meta("lease_seq") + 1
                self._set_meta("lease_seq", lease_id)
                db.execute("INSERT INTO leases (id, ttl) VALUES (?, ?)", (lease_id, ttl))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._live_leases.add(lease_id)
            return lease_id

        lease_id = await self._run(job)
        session = EmbeddedSession(self, lease_id, ttl)
        self._sessions[lease_id] = session
        return session

    async def _expire_lease(self, lease_id: int) -> None:
        self._sessions.pop(lease_id, None)
        await self._run(lambda: self._write(lambda rev: self._expire_leases_sync([lease_id], rev)))

    # --- watches ------------------------------------------------------------------------------

    def _dispatch(self, rev: int, changes: list[_Change]) -> None:
        """On the loop, in commit order: hand a committed revision to every watcher."""
        self._dispatched_rev = rev
        for watcher in self._watchers:
            if not any(watcher.matches(c.key) for c in changes):
                continue
            if len(watcher.batches) >= _MAX_PENDING_BATCHES:
                watcher.batches.clear()
                watcher.need_history = True
            watcher.batches.append((rev, changes))
            watcher.wake.set()

    def _history_sync(self, watcher: _Watcher, start: int) -> tuple[int, list[api.WatchEvent]]:
        if start < self._compact_rev:
            raise api.WatchCompactedError(self._compact_rev)
        if watcher.prefix is not None:
            rows = self._db.execute(
                _HISTORY_RANGE, (start, watcher.prefix, _range_end(watcher.prefix))
            ).fetchall()
        else:
            rows = self._db.execute(_HISTORY_KEY, (start, watcher.key)).fetchall()
        events = [
            api.WatchEvent(
                type=api.EventType.PUT if t == _PUT else api.EventType.DELETE,
                key=k,
                value=bytes(v),
                revision=r,
            )
            for r, t, k, v in rows
        ]
        return self._rev, events

    def watch(
        self,
        key: str,
        *,
        prefix: bool = False,
        start_revision: int | None = None,
    ) -> AsyncIterator[api.WatchEvent]:
        if prefix:
            p: str | None = api.check_prefix(key)
        else:
            api.check_key(key)
            p = None
        if self._closed:
            raise api.StoreClosedError("the embedded store is closed")
        if start_revision is not None and start_revision < 1:
            raise ValueError(f"start_revision must be positive, got {start_revision}")
        # Registered now, synchronously: every revision dispatched after this call is queued.
        watcher = _Watcher(key=key, prefix=p, last_rev=self._dispatched_rev)
        if start_revision is not None:
            watcher.last_rev = start_revision - 1
            watcher.need_history = True
        self._watchers.add(watcher)
        return self._watch(watcher)

    async def _watch(self, watcher: _Watcher) -> AsyncIterator[api.WatchEvent]:
        try:
            while True:
                if watcher.closed:
                    return
                if watcher.need_history:
                    watcher.need_history = False
                    watcher.batches.clear()
                    start = watcher.last_rev + 1
                    upto, events = await self._run(
                        functools.partial(self._history_sync, watcher, start)
                    )
                    for event in events:
                        yield event
                    watcher.last_rev = max(watcher.last_rev, upto)
                    continue
                if not watcher.batches:
                    watcher.wake.clear()
                    await watcher.wake.wait()
                    continue
                rev, changes = watcher.batches.popleft()
                if rev <= watcher.last_rev:
                    continue
                watcher.last_rev = rev
                for c in changes:
                    if watcher.matches(c.key):
                        yield api.WatchEvent(
                            type=api.EventType.PUT if c.type == _PUT else api.EventType.DELETE,
                            key=c.key,
                            value=c.value,
                            revision=rev,
                        )
        finally:
            self._watchers.discard(watcher)
