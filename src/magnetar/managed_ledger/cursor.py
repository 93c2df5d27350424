"""Cursors: a subscription's (durable) or a reader's (non-durable) position in a managed
ledger, its acknowledgements, and — for durable ones — their persistence.

Why this module exists: reading, acknowledging and persisting have to agree on one state
(:class:`acks.AckState`) and one rule — after a crash a subscription redelivers at most what
was acknowledged since the last persist, and never skips an unacknowledged message.

Persistence of a durable cursor
    The state (mark-delete position, individually deleted entries, partial batches,
    properties) is written as one entry of the cursor's own ledger, at most once per
    ``cursor_persist_interval_s`` (changes in between are coalesced), and on close. The
    pointer record in the metadata store names that ledger; it is written by
    compare-and-set when the cursor starts a new ledger (first persist after an open, a
    full ledger, a failed one) and on close (with the ledger's last entry). Recovery reads
    the pointer, opens the ledger in recovery mode (fencing a previous owner's writes) and
    restores its last entry; with no readable entry, the pointer's mark-delete position.
    ``reset`` (which may move the position back) persists before it returns, so a crash
    cannot resurrect the acknowledgements it dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.acks import AckState
from magnetar.managed_ledger.api import EARLIEST, LATEST, Entry, Position
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.storage import Options, storage_error
from magnetar.metadata import api as md

log = logging.getLogger(__name__)


class CursorHost(Protocol):
    """What a cursor needs from its managed ledger: positions, reads, waiting for adds, and
    telling it about trims and fencing. Nothing private: the managed ledgers
    (:mod:`magnetar.managed_ledger.ledger`, :mod:`magnetar.managed_ledger.memory`) implement
    it and import this module; this module imports neither."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> api.ManagedLedgerConfig: ...
    @property
    def last_confirmed_entry(self) -> Position: ...
    @property
    def first_position(self) -> Position: ...
    @property
    def terminated(self) -> bool: ...
    @property
    def positions(self) -> LedgerList:
        """The ledger list: what exists, what follows what (read only)."""

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]: ...
    async def read_positions(self, positions: Iterable[Position]) -> list[Entry]: ...
    async def wait_for_entries(self, after: Position) -> None: ...
    def check_usable(self) -> None:
        """Raise when the managed ledger is closed or fenced."""

    def request_trim(self) -> None: ...
    def set_fenced(self, why: str) -> None: ...
    def forget_cursor(self, cursor: ManagedCursorImpl) -> None: ...


class CursorStorage(Protocol):
    """Where a durable cursor persists its state: the metadata store (its pointer record)
    and ledgers of its own. Without one (the in-memory managed ledger), a durable cursor's
    state lives in memory only."""

    @property
    def path(self) -> records.TopicPath: ...
    @property
    def store(self) -> md.MetadataStore: ...
    @property
    def options(self) -> Options: ...
    async def create_ledger(self, cursor: str | None = None) -> LedgerHandle: ...
    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> LedgerHandle: ...
    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger; a failure is logged, not raised."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background; the managed ledger awaits it on close."""


class PersistentHost(CursorHost, CursorStorage, Protocol):
    """A managed ledger that is also its cursors' storage."""


def owned_ledgers(properties: Mapping[str, int]) -> set[int]:
    """The ledgers a cursor's properties say it owns (:data:`api.OWNED_LEDGER_PROPERTIES`)."""
    return {int(properties[k]) for k in api.OWNED_LEDGER_PROPERTIES if k in properties}


def _now_ms() -> int:
    return int(time.time() * 1000)


