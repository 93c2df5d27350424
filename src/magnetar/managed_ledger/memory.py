"""An in-memory managed ledger: the same contract as the one over bookies, with nothing stored.

Why this module exists: the broker core (producers, subscriptions, topics) is tested
in-process against a managed ledger that behaves like the real one -- positions across
ledgers, roll-over, trimming, durable and non-durable cursors with the real acknowledgement
logic -- without bookies or a metadata store. It is built from the real parts
(:class:`~magnetar.managed_ledger.ledger_list.LedgerList` for positions and trimming,
:class:`~magnetar.managed_ledger.cursor.ManagedCursorImpl` for cursors, in memory); the
contract suite in ``tests/integration/managed_ledger/test_contract.py`` checks both
implementations alike.

What lives only as long as the factory: the entries, the ledger list and durable cursors'
state (a reopened managed ledger finds them; a new factory starts empty). Adds complete at
once (in call order); a ledger rolls over after ``max_entries_per_ledger`` entries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from magnetar.common.buffers import Payload
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.acks import AckState
from magnetar.managed_ledger.api import Entry, Position
from magnetar.managed_ledger.cursor import CursorHost, ManagedCursorImpl, owned_ledgers
from magnetar.managed_ledger.ledger_list import LedgerList, ListedPositions


class MemoryState:
    """What outlives one open instance: entries by ledger, the list, durable cursors."""

    def __init__(self) -> None:
        self.entries: dict[int, list[bytes]] = {}
        self.list = LedgerList()
        self.next_ledger_id = 1
        self.cursors: dict[str, AckState] = {}
        self.aux: dict[int, MemoryAuxLedger] = {}

    def new_ledger(self) -> int:
        lid = self.next_ledger_id
        self.next_ledger_id += 1
        self.entries[lid] = []
        return lid


class MemoryAuxLedger:
    """An aux ledger in memory (:class:`api.AuxLedger`)."""

    def __init__(self, ledger_id: int) -> None:
        self._id = ledger_id
        self.entries: list[bytes] = []
        self.closed = False
        self.last_add_confirmed = -1

    @property
    def ledger_id(self) -> int:
        return self._id

    @property
    def length(self) -> int:
        return sum(len(e) for e in self.entries)

    def append(self, data: Payload) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.closed:
            fut.set_exception(api.ManagedLedgerClosedError(f"ledger {self._id} is closed"))
            return fut
        self.entries.append(bytes(data))
        self.last_add_confirmed = len(self.entries) - 1
        fut.set_result(self.last_add_confirmed)
        return fut

    async def close(self) -> None:
        self.closed = True

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]:
        if first < 0 or last < first or last > self.last_add_confirmed:
            raise api.InvalidPositionError(f"ledger {self._id}: no entries {first}..{last}")
        return [(i, self.entries[i]) for i in range(first, last + 1)]


class MemoryManagedLedger(ListedPositions):
    """One managed ledger kept in memory (``stored``: what an earlier instance of the same
    name left; a factory passes it, a new one starts empty)."""

    def __init__(
        self,
        name: str,
        config: api.ManagedLedgerConfig | None = None,
        stored: MemoryState | None = None,
    ) -> None:
        self._name = name
        self.config = config or api.ManagedLedgerConfig()
        self._stored = stored = stored if stored is not None else MemoryState()
        self._list = stored.list
        self._cursors: dict[str, ManagedCursorImpl] = {}
        """Open cursors; a durable cursor's state (its AckState) is shared with ``stored``, so
        a reopened managed ledger finds it as last changed."""
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False
        self._entries_added = 0
        self._background: set[asyncio.Task[None]] = set()
        lst = self._list
        if lst.info.terminated_position is None and lst.current_id is None:
            self._start_ledger()
        for cursor_name, state in stored.cursors.items():
            self._cursors[cursor_name] = self._cursor(cursor_name, state, durable=True)

    # --- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def total_size(self) -> int:
        lst = self._list
        return sum(len(e) for lid in lst.ids for e in self._stored.entries[lid])

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def entries_added(self) -> int:
        return self._entries_added

    @property
    def terminated(self) -> bool:
        return self._list.info.terminated_position is not None

    @property
    def cursors(self) -> Mapping[str, api.ManagedCursor]:
        return self._cursors

    def ledgers(self) -> list[api.LedgerInfo]:
        lst = self._list
        return [
            api.LedgerInfo(
                lid,
                lst.entries_in(lid),
                sum(len(e) for e in self._stored.entries[lid][: lst.entries_in(lid)]),
                lst.records[lid].timestamp_ms,
            )
            for lid in lst.ids
        ]

    # --- adds ---------------------------------------------------------------------------------

    def _state_error(self) -> api.ManagedLedgerError:
        if self.terminated:
            return api.ManagedLedgerTerminatedError(f"{self._name}: terminated")
        return api.ManagedLedgerClosedError(f"{self._name}: closed")

    def add(self, data: Payload, done: api.AddDone) -> None:
        """``append``'s outcome handed to ``done`` by its future's callback (so never from
        inside this call)."""

        def settled(fut: asyncio.Future[Position]) -> None:
            if fut.cancelled():
                done(None, asyncio.CancelledError())
            elif (error := fut.exception()) is not None:
                done(None, error)
            else:
                done(fut.result(), None)

        self.append(data).add_done_callback(settled)

    def append(self, data: Payload) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        if self._closed or self.terminated:
            fut.set_exception(self._state_error())
            return fut
        lst = self._list
        lid = lst.current_id
        assert lid is not None
        stored = self._stored.entries[lid]
        stored.append(bytes(data))
        lst.current_confirmed = len(stored)
        lst.lac = Position(lid, len(stored) - 1)
        self._entries_added += 1
        fut.set_result(lst.lac)
        self._wake()
        if len(stored) >= self.config.max_entries_per_ledger:
            self._close_current()
            self._start_ledger()
        return fut

    async def add_entry(self, data: Payload) -> Position:
        return await self.append(data)

    def _start_ledger(self) -> None:
        lst = self._list
        lid = self._stored.new_ledger()
        lst.apply(lst.info.with_ledgers((*lst.info.ledgers, records.LedgerRecord(lid))))
        lst.set_current(lid)
        if lst.lac.ledger_id < 0:
            lst.lac = Position(lid, -1)

    def _close_current(self, *, terminated: bool = False) -> None:
        lst = self._list
        lid = lst.current_id
        if lid is None:
            return
        stored = self._stored.entries[lid]
        ledgers = [r for r in lst.info.ledgers if r.ledger_id != lid]
        if stored:
            final = records.LedgerRecord(
                lid,
                entries=len(stored),
                size=sum(len(e) for e in stored),
                timestamp_ms=int(time.time() * 1000),
            )
            ledgers.append(final)
        info = lst.info.with_ledgers(tuple(ledgers))
        if terminated:
            info = records.ManagedLedgerInfo(info.ledgers, lst.lac, info.properties)
        lst.current_id = None
        lst.apply(info)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait_for_entries(self, after: Position) -> None:
        while self._list.lac <= after and not self._closed and not self.terminated:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut

    # --- reads --------------------------------------------------------------------------------

    def _entry(self, p: Position) -> Entry:
        return Entry(p, self._stored.entries[p.ledger_id][p.entry_id])

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        lst = self._list
        out: list[Entry] = []
        size = 0
        pos = lst.normalize(start)
        while pos is not None and len(out) < max_entries and lst.contains(pos):
            entry = self._entry(pos)
            out.append(entry)
            size += len(entry.data)
            if 0 < max_bytes <= size:
                break
            pos = lst.normalize(lst.next_position(pos))
        return out

    async def read_entry(self, position: Position) -> Entry:
        if not self._list.contains(position):
            raise api.InvalidPositionError(f"{self._name}: no entry at {position}")
        return self._entry(position)

    async def read_positions(self, positions: Iterable[Position]) -> list[Entry]:
        lst = self._list
        return [self._entry(p) for p in sorted({p for p in positions if lst.contains(p)})]

    # --- aux ledgers ---------------------------------------------------------------------------

    async def create_aux_ledger(self, purpose: str) -> api.AuxLedger:
        lid = self._stored.next_ledger_id
        self._stored.next_ledger_id += 1
        aux = self._stored.aux[lid] = MemoryAuxLedger(lid)
        return aux

    async def open_aux_ledger(self, ledger_id: int) -> api.AuxLedger:
        aux = self._stored.aux.get(ledger_id)
        if aux is None:
            raise api.StorageUnavailableError(f"{self._name}: no ledger {ledger_id}")
        aux.closed = True
        return aux

    async def delete_aux_ledger(self, ledger_id: int) -> None:
        self._stored.aux.pop(ledger_id, None)

    # --- cursors ------------------------------------------------------------------------------

    def _cursor(self, name: str, state: AckState, *, durable: bool) -> ManagedCursorImpl:
        return ManagedCursorImpl(self, name, durable=durable, state=state, storage=None)

    def check_usable(self) -> None:
        if self._closed:
            raise self._state_error()

    async def new_non_durable_cursor(
        self, name: str, start: Position, *, inclusive: bool = True
    ) -> api.ManagedCursor:
        self.check_usable()
        return ManagedCursorImpl.add_non_durable(
            self, self._cursors, name, start, inclusive=inclusive
        )

    async def open_cursor(
        self,
        name: str,
        *,
        initial_position: api.InitialPosition = api.InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> api.ManagedCursor:
        self.check_usable()
        existing = self._cursors.get(name)
        if existing is not None and not existing.closed:
            if not existing.durable:
                raise api.CursorAlreadyExistsError(f"{name}: a non-durable cursor")
            return existing
        if initial_position is api.InitialPosition.EARLIEST:
            first = self.first_position
            mark = Position(first.ledger_id, first.entry_id - 1)
        else:
            mark = self.last_confirmed_entry
        state = self._stored.cursors.get(name)
        if state is None:  # new; else closed in this instance, its state kept
            state = AckState(mark, dict(properties or {}))
            self._stored.cursors[name] = state
        cursor = self._cursor(name, state, durable=True)
        self._cursors[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        cursor = self._cursors.pop(name, None)
        if cursor is None and name not in self._stored.cursors:
            raise api.CursorNotFoundError(f"{self._name}: no cursor {name}")
        state = self._stored.cursors.pop(name, None)
        if state is not None:
            for lid in owned_ledgers(state.properties):
                self._stored.aux.pop(lid, None)
        if cursor is not None:
            await cursor.destroy()
        self.request_trim()

    def forget_cursor(self, cursor: ManagedCursorImpl) -> None:
        if self._cursors.get(cursor.name) is cursor:
            del self._cursors[cursor.name]

    def set_fenced(self, why: str) -> None:
        raise AssertionError(f"{self._name}: an in-memory managed ledger is never fenced: {why}")

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- trimming -----------------------------------------------------------------------------

    def request_trim(self) -> None:
        """Trim now: ledgers every durable cursor acknowledged and retention lets go."""
        marks = [c.mark_delete_position for c in self._cursors.values() if c.durable]
        lst = self._list
        doomed = lst.trimmable(
            min(marks) if marks else lst.lac,
            total_size=self.total_size,
            now_ms=int(time.time() * 1000),
            retention_time_s=self.config.retention_time_s,
            retention_bytes=self.config.retention_bytes,
        )
        if doomed:
            lst.apply(lst.info.with_ledgers(lst.info.ledgers[len(doomed) :]))
            for r in doomed:
                del self._stored.entries[r.ledger_id]

    # --- terminate, close, delete -------------------------------------------------------------

    async def terminate(self) -> Position:
        if not self.terminated:
            self.check_usable()
            self._close_current(terminated=True)
            self._wake()
        return self._list.lac

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        for cursor in list(self._cursors.values()):
            await cursor.close()
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def delete(self) -> None:
        await self.close()
        self._stored.entries.clear()
        self._stored.cursors.clear()
        self._stored.aux.clear()


class MemoryManagedLedgerFactory:
    """Managed ledgers in memory, one open instance per name (as the real factory)."""

    def __init__(self, default_config: api.ManagedLedgerConfig | None = None) -> None:
        self.default_config = default_config or api.ManagedLedgerConfig()
        self._stored: dict[str, MemoryState] = {}
        self._open: dict[str, MemoryManagedLedger] = {}
        self._closed = False

    async def open(
        self, name: str, config: api.ManagedLedgerConfig | None = None
    ) -> MemoryManagedLedger:
        if self._closed:
            raise api.ManagedLedgerClosedError("the managed-ledger factory is closed")
        path = records.parse_name(name).name
        ml = self._open.get(path)
        if ml is not None and not ml.closed:
            return ml
        stored = self._stored.setdefault(path, MemoryState())
        ml = MemoryManagedLedger(path, config or self.default_config, stored)
        self._open[path] = ml
        return ml

    async def exists(self, name: str) -> bool:
        return records.parse_name(name).name in self._stored

    async def delete(self, name: str) -> None:
        path = records.parse_name(name).name
        ml = self._open.pop(path, None)
        if ml is not None:
            await ml.delete()
        self._stored.pop(path, None)

    async def list(self, prefix: str) -> list[str]:
        _, name_prefix = records.domain_prefix(prefix)
        return sorted(n for n in self._stored if n.startswith(name_prefix + "/"))

    async def close(self) -> None:
        self._closed = True
        for ml in list(self._open.values()):
            await ml.close()


if TYPE_CHECKING:

    def _conforms(
        ml: MemoryManagedLedger, f: MemoryManagedLedgerFactory
    ) -> tuple[api.ManagedLedger, api.ManagedLedgerFactory, CursorHost]:
        return ml, f, ml
