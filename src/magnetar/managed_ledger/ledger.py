"""A topic's log over ledgers: the managed ledger one broker owns (DESIGN.md §4).

Why this module exists: it is the one place that decides which ledger an entry goes to,
what the ledger list in the metadata store says, and when a ledger may be deleted. Cursors
(:mod:`magnetar.managed_ledger.cursor`) ask it for entries, positions and counts.

Ownership
    ``open`` recovers the previous owner's open ledger (fencing it: that owner's next adds
    fail), records its final size, drops empty ledgers, creates a new ledger and writes the
    list by compare-and-set. Every later change of the list (roll-over, trim, terminate,
    close) is a compare-and-set on the version this instance last wrote: losing one means
    another broker took over, and the instance turns *fenced*.

Adds (the hot path)
    ``append`` hands the bytes to the current ledger handle at once (pipelined, no await,
    no copy); the handle completes adds in entry order after Aq bookies confirmed them,
    and each completion resolves the caller's future, fills the entry cache and wakes
    waiting readers. When the ledger is full (entries, bytes, age) a background roll-over
    stops sending, creates the next ledger while the old one drains, closes the old one,
    writes the list and sends the queued adds on — no add is reordered, and adds wait only
    for that. A failing ledger (not fenced) is rolled over the same way and its unconfirmed
    adds are sent again, in order, to the next one.

Reads
    By position across ledgers: cache first, then the bookies (the writer's handle for the
    current ledger, a read handle per closed ledger). Positions in deleted ledgers move to
    the first position that still exists.

Trimming
    Ledgers entirely before the slowest durable cursor's mark-delete position, and outside
    the retention window, are removed from the list (compare-and-set first) and then
    deleted; never the last ledger. It runs shortly after a mark-delete moves (rate-limited)
    and on a timer, which also rolls over an idle ledger past its maximum age.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.api import Entry, Position
from magnetar.managed_ledger.cache import EntryCache
from magnetar.metadata import api as md
from magnetar.metadata import keys

if TYPE_CHECKING:
    from magnetar.managed_ledger.cursor import ManagedCursorImpl

log = logging.getLogger(__name__)

MAX_ADD_ATTEMPTS = 3
"""Ledgers an add is tried on before it fails (each failure rolls over to a new ledger)."""
TRIM_MIN_INTERVAL_S = 0.2
"""Trims requested by moving mark-delete positions run at most this often."""
CAS_ATTEMPTS = 5
OPEN_ATTEMPTS = 5


class State(enum.Enum):
    WRITABLE = "LedgerOpened"
    ROLLING = "ClosingLedger"
    NO_LEDGER = "NoLedger"
    """The last roll-over failed: the next add tries again."""
    TERMINATED = "Terminated"
    FENCED = "Fenced"
    CLOSED = "Closed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Implementation knobs (not part of the per-topic config)."""

    trim_interval_s: float = 5.0
    cursor_ledger_max_entries: int = 10_000
    """A durable cursor starts a new cursor ledger after this many state entries."""


@dataclass(eq=False, slots=True)
class _AddOp:
    data: bytes
    future: asyncio.Future[Position]
    attempts: int = 0