class ManagedCursorImpl:
    """A cursor of one managed ledger (its :class:`CursorHost`). Build with :meth:`open_durable`,
    :meth:`recover` or :meth:`non_durable`."""

    def __init__(
        self,
        ml: CursorHost,
        name: str,
        *,
        durable: bool,
        state: AckState,
        storage: CursorStorage | None,
        pointer: records.CursorPointer | None = None,
        pointer_version: md.Version = md.NOT_EXISTS,
    ) -> None:
        self._ml = ml
        self._storage = storage
        """Where a durable cursor persists (None: in memory only)."""
        self._persistent = durable and storage is not None
        self._name = name
        self._durable = durable
        self._acks = state
        self._read_position = ml.positions.next_position(state.mark_delete)
        self._epoch = 0
        self._consumed = 0
        self._closed = False
        self._fenced = False
        # persistence (durable only)
        self._pointer = pointer
        self._pointer_version = pointer_version
        self._ledger: LedgerHandle | None = None
        self._ledger_entries = 0
        self._ledger_broken = False
        self._dirty = False
        self._last_persist = 0.0
        self._persist_timer: asyncio.TimerHandle | None = None
        self._persist_task: asyncio.Task[None] | None = None
        self._persists = 0
        self.mark_delete_moves = 0
        """Times the mark-delete position moved (Pulsar's MarkDeleteRate counts these)."""
        self._persist_lock = asyncio.Lock()

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def non_durable(
        cls, ml: CursorHost, name: str, start: Position, *, inclusive: bool
    ) -> ManagedCursorImpl:
        lac = ml.last_confirmed_entry
        if start == EARLIEST:
            first = ml.first_position
            mark = Position(first.ledger_id, first.entry_id - 1)
        elif start == LATEST or start > lac:
            mark = lac  # the next entry added is the first read
        else:
            first = ml.positions.normalize(start) or ml.positions.next_position(lac)
            if inclusive or first != start:
                mark = Position(first.ledger_id, first.entry_id - 1)
            else:
                mark = first
        return cls(ml, name, durable=False, state=AckState(mark), storage=None)

    @classmethod
    def add_non_durable(
        cls,
        ml: CursorHost,
        cursors: dict[str, ManagedCursorImpl],
        name: str,
        start: Position,
        *,
        inclusive: bool,
    ) -> ManagedCursorImpl:
        """A new reader's cursor, entered in ``cursors`` (the managed ledger's open ones);
        CursorAlreadyExistsError while one of that name is open."""
        existing = cursors.get(name)
        if existing is not None and not existing.closed:
            raise api.CursorAlreadyExistsError(f"{ml.name}: cursor {name} exists")
        cursor = cursors[name] = cls.non_durable(ml, name, start, inclusive=inclusive)
        return cursor

    @classmethod
    async def open_durable(
        cls,
        ml: PersistentHost,
        name: str,
        *,
        initial_position: api.InitialPosition,
        properties: Mapping[str, int] | None,
    ) -> ManagedCursorImpl:
        key = ml.path.cursor_key(name)
        record = await ml.store.get(key)
        if record is None:
            if initial_position is api.InitialPosition.EARLIEST:
                first = ml.first_position
                mark = Position(first.ledger_id, first.entry_id - 1)
            else:
                mark = ml.last_confirmed_entry
            pointer = records.CursorPointer(
                records.NO_LEDGER, mark, last_active_ms=_now_ms(), properties=dict(properties or {})
            )
            try:
                version = await ml.store.put(key, pointer.to_json(), expected_version=md.NOT_EXISTS)
            except md.BadVersionError:
                pass  # created meanwhile (by another owner): recover it
            else:
                log.info("%s: cursor %s created at %s", ml.name, name, mark)
                return cls(
                    ml,
                    name,
                    durable=True,
                    state=AckState(mark, pointer.properties),
                    storage=ml,
                    pointer=pointer,
                    pointer_version=version,
                )
        cursor = await cls.recover(ml, name)
        if cursor is None:
            raise api.CursorNotFoundError(f"{ml.name}: cursor {name} vanished while opened")
        return cursor

    @classmethod
    async def recover(cls, ml: PersistentHost, name: str) -> ManagedCursorImpl | None:
        """The durable cursor ``name`` as last persisted, None when it does not exist."""
        record = await ml.store.get(ml.path.cursor_key(name))
        if record is None:
            return None
        pointer = records.CursorPointer.from_json(record.value)
        state = AckState(pointer.mark_delete, pointer.properties)
        if pointer.cursor_ledger_id != records.NO_LEDGER:
            try:
                handle = await ml.open_ledger(pointer.cursor_ledger_id, recovery=True)
            except ledger_errors.NoSuchLedgerError:
                log.warning(
                    "%s: cursor %s: ledger %d is gone; using the pointer's position %s",
                    ml.name,
                    name,
                    pointer.cursor_ledger_id,
                    pointer.mark_delete,
                )
            else:
                last = handle.last_add_confirmed
                if last >= 0:
                    ((_, raw),) = await handle.read(last, last)
                    state = AckState.decode(raw)
        log.info("%s: cursor %s recovered at %s", ml.name, name, state.mark_delete)
        return cls(
            ml,
            name,
            durable=True,
            state=state,
            storage=ml,
            pointer=pointer,
            pointer_version=record.version,
        )

    # --- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        return self._durable

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def mark_delete_position(self) -> Position:
        return self._acks.mark_delete

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def properties(self) -> Mapping[str, int]:
        return self._acks.properties

    @property
    def persists(self) -> int:
        """State entries written so far (for tests and stats)."""
        return self._persists

    def _check_open(self) -> None:
        if self._closed:
            raise api.ManagedLedgerClosedError(f"{self._ml.name}: cursor {self._name} is closed")

    # --- reading ------------------------------------------------------------------------------

    async def read_entries(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        self._check_open()
        ml = self._ml
        acks = self._acks
        out: list[Entry] = []
        size = 0
        while len(out) < max_entries:
            epoch = self._epoch
            start = self._read_position
            batch = await ml.read_entries(
                start,
                max_entries=max_entries - len(out),
                max_bytes=max_bytes - size if max_bytes > 0 else 0,
            )
            if epoch != self._epoch:  # rewound / seeked / reset meanwhile: drop this read
                return out
            if not batch:
                break
            for entry in batch:
                if not acks.is_deleted(entry.position):
                    out.append(entry)
                    size += len(entry.data)
            self._read_position = ml.positions.next_position(batch[-1].position)
            if out or (max_bytes > 0 and size >= max_bytes):
                break
        return out

    async def read_entries_or_wait(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        ml = self._ml
        while True:
            lac = ml.last_confirmed_entry
            entries = await self.read_entries(max_entries, max_bytes=max_bytes)
            if entries:
                return entries
            if ml.terminated and not self.has_more_entries():
                raise api.ManagedLedgerTerminatedError(f"{ml.name}: terminated, no more entries")
            ml.check_usable()
            await ml.wait_for_entries(lac)

    async def replay(self, positions: Iterable[Position]) -> list[Entry]:
        self._check_open()
        acks = self._acks
        return await self._ml.read_positions(p for p in positions if not acks.is_deleted(p))

    def has_more_entries(self) -> bool:
        nxt = self._ml.positions.normalize(self._read_position)
        return nxt is not None and nxt <= self._ml.last_confirmed_entry

    def rewind(self) -> None:
        self._epoch += 1
        self._read_position = self._ml.positions.next_position(self._acks.mark_delete)

    def seek(self, position: Position) -> None:
        self._epoch += 1
        md_pos = self._acks.mark_delete
        self._read_position = (
            position if position > md_pos else self._ml.positions.next_position(md_pos)
        )

    # --- acknowledging ------------------------------------------------------------------------

    def is_deleted(self, position: Position) -> bool:
        return self._acks.is_deleted(position)

    def backlog(self) -> int:
        return max(
            0, self._ml.positions.entries_after(self._acks.mark_delete) - self._acks.deleted_count()
        )

    def _after_ack(self, before: int, moved: bool) -> None:
        self._consumed += max(0, before - self.backlog())
        if moved:
            self.mark_delete_moves += 1
            md_pos = self._acks.mark_delete
            if self._read_position <= md_pos:
                self._read_position = self._ml.positions.next_position(md_pos)
            if self._durable:
                self._ml.request_trim()
        self._changed()

    def _check_position(self, position: Position) -> None:
        if position > self._ml.last_confirmed_entry:
            raise api.InvalidPositionError(
                f"{self._ml.name}: {position} is after the last confirmed entry "
                f"{self._ml.last_confirmed_entry}"
            )

    async def mark_delete(
        self, position: Position, *, properties: Mapping[str, int] | None = None
    ) -> None:
        self._check_open()
        self._check_position(position)
        if properties is not None:
            self._acks.properties = dict(properties)
        if position <= self._acks.mark_delete:
            if properties is not None:
                self._changed()
            return
        before = self.backlog()
        self._acks.set_mark_delete(position)
        self._acks.advance(self._ml.positions.next_position)
        self._after_ack(before, True)

    async def delete(self, positions: Sequence[Position]) -> None:
        self._check_open()
        acks = self._acks
        lac = self._ml.last_confirmed_entry
        before = self.backlog()
        changed = False
        contains = self._ml.positions.contains
        for p in positions:
            if p > lac:
                raise api.InvalidPositionError(f"{self._ml.name}: {p} is after {lac}")
            if contains(p):  # else: in a deleted ledger or past a ledger's end — nothing to do
                changed = acks.delete(p) or changed
        if not changed:
            return
        moved = acks.advance(self._ml.positions.next_position)
        self._after_ack(before, moved)

    async def delete_batch_indexes(
        self, position: Position, *, acked: Iterable[int], batch_size: int
    ) -> None:
        self._check_open()
        self._check_position(position)
        if self._acks.batch_ack(position, acked, batch_size):
            await self.delete([position])
        else:
            self._changed()

    def batch_ack_set(self, position: Position) -> list[int] | None:
        return self._acks.unacked_batch_words(position)

    async def skip(self, n: int) -> None:
        self._check_open()
        if n <= 0:
            return
        ml = self._ml
        acks = self._acks
        lac = ml.last_confirmed_entry
        if acks.deleted_count() == 0:
            target = ml.positions.position_after(acks.mark_delete, n)
        else:
            pos = target = acks.mark_delete
            counted = 0
            while counted < n:
                nxt = ml.positions.normalize(ml.positions.next_position(pos))
                if nxt is None or nxt > lac:
                    break
                pos = nxt
                if not acks.is_deleted(pos):
                    counted += 1
                    target = pos
        if target > acks.mark_delete:
            await self.mark_delete(target)

    async def clear_backlog(self) -> None:
        self._check_open()
        lac = self._ml.last_confirmed_entry
        if lac > self._acks.mark_delete:
            await self.mark_delete(lac)

    async def reset(self, position: Position) -> None:
        self._check_open()
        ml = self._ml
        if position == EARLIEST:
            target = ml.first_position
        elif position == LATEST or position > ml.last_confirmed_entry:
            target = ml.positions.next_position(ml.last_confirmed_entry)
        else:
            target = ml.positions.normalize(position) or ml.positions.next_position(
                ml.last_confirmed_entry
            )
        self._epoch += 1
        self._acks.clear()
        self._acks.set_mark_delete(Position(target.ledger_id, target.entry_id - 1))
        self._read_position = target
        log.info("%s: cursor %s reset to %s", ml.name, self._name, target)
        if self._durable:
            self._dirty = True
            await self.flush()

    # --- stats --------------------------------------------------------------------------------

    def stats(self) -> api.CursorStats:
        if self._closed:
            state = "Closed"
        elif self._fenced:
            state = "Fenced"
        elif not self._persistent or self._ledger is not None:
            state = "Open"
        else:
            state = "NoLedger"
        ledger_id = -1
        if self._ledger is not None:
            ledger_id = self._ledger.ledger_id
        elif self._pointer is not None:
            ledger_id = self._pointer.cursor_ledger_id
        return api.CursorStats(
            name=self._name,
            durable=self._durable,
            mark_delete_position=self._acks.mark_delete,
            read_position=self._read_position,
            individually_deleted=self._acks.ranges_str(),
            messages_consumed=self._consumed,
            cursor_ledger_id=ledger_id,
            state=state,
            properties=dict(self._acks.properties),
        )

    # --- persistence --------------------------------------------------------------------------

    def _changed(self) -> None:
        if not self._persistent or self._closed or self._fenced:
            return
        self._dirty = True
        if self._persist_timer is not None or self._persist_task is not None:
            return  # a persist is due or running; it picks this change up
        self._schedule_persist()

    def _schedule_persist(self) -> None:
        interval = self._ml.config.cursor_persist_interval_s
        delay = max(0.0, self._last_persist + interval - time.monotonic())
        self._persist_timer = asyncio.get_running_loop().call_later(delay, self._start_persist)

    def _start_persist(self) -> None:
        self._persist_timer = None
        if self._closed or self._fenced or not self._dirty or self._persist_task is not None:
            return
        self._persist_task = asyncio.create_task(self._persist_in_background())

    async def _persist_in_background(self) -> None:
        try:
            await self._persist()
        except Exception as err:
            log.warning("%s: cursor %s: persist failed: %s", self._ml.name, self._name, err)
        finally:
            self._persist_task = None
            if self._dirty and not self._closed and not self._fenced:
                self._schedule_persist()

    async def flush(self) -> None:
        """Persist the current state now (waiting for a persist in flight first)."""
        if not self._persistent or self._fenced:
            return
        if self._persist_timer is not None:
            self._persist_timer.cancel()
            self._persist_timer = None
        while self._persist_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._persist_task)
        if self._dirty:
            try:
                await self._persist()
            except (ledger_errors.LedgerError, md.MetadataError) as err:
                raise self._ml_error(err) from err

    def _store(self) -> CursorStorage:
        assert self._storage is not None, "only a persistent cursor writes its state"
        return self._storage

    def _ml_error(self, err: BaseException) -> api.ManagedLedgerError:
        return storage_error(err)

    async def _persist(self) -> None:
        """Write the state now: one entry of the cursor ledger (a new ledger when needed).
        Persists are serialised: a ledger switch must never race another."""
        async with self._persist_lock:
            if self._dirty and not self._fenced:
                await self._persist_locked()

    async def _persist_locked(self) -> None:
        snapshot = self._acks.encode()
        mark = self._acks.mark_delete
        properties = dict(self._acks.properties)
        self._dirty = False
        self._last_persist = time.monotonic()
        try:
            if (
                self._ledger is None
                or self._ledger_broken
                or self._ledger_entries >= self._store().options.cursor_ledger_max_entries
            ):
                await self._switch_ledger(snapshot, mark, properties)
            else:
                await self._ledger.append(snapshot)
                self._ledger_entries += 1
            self._persists += 1
        except ledger_errors.LedgerFencedError as err:
            self._set_fenced(str(err))
            raise
        except md.BadVersionError as err:
            self._set_fenced(str(err))
            raise
        except Exception:
            self._dirty = True
            self._ledger_broken = True
            raise

    async def _switch_ledger(
        self, snapshot: bytes, mark: Position, properties: dict[str, int]
    ) -> None:
        ml = self._store()
        new = await ml.create_ledger(cursor=self._name)
        try:
            await new.append(snapshot)
            pointer = records.CursorPointer(
                new.ledger_id, mark, last_active_ms=_now_ms(), properties=properties
            )
            self._pointer_version = await ml.store.put(
                ml.path.cursor_key(self._name),
                pointer.to_json(),
                expected_version=self._pointer_version,
            )
        except BaseException:
            ml.spawn(ml.delete_ledger(new.ledger_id))
            raise
        old_handle = self._ledger
        old_id = self._pointer.cursor_ledger_id if self._pointer is not None else records.NO_LEDGER
        self._pointer = pointer
        self._ledger = new
        self._ledger_entries = 1
        self._ledger_broken = False
        if old_handle is not None:
            with contextlib.suppress(ledger_errors.LedgerError):
                await old_handle.close()
        if old_id != records.NO_LEDGER and old_id != new.ledger_id:
            ml.spawn(ml.delete_ledger(old_id))

    def _set_fenced(self, why: str) -> None:
        if not self._fenced:
            log.warning("%s: cursor %s fenced: %s", self._ml.name, self._name, why)
            self._fenced = True
            self._ml.set_fenced(f"cursor {self._name}: {why}")

    def abandon(self) -> None:
        """Stop persisting (the managed ledger was fenced or failed to open)."""
        self._fenced = True
        if self._persist_timer is not None:
            self._persist_timer.cancel()
            self._persist_timer = None

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if self._persistent and not self._fenced:
                await self.flush()
                await self._close_ledger()
        finally:
            self._closed = True
            if self._persist_timer is not None:
                self._persist_timer.cancel()
                self._persist_timer = None
            if not self._durable:  # a reader's cursor is gone with it (durable ones stay
                self._ml.forget_cursor(self)  # listed: they still hold their position)

    async def _close_ledger(self) -> None:
        """Close the cursor ledger and record its end and the position in the pointer."""
        ml, name = self._store(), self._ml.name
        handle = self._ledger
        if handle is None:
            return
        try:
            await handle.close()
        except ledger_errors.LedgerError as err:
            log.warning("%s: cursor %s: close of its ledger failed: %s", name, self._name, err)
            return
        pointer = records.CursorPointer(
            handle.ledger_id,
            self._acks.mark_delete,
            last_entry_id=handle.last_add_confirmed,
            last_active_ms=_now_ms(),
            properties=dict(self._acks.properties),
        )
        try:
            self._pointer_version = await ml.store.put(
                ml.path.cursor_key(self._name),
                pointer.to_json(),
                expected_version=self._pointer_version,
            )
            self._pointer = pointer
        except md.BadVersionError as err:
            self._set_fenced(str(err))
        except md.MetadataError as err:
            log.warning("%s: cursor %s: pointer update failed: %s", name, self._name, err)
        self._ledger = None

    async def destroy(self) -> None:
        """Delete the cursor: its pointer and its ledgers."""
        self._closed = True
        self.abandon()
        if self._persist_task is not None:
            self._persist_task.cancel()
            with contextlib.suppress(BaseException):
                await self._persist_task
        if not self._persistent:
            return
        ml = self._store()
        ids = {self._pointer.cursor_ledger_id if self._pointer else records.NO_LEDGER}
        if self._ledger is not None:
            ids.add(self._ledger.ledger_id)
        ids.update(owned_ledgers(self._acks.properties))
        with contextlib.suppress(md.NotFoundError):
            await ml.store.delete(ml.path.cursor_key(self._name))
        for lid in ids - {records.NO_LEDGER}:
            await ml.delete_ledger(lid)
        log.info("%s: cursor %s deleted", self._ml.name, self._name)


if TYPE_CHECKING:

    def _conforms(cursor: ManagedCursorImpl) -> api.ManagedCursor:
        return cursor