@dataclass(slots=True)
class ReadStats:
    cache_hits: int = 0
    bookie_entries: int = 0
    """Entries read from bookies (cache misses)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def storage_error(err: BaseException) -> api.ManagedLedgerError:
    """The managed-ledger error a lower-layer failure surfaces as."""
    if isinstance(err, api.ManagedLedgerError):
        return err
    if isinstance(err, ledger_errors.LedgerFencedError | md.BadVersionError):
        return api.ManagedLedgerFencedError(str(err))
    return api.StorageUnavailableError(f"{type(err).__name__}: {err}")


class ManagedLedgerImpl:
    """One managed ledger owned by this process. Build with :meth:`open`."""

    def __init__(
        self,
        *,
        store: md.MetadataStore,
        ledgers: LedgerClient,
        path: records.TopicPath,
        config: api.ManagedLedgerConfig,
        options: Options,
        on_closed: Callable[[ManagedLedgerImpl], None] | None = None,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self.path = path
        self.config = config
        self.options = options
        self._on_closed = on_closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = State.CLOSED
        # ledger list (as last written) and derived lookups
        self._info = records.ManagedLedgerInfo()
        self._info_version = md.NOT_EXISTS
        self._info_lock = asyncio.Lock()
        self._ids: list[int] = []
        self._records: dict[int, records.LedgerRecord] = {}
        # current ledger
        self._handle: LedgerHandle | None = None
        self._current_id: int | None = None
        self._cur_sent = 0
        self._cur_sent_bytes = 0
        self._cur_confirmed = 0
        self._cur_created = 0.0
        self._check_entries = self._check_bytes = 0
        self._age_limited = False
        self._roll_deadline = 0.0
        self._lac = Position(-1, -1)
        self._queue: deque[_AddOp] = deque()
        self._retry: list[_AddOp] = []
        self._roll_task: asyncio.Task[None] | None = None
        self._next_ledger: asyncio.Future[LedgerHandle] | None = None
        """The next ledger, created ahead once the current one is nearly full."""
        # readers
        self._readers: dict[int, LedgerHandle] = {}
        self._cache = EntryCache(config.cache_max_bytes)
        self._waiters: list[asyncio.Future[None]] = []
        self.read_stats = ReadStats()
        # cursors, trimming
        self._cursors: dict[str, ManagedCursorImpl] = {}
        self._cursor_lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._trim_handle: asyncio.TimerHandle | None = None
        self._trim_task: asyncio.Task[None] | None = None
        self._last_trim = 0.0
        self._entries_added = 0
        self._background: set[asyncio.Task[None]] = set()

    # --- opening -----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        *,
        store: md.MetadataStore,
        ledgers: LedgerClient,
        path: records.TopicPath,
        config: api.ManagedLedgerConfig,
        options: Options,
        on_closed: Callable[[ManagedLedgerImpl], None] | None = None,
    ) -> ManagedLedgerImpl:
        ml = cls(
            store=store,
            ledgers=ledgers,
            path=path,
            config=config,
            options=options,
            on_closed=on_closed,
        )
        try:
            await ml._initialize()
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            await ml._abandon()
            raise storage_error(err) from err
        except BaseException:
            await ml._abandon()
            raise
        return ml

    async def _initialize(self) -> None:
        new_handle: LedgerHandle | None = None
        for _attempt in range(OPEN_ATTEMPTS):
            info, version = await self._read_info()
            ledger_list = list(info.ledgers)
            if ledger_list:
                ledger_list[-1] = await self._recover_last(ledger_list[-1])
            empty = [r.ledger_id for r in ledger_list if r.entries == 0]
            kept = tuple(r for r in ledger_list if r.entries > 0)
            if info.terminated_position is None:
                if new_handle is None:
                    new_handle = await self._create_ledger()
                kept = (*kept, records.LedgerRecord(new_handle.ledger_id))
            new_info = info.with_ledgers(kept)
            try:
                self._info_version = await self._store.put(
                    self.path.info_key, new_info.to_json(), expected_version=version
                )
                break
            except md.BadVersionError:
                # The previous owner changed the list meanwhile (a roll-over it had under way
                # when its ledger was fenced): read it again and recover its new last ledger.
                log.info("%s: ledger list changed while opening; again", self.name)
        else:
            if new_handle is not None:
                self._spawn(self._delete_ledger(new_handle.ledger_id))
            raise api.ManagedLedgerFencedError(
                f"{self.name}: another owner keeps changing the ledger list"
            )
        if new_handle is not None and info.terminated_position is not None:
            self._spawn(self._delete_ledger(new_handle.ledger_id))  # terminated meanwhile
            new_handle = None
        self._apply_info(new_info)
        for lid in empty:
            self._readers.pop(lid, None)
            self._spawn(self._delete_ledger(lid))
        last_with_entries = next((r for r in reversed(kept) if r.entries > 0), None)
        if new_handle is not None:
            self._set_current(new_handle)
            self._state = State.WRITABLE
        else:
            self._state = State.TERMINATED
        if last_with_entries is not None:
            self._lac = Position(last_with_entries.ledger_id, last_with_entries.entries - 1)
        elif self._current_id is not None:
            self._lac = Position(self._current_id, -1)
        elif info.terminated_position is not None:
            self._lac = info.terminated_position
        await self._load_cursors()
        self._timer = asyncio.create_task(self._run_timer())
        log.info(
            "%s opened: ledgers %s, current %s, last confirmed %s",
            self.name,
            self._ids,
            self._current_id,
            self._lac,
        )

    async def _read_info(self) -> tuple[records.ManagedLedgerInfo, md.Version]:
        """The ledger list and its version, created empty when the key does not exist."""
        key = self.path.info_key
        record = await self._store.get(key)
        if record is not None:
            return records.ManagedLedgerInfo.from_json(record.value), record.version
        info = records.ManagedLedgerInfo()
        try:
            return info, await self._store.put(key, info.to_json(), expected_version=md.NOT_EXISTS)
        except md.BadVersionError:
            record = await self._store.get(key)
            if record is None:
                raise api.ManagedLedgerFencedError(f"{self.name}: deleted while opened") from None
            return records.ManagedLedgerInfo.from_json(record.value), record.version

    async def _recover_last(self, last: records.LedgerRecord) -> records.LedgerRecord:
        """Fence and close the previous owner's last ledger; its record with the final end
        (no entries when its metadata is gone)."""
        handle = self._readers.get(last.ledger_id)
        if handle is None or not handle.closed:
            try:
                handle = await self._ledgers.open(last.ledger_id, recovery=True)
            except ledger_errors.NoSuchLedgerError:
                log.warning("%s: ledger %d has no metadata; dropped", self.name, last.ledger_id)
                return records.LedgerRecord(last.ledger_id)
            self._readers[last.ledger_id] = handle
        return records.LedgerRecord(
            last.ledger_id,
            entries=handle.last_add_confirmed + 1,
            size=handle.length,
            timestamp_ms=last.timestamp_ms or _now_ms(),
            offloaded=last.offloaded,
        )

    async def _load_cursors(self) -> None:
        from magnetar.managed_ledger.cursor import ManagedCursorImpl

        children = await self._store.children(self.path.cursors_key)
        names = [keys.unsegment(n) for n in children]
        recovered = await asyncio.gather(*(ManagedCursorImpl.recover(self, name) for name in names))
        for cursor in recovered:
            if cursor is not None:
                self._cursors[cursor.name] = cursor

    async def _abandon(self) -> None:
        """Undo a failed open: stop timers, forget handles (the ledgers stay listed)."""
        self._state = State.CLOSED
        if self._timer is not None:
            self._timer.cancel()
        for cursor in list(self._cursors.values()):
            cursor.abandon()

    def update_config(self, config: api.ManagedLedgerConfig) -> None:
        """Apply a new config (namespace policies changed): limits, retention, cache size
        take effect from now; quorum sizes from the next ledger on."""
        self.config = config
        self._cache.max_bytes = config.cache_max_bytes
        self._thresholds()
        self.request_trim()

    # --- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def state(self) -> State:
        return self._state

    @property
    def last_confirmed_entry(self) -> Position:
        return self._lac

    @property
    def first_position(self) -> Position:
        for lid in self._ids:
            if self.entries_in(lid) > 0:
                return Position(lid, 0)
        return self.next_position(self._lac)

    @property
    def number_of_entries(self) -> int:
        return sum(self.entries_in(lid) for lid in self._ids)

    @property
    def total_size(self) -> int:
        total = sum(r.size for lid, r in self._records.items() if lid != self._current_id)
        if self._handle is not None and self._current_id is not None:
            total += self._handle.length
        return total

    @property
    def entries_added(self) -> int:
        return self._entries_added

    @property
    def terminated(self) -> bool:
        return self._info.terminated_position is not None or self._state is State.TERMINATED

    @property
    def cursors(self) -> Mapping[str, api.ManagedCursor]:
        return self._cursors

    @property
    def cache(self) -> EntryCache:
        return self._cache

    @property
    def current_ledger_id(self) -> int | None:
        return self._current_id

    def ledgers(self) -> list[api.LedgerInfo]:
        out = []
        for lid in self._ids:
            r = self._records[lid]
            if lid == self._current_id and self._handle is not None:
                out.append(api.LedgerInfo(lid, self._cur_confirmed, self._handle.length, 0))
            else:
                out.append(
                    api.LedgerInfo(lid, r.entries, r.size, r.timestamp_ms, bool(r.offloaded))
                )
        return out

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ``internalStats`` shape (admin ``/internalStats``)."""
        current = self._current_id
        return {
            "entriesAddedCounter": self._entries_added,
            "numberOfEntries": self.number_of_entries,
            "totalSize": self.total_size,
            "currentLedgerEntries": self._cur_confirmed if current is not None else 0,
            "currentLedgerSize": self._handle.length if current and self._handle else 0,
            "waitingCursorsCount": len(self._waiters),
            "pendingAddEntriesCount": len(self._queue) + len(self._retry),
            "lastConfirmedEntry": str(self._lac),
            "state": self._state.value,
            "ledgers": [
                {
                    "ledgerId": i.ledger_id,
                    "entries": i.entries,
                    "size": i.size,
                    "timestamp": i.timestamp_ms,
                    "offloaded": i.offloaded,
                }
                for i in self.ledgers()
            ],
            "cursors": {
                name: {
                    "markDeletePosition": str(st.mark_delete_position),
                    "readPosition": str(st.read_position),
                    "individuallyDeletedMessages": st.individually_deleted,
                    "messagesConsumedCounter": st.messages_consumed,
                    "cursorLedger": st.cursor_ledger_id,
                    "state": st.state,
                    "properties": dict(st.properties),
                    "durable": st.durable,
                }
                for name, st in ((n, c.stats()) for n, c in self._cursors.items())
            },
            "cacheSize": self._cache.size,
        }

    # --- positions ----------------------------------------------------------------------------

    def entries_in(self, ledger_id: int) -> int:
        """Entries readable in ``ledger_id`` (0 for unknown or deleted ledgers)."""
        if ledger_id == self._current_id:
            return self._cur_confirmed
        r = self._records.get(ledger_id)
        return r.entries if r is not None else 0

    def contains(self, p: Position) -> bool:
        return 0 <= p.entry_id < self.entries_in(p.ledger_id)

    def normalize(self, p: Position) -> Position | None:
        """The first position at or after ``p`` that exists or will (in the current ledger);
        None when nothing can be at or after ``p``."""
        ids = self._ids
        i = bisect.bisect_left(ids, p.ledger_id)
        if i < len(ids) and ids[i] == p.ledger_id:
            lid = ids[i]
            e = p.entry_id if p.entry_id > 0 else 0
            if lid == self._current_id or e < self.entries_in(lid):
                return Position(lid, e)
            i += 1
        while i < len(ids):
            lid = ids[i]
            if lid == self._current_id or self.entries_in(lid) > 0:
                return Position(lid, 0)
            i += 1
        return None

    def next_position(self, p: Position) -> Position:
        """The position after ``p``, crossing into the next ledger at a closed ledger's end."""
        lid = p.ledger_id
        if lid == self._current_id or p.entry_id + 1 < self.entries_in(lid):
            return Position(lid, p.entry_id + 1)
        i = bisect.bisect_right(self._ids, lid)
        if i < len(self._ids):
            return Position(self._ids[i], 0)
        return Position(lid, p.entry_id + 1)

    def entries_after(self, p: Position) -> int:
        """Entries in (p, last confirmed]."""
        total = 0
        for lid in reversed(self._ids):
            if lid < p.ledger_id:
                break
            n = self.entries_in(lid)
            total += n if lid > p.ledger_id else max(0, n - p.entry_id - 1)
        return total

    def position_after(self, p: Position, n: int) -> Position:
        """The ``n``-th entry after ``p`` (counting every entry), at most the last confirmed."""
        pos = p
        remaining = n
        while remaining > 0:
            nxt = self.normalize(self.next_position(pos))
            if nxt is None or nxt > self._lac:
                break
            room = self.entries_in(nxt.ledger_id) - nxt.entry_id
            step = min(room, remaining)
            pos = Position(nxt.ledger_id, nxt.entry_id + step - 1)
            remaining -= step
        return pos

    # --- adds ---------------------------------------------------------------------------------

    def append(self, data: bytes) -> asyncio.Future[Position]:
        """Start an add; the future gives the position once durable on Aq bookies. Futures
        complete in call order."""
        loop = self._loop
        if loop is None:  # bound on first use: get_running_loop() costs a getpid() per call
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[Position] = loop.create_future()
        state = self._state
        if state is State.WRITABLE and not self._queue:
            self._send(_AddOp(data, fut))
        elif state is State.WRITABLE or state is State.ROLLING:
            self._queue.append(_AddOp(data, fut))
        elif state is State.NO_LEDGER:
            self._queue.append(_AddOp(data, fut))
            self._start_roll()
        else:
            fut.set_exception(self._state_error())
        return fut

    async def add_entry(self, data: bytes) -> Position:
        return await self.append(data)

    def _state_error(self) -> api.ManagedLedgerError:
        if self._state is State.FENCED:
            return api.ManagedLedgerFencedError(f"{self.name}: fenced by another owner")
        if self._state is State.TERMINATED:
            return api.ManagedLedgerTerminatedError(f"{self.name}: terminated")
        return api.ManagedLedgerClosedError(f"{self.name}: closed")

    def _send(self, op: _AddOp) -> None:
        handle = self._handle
        assert handle is not None
        op.attempts += 1
        lf = handle.append(op.data)
        self._cur_sent += 1
        self._cur_sent_bytes += len(op.data)
        lf.add_done_callback(functools.partial(self._on_added, op, handle))
        if self._cur_sent >= self._check_entries or self._cur_sent_bytes >= self._check_bytes:
            self._near_full()
        elif self._age_limited and time.monotonic() >= self._roll_deadline:
            self._start_roll()

    def _thresholds(self) -> None:
        """Per-ledger limits, computed once so each add compares two integers."""
        c = self.config
        self._check_entries = (c.max_entries_per_ledger * 9 + 9) // 10
        self._check_bytes = (c.max_ledger_bytes * 9 + 9) // 10
        self._age_limited = c.max_ledger_age_s > 0
        self._roll_deadline = self._cur_created + c.max_ledger_age_s

    def _near_full(self) -> None:
        """At 90% of a limit: create the next ledger ahead; at the limit: roll over."""
        c = self.config
        if self._next_ledger is None:
            self._next_ledger = asyncio.ensure_future(self._create_ledger())
        full = self._cur_sent >= c.max_entries_per_ledger or (
            self._cur_sent_bytes >= c.max_ledger_bytes
        )
        now = time.monotonic()
        if full and (c.min_ledger_age_s <= 0 or now - self._cur_created >= c.min_ledger_age_s):
            self._start_roll()
        elif self._age_limited and now >= self._roll_deadline:
            self._start_roll()

    def _on_added(self, op: _AddOp, handle: LedgerHandle, lf: asyncio.Future[int]) -> None:
        exc = ledger_errors.LedgerError("add cancelled") if lf.cancelled() else lf.exception()
        if exc is None:
            lid = handle.ledger_id
            eid = lf.result()
            pos = Position(lid, eid)
            self._lac = pos
            if lid == self._current_id:
                self._cur_confirmed = eid + 1
            self._entries_added += 1
            self._cache.put(lid, eid, op.data)
            if self._waiters:
                self._wake()
            if not op.future.done():
                op.future.set_result(pos)
            return
        if op.future.done():
            return
        if isinstance(exc, ledger_errors.LedgerFencedError):
            op.future.set_exception(api.ManagedLedgerFencedError(f"{self.name}: {exc}"))
            self._set_fenced(f"ledger {handle.ledger_id} fenced")
            return
        if self._state not in (State.WRITABLE, State.ROLLING, State.NO_LEDGER):
            op.future.set_exception(self._state_error())
            return
        if op.attempts >= MAX_ADD_ATTEMPTS:
            op.future.set_exception(storage_error(exc))
        else:
            self._retry.append(op)
        if handle is self._handle:
            log.warning(
                "%s: add to ledger %d failed (%s); rolling over", self.name, handle.ledger_id, exc
            )
            self._start_roll()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # --- roll-over ----------------------------------------------------------------------------

    def _start_roll(self) -> None:
        if self._state in (State.WRITABLE, State.NO_LEDGER):
            self._state = State.ROLLING
            self._roll_task = asyncio.create_task(self._roll())

    async def _create_ledger(self, cursor: str | None = None) -> LedgerHandle:
        c = self.config
        custom = {"managed-ledger": self.name, "application": "pulsar"}
        if cursor is not None:
            custom["cursor"] = cursor
        return await self._ledgers.create(
            ensemble_size=c.ensemble_size,
            write_quorum=c.write_quorum,
            ack_quorum=c.ack_quorum,
            custom=custom,
        )

    async def _roll(self) -> None:
        old = self._handle
        created: LedgerHandle | None = None
        try:
            creating, self._next_ledger = self._next_ledger, None
            if creating is None:
                creating = asyncio.ensure_future(self._create_ledger())
            try:
                if old is not None and not old.closed:
                    await old.close()
            except BaseException:
                self._spawn(self._discard_created(creating))
                raise
            try:
                created = await creating
            except Exception as err:  # the ledger created ahead failed: try once more now
                log.info("%s: ledger created ahead failed (%s); creating again", self.name, err)
                created = await self._create_ledger()
            async with self._info_lock:
                ledgers_now = list(self._info.ledgers)
                if old is not None and ledgers_now and ledgers_now[-1].ledger_id == old.ledger_id:
                    final = self._closed_record(ledgers_now[-1], old)
                    ledgers_now[-1:] = [final] if final.entries > 0 else []
                new_info = self._info.with_ledgers(
                    (*ledgers_now, records.LedgerRecord(created.ledger_id))
                )
                await self._cas_info(new_info)
                self._apply_info(new_info)
                if self._state is not State.ROLLING:  # fenced or closed meanwhile
                    return
                self._set_current(created)
                created = None
            if old is not None:
                if old.last_add_confirmed >= 0:
                    self._readers[old.ledger_id] = old
                else:
                    self._spawn(self._delete_ledger(old.ledger_id))
            self._state = State.WRITABLE
            self._flush_queue()
        except Exception as err:
            if created is not None:
                self._spawn(self._delete_ledger(created.ledger_id))
            error = storage_error(err)
            if isinstance(error, api.ManagedLedgerFencedError):
                self._set_fenced(str(err))
                return
            if self._state is not State.ROLLING:
                return
            log.warning("%s: roll-over failed: %s", self.name, err)
            self._state = State.NO_LEDGER
            self._fail_queued(error)
        finally:
            self._roll_task = None

    def _closed_record(
        self, record: records.LedgerRecord, handle: LedgerHandle
    ) -> records.LedgerRecord:
        return records.LedgerRecord(
            record.ledger_id,
            entries=handle.last_add_confirmed + 1,
            size=handle.length,
            timestamp_ms=_now_ms(),
            offloaded=record.offloaded,
        )

    def _set_current(self, handle: LedgerHandle) -> None:
        self._handle = handle
        self._current_id = handle.ledger_id
        self._cur_sent = self._cur_sent_bytes = self._cur_confirmed = 0
        self._cur_created = time.monotonic()
        self._thresholds()

    def _flush_queue(self) -> None:
        if self._retry:
            self._queue.extendleft(reversed(self._retry))
            self._retry = []
        while self._queue and self._state is State.WRITABLE:
            self._send(self._queue.popleft())

    def _fail_queued(self, error: BaseException) -> None:
        ops = [*self._retry, *self._queue]
        self._retry = []
        self._queue.clear()
        for op in ops:
            if not op.future.done():
                op.future.set_exception(error)

    def _set_fenced(self, why: str) -> None:
        if self._state in (State.FENCED, State.CLOSED):
            return
        log.warning("%s: fenced (%s): another owner took over", self.name, why)
        self._state = State.FENCED
        if self._next_ledger is not None:
            self._spawn(self._discard_created(self._next_ledger))
            self._next_ledger = None
        self._fail_queued(api.ManagedLedgerFencedError(f"{self.name}: {why}"))
        self._wake()
        for cursor in self._cursors.values():
            cursor.abandon()

    # --- metadata -----------------------------------------------------------------------------

    def _apply_info(self, info: records.ManagedLedgerInfo) -> None:
        self._info = info
        self._records = {r.ledger_id: r for r in info.ledgers}
        self._ids = [r.ledger_id for r in info.ledgers]

    async def _cas_info(self, info: records.ManagedLedgerInfo) -> None:
        """Write the list on top of the version this instance last wrote; a lost race is a
        take-over (fenced). An unknown outcome (store unreachable) is resolved by re-reading."""
        raw = info.to_json()
        key = self.path.info_key
        delay = 0.1
        for attempt in range(CAS_ATTEMPTS):
            try:
                self._info_version = await self._store.put(
                    key, raw, expected_version=self._info_version
                )
                return
            except md.BadVersionError:
                record = await self._store.get(key)
                if record is not None and record.value == raw:
                    self._info_version = record.version  # our earlier attempt landed
                    return
                raise api.ManagedLedgerFencedError(
                    f"{self.name}: the ledger list was changed by another owner"
                ) from None
            except md.StoreUnavailableError:
                if attempt == CAS_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _discard_created(self, creating: asyncio.Future[LedgerHandle]) -> None:
        with contextlib.suppress(Exception):
            await self._delete_ledger((await creating).ledger_id)

    async def _delete_ledger(self, ledger_id: int) -> None:
        try:
            await self._ledgers.delete(ledger_id)
        except Exception as err:
            log.warning("%s: delete of ledger %d failed: %s", self.name, ledger_id, err)

    # --- reads --------------------------------------------------------------------------------

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        out: list[Entry] = []
        pos = self.normalize(start)
        size = 0
        while pos is not None and len(out) < max_entries:
            lid = pos.ledger_id
            n = self.entries_in(lid)
            if pos.entry_id >= n:
                break
            last = min(n - 1, pos.entry_id + max_entries - len(out) - 1)
            budget = max_bytes - size if max_bytes > 0 else 0
            got = await self._read_range(lid, pos.entry_id, last, budget)
            if not got and lid not in self._records:  # trimmed meanwhile: move on
                pos = self.normalize(pos)
                continue
            out.extend(got)
            size += sum(len(e.data) for e in got)
            if not got or got[-1].position.entry_id < last or (max_bytes > 0 and size >= max_bytes):
                break
            pos = self.normalize(Position(lid, last + 1))
        return out

    async def read_entry(self, position: Position) -> Entry:
        if not self.contains(position):
            raise api.InvalidPositionError(f"{self.name}: no entry at {position}")
        got = await self._read_range(position.ledger_id, position.entry_id, position.entry_id, 0)
        if not got:
            raise api.InvalidPositionError(f"{self.name}: no entry at {position}")
        return got[0]

    async def read_positions(self, positions: Iterable[Position]) -> list[Entry]:
        """The entries at ``positions`` that exist, in position order, read in runs."""
        wanted = sorted({p for p in positions if self.contains(p)})
        out: list[Entry] = []
        i = 0
        while i < len(wanted):
            j = i
            while (
                j + 1 < len(wanted)
                and wanted[j + 1].ledger_id == wanted[i].ledger_id
                and wanted[j + 1].entry_id == wanted[j].entry_id + 1
            ):
                j += 1
            out.extend(
                await self._read_range(
                    wanted[i].ledger_id, wanted[i].entry_id, wanted[j].entry_id, 0
                )
            )
            i = j + 1
        return out

    async def _read_range(self, lid: int, first: int, last: int, max_bytes: int) -> list[Entry]:
        """Entries first..last of ledger ``lid`` (all exist), cache first; stops after
        ``max_bytes`` (when > 0), returning at least one entry."""
        out: list[Entry] = []
        entries = self._cache._entries
        size = 0
        e = first
        while e <= last:
            data = entries.get((lid, e))
            if data is not None:
                out.append(Entry(Position(lid, e), data))
                self.read_stats.cache_hits += 1
                e += 1
                size += len(data)
                if 0 < max_bytes <= size:
                    break
                continue
            end = e
            while end < last and (lid, end + 1) not in entries:
                end += 1
            try:
                handle = await self._reader(lid)
                got = await handle.read(e, end)
            except ledger_errors.LedgerError as err:
                if lid not in self._records:
                    return out  # the ledger was trimmed while it was read
                raise storage_error(err) from err
            self.read_stats.bookie_entries += len(got)
            for eid, payload in got:
                out.append(Entry(Position(lid, eid), payload))
                size += len(payload)
                if 0 < max_bytes <= size:
                    return out
            e = end + 1
        return out

    async def _reader(self, lid: int) -> LedgerHandle:
        if lid == self._current_id and self._handle is not None:
            return self._handle
        handle = self._readers.get(lid)
        if handle is None:
            handle = await self._ledgers.open(lid)
            self._readers[lid] = handle
        return handle

    async def wait_for_entries(self, after: Position) -> None:
        while self._lac <= after and self._state in (
            State.WRITABLE,
            State.ROLLING,
            State.NO_LEDGER,
        ):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut

    # --- cursors ------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._state in (State.CLOSED, State.FENCED):
            raise self._state_error()

    async def open_cursor(
        self,
        name: str,
        *,
        initial_position: api.InitialPosition = api.InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> api.ManagedCursor:
        from magnetar.managed_ledger.cursor import ManagedCursorImpl

        self._check_usable()
        async with self._cursor_lock:
            existing = self._cursors.get(name)
            if existing is not None and not existing.closed:
                if not existing.durable:
                    raise api.CursorAlreadyExistsError(f"{name}: a non-durable cursor")
                return existing
            try:
                cursor = await ManagedCursorImpl.open_durable(
                    self, name, initial_position=initial_position, properties=properties
                )
            except (ledger_errors.LedgerError, md.MetadataError) as err:
                raise storage_error(err) from err
            self._cursors[name] = cursor
            return cursor

    async def new_non_durable_cursor(
        self, name: str, start: Position, *, inclusive: bool = True
    ) -> api.ManagedCursor:
        from magnetar.managed_ledger.cursor import ManagedCursorImpl

        self._check_usable()
        existing = self._cursors.get(name)
        if existing is not None and not existing.closed:
            raise api.CursorAlreadyExistsError(f"{self.name}: cursor {name} exists")
        cursor = ManagedCursorImpl.non_durable(self, name, start, inclusive=inclusive)
        self._cursors[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        async with self._cursor_lock:
            cursor = self._cursors.pop(name, None)
            if cursor is None:
                if await self._store.get(self.path.cursor_key(name)) is None:
                    raise api.CursorNotFoundError(f"{self.name}: no cursor {name}")
                from magnetar.managed_ledger.cursor import ManagedCursorImpl

                cursor = await ManagedCursorImpl.recover(self, name)
                if cursor is None:
                    return
            try:
                await cursor.destroy()
            except (ledger_errors.LedgerError, md.MetadataError) as err:
                raise storage_error(err) from err
        self.request_trim()

    def forget_cursor(self, cursor: ManagedCursorImpl) -> None:
        if self._cursors.get(cursor.name) is cursor:
            del self._cursors[cursor.name]

    def slowest_mark_delete(self) -> Position | None:
        """The lowest mark-delete position of the durable cursors, None without any."""
        found = [c.mark_delete_position for c in self._cursors.values() if c.durable]
        return min(found) if found else None

    # --- trimming -----------------------------------------------------------------------------

    def request_trim(self) -> None:
        """Trim soon (rate-limited): a mark-delete position moved."""
        if self._trim_handle is not None or self._trim_task is not None:
            return
        if self._state in (State.CLOSED, State.FENCED):
            return
        delay = max(0.0, self._last_trim + TRIM_MIN_INTERVAL_S - time.monotonic())
        self._trim_handle = asyncio.get_running_loop().call_later(delay, self._start_trim)

    def _start_trim(self) -> None:
        self._trim_handle = None
        if self._trim_task is None and self._state not in (State.CLOSED, State.FENCED):
            self._trim_task = asyncio.create_task(self._trim_safely())

    async def _trim_safely(self) -> None:
        try:
            await self.trim()
        except api.ManagedLedgerFencedError as err:
            self._set_fenced(str(err))
        except Exception as err:
            log.warning("%s: trim failed: %s", self.name, err)
        finally:
            self._trim_task = None

    def _retained(self, record: records.LedgerRecord, remaining_bytes: int, now_ms: int) -> bool:
        """Retention: keep an acknowledged ledger while it is within the time window and the
        size budget (a limit of -1 is unlimited; 0 is "no retention" only when both are 0,
        otherwise "this dimension does not limit")."""
        t, b = self.config.retention_time_s, self.config.retention_bytes
        if t == 0 and b == 0:
            return False
        expired = t > 0 and (now_ms - record.timestamp_ms) > t * 1000
        over = b > 0 and remaining_bytes > b
        return not (expired or over)

    async def trim(self) -> list[int]:
        """Delete the ledgers no durable cursor and no retention needs; their ids."""
        self._last_trim = time.monotonic()
        if self._state in (State.CLOSED, State.FENCED):
            return []
        slowest = self.slowest_mark_delete()
        if slowest is None:
            slowest = self._lac
        async with self._info_lock:
            ledgers_now = self._info.ledgers
            now = _now_ms()
            remaining = self.total_size
            doomed: list[records.LedgerRecord] = []
            for r in ledgers_now[:-1]:  # never the last ledger (current or terminated end)
                if r.ledger_id == self._current_id:
                    break
                if r.entries > 0 and Position(r.ledger_id, r.entries - 1) > slowest:
                    break
                if self._retained(r, remaining, now):
                    break
                doomed.append(r)
                remaining -= r.size
            if not doomed:
                return []
            new_info = self._info.with_ledgers(ledgers_now[len(doomed) :])
            await self._cas_info(new_info)
            self._apply_info(new_info)
        ids = [r.ledger_id for r in doomed]
        for lid in ids:
            self._cache.drop_ledger(lid)
            self._readers.pop(lid, None)
        for lid in ids:
            await self._delete_ledger(lid)
        log.info("%s: trimmed ledgers %s", self.name, ids)
        return ids

    async def _run_timer(self) -> None:
        interval = self.options.trim_interval_s
        while True:
            await asyncio.sleep(interval)
            if self._state in (State.CLOSED, State.FENCED):
                return
            c = self.config
            if (
                self._state is State.WRITABLE
                and self._cur_sent > 0
                and c.max_ledger_age_s > 0
                and time.monotonic() - self._cur_created >= c.max_ledger_age_s
            ):
                self._start_roll()
            readers = [cur.read_position for cur in self._cursors.values() if not cur.closed]
            if readers:
                low = min(readers)
                self._cache.evict_before(low.ledger_id, low.entry_id)
            self._start_trim()

    # --- terminate, close, delete ----------------------------------------------------------------

    async def _settle_roll(self) -> None:
        while self._roll_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._roll_task)

    async def _close_current(self, *, terminated: bool) -> None:
        """Close the current ledger (after its adds) and record its end in the list."""
        handle = self._handle
        if handle is None or self._current_id is None:
            return
        try:
            await handle.close()
        except ledger_errors.LedgerFencedError as err:
            self._set_fenced(str(err))
            raise api.ManagedLedgerFencedError(str(err)) from err
        async with self._info_lock:
            ledgers_now = list(self._info.ledgers)
            if ledgers_now and ledgers_now[-1].ledger_id == handle.ledger_id:
                final = self._closed_record(ledgers_now[-1], handle)
                ledgers_now[-1:] = [final] if final.entries > 0 else []
            info = self._info.with_ledgers(tuple(ledgers_now))
            if terminated:
                info = records.ManagedLedgerInfo(info.ledgers, self._lac, info.properties)
            await self._cas_info(info)
            self._apply_info(info)
        self._current_id = None
        if handle.last_add_confirmed >= 0:
            self._readers[handle.ledger_id] = handle
        else:
            self._spawn(self._delete_ledger(handle.ledger_id))

    async def terminate(self) -> Position:
        if self.terminated:
            return self._lac
        self._check_usable()
        await self._settle_roll()
        if self._state is State.FENCED:
            raise self._state_error()
        self._state = State.TERMINATED
        if self._next_ledger is not None:
            self._spawn(self._discard_created(self._next_ledger))
            self._next_ledger = None
        self._fail_queued(self._state_error())
        try:
            await self._close_current(terminated=True)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err
        self._wake()
        log.info("%s terminated at %s", self.name, self._lac)
        return self._lac

    async def close(self) -> None:
        if self._state is State.CLOSED:
            return
        await self._settle_roll()
        closing_state = self._state
        self._state = State.CLOSED
        await self._stop_timers()
        self._fail_queued(self._state_error())
        self._wake()
        await asyncio.gather(*(c.close() for c in self._cursors.values()), return_exceptions=True)
        if closing_state in (State.WRITABLE, State.NO_LEDGER):
            try:
                await self._close_current(terminated=False)
            except Exception as err:
                log.warning("%s: close of the current ledger failed: %s", self.name, err)
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        log.info("%s closed", self.name)
        if self._on_closed is not None:
            self._on_closed(self)

    async def _stop_timers(self) -> None:
        """Stop the timer and pending trims; a trim already writing the list is awaited
        (cancelling it could lose the version it wrote). Drop a ledger created ahead."""
        if self._next_ledger is not None:
            self._spawn(self._discard_created(self._next_ledger))
            self._next_ledger = None
        if self._timer is not None:
            self._timer.cancel()
        if self._trim_handle is not None:
            self._trim_handle.cancel()
            self._trim_handle = None
        if self._trim_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._trim_task)

    async def delete(self) -> None:
        await self._settle_roll()
        self._state = State.CLOSED
        await self._stop_timers()
        self._fail_queued(self._state_error())
        self._wake()
        try:
            for cursor in list(self._cursors.values()):
                await cursor.destroy()
            self._cursors.clear()
            if self._handle is not None and not self._handle.closed:
                with contextlib.suppress(ledger_errors.LedgerError):
                    await self._handle.close()
            for lid in list(self._ids):
                await self._delete_ledger(lid)
            await self._store.delete_prefix(self.path.info_key)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err
        finally:
            if self._background:
                await asyncio.gather(*list(self._background), return_exceptions=True)
            if self._on_closed is not None:
                self._on_closed(self)
        log.info("%s deleted", self.name)


if TYPE_CHECKING:

    def _conforms(ml: ManagedLedgerImpl) -> api.ManagedLedger:
        return ml
