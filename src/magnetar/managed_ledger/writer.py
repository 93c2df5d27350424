"""The add path of a managed ledger: appends to the current ledger, roll-over and retry.

Why this module exists: adds are the hot path and the only place that must keep entries in
order across ledgers. ``add`` hands the bytes to the current ledger handle at once
(pipelined, no await, no copy); the handle completes adds in entry order after Aq bookies
confirmed them, and each completion calls the caller back (no future per add; ``append``
wraps ``add`` in one for callers off the hot path), fills the entry cache and wakes waiting
readers. When the ledger is full (entries, bytes, age) a background roll-over stops
sending, creates the next ledger while the old one drains (created ahead at 90% of a
limit), closes the old one, has the owner write the list and sends the queued adds on -- no
add is reordered, and adds wait only for that. A failing ledger (not fenced) is rolled over
the same way and its unconfirmed adds are sent again, in order, to the next one, up to
``MAX_ADD_ATTEMPTS`` ledgers.

The writer keeps the managed ledger's state; what it needs from its owner (creating a
ledger, writing the list, keeping a closed ledger for reads, fencing) is
:class:`WriterHost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Coroutine, Sized
from time import perf_counter
from typing import Any, Protocol

from magnetar.common import aio
from magnetar.common.buffers import Payload
from magnetar.common.stats import ENTRY_SIZE_BOUNDS, LATENCY_BOUNDS_US, StatsBuckets
from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.cache import EntryCache
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.storage import storage_error

log = logging.getLogger(__name__)

MAX_ADD_ATTEMPTS = 3
"""Ledgers an add is tried on before it fails (each failure rolls over to a new ledger)."""


class State(enum.Enum):
    WRITABLE = "LedgerOpened"
    ROLLING = "ClosingLedger"
    NO_LEDGER = "NoLedger"
    """The last roll-over failed: the next add tries again."""
    TERMINATED = "Terminated"
    FENCED = "Fenced"
    CLOSED = "Closed"


ACCEPTING = (State.WRITABLE, State.ROLLING, State.NO_LEDGER)
"""States in which adds are accepted (and readers wait for more)."""


class WriterHost(Protocol):
    """What the writer needs from the managed ledger that owns it."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> api.ManagedLedgerConfig: ...

    async def create_ledger(self, cursor: str | None = None) -> LedgerHandle: ...

    async def record_closed(
        self, old: LedgerHandle | None, *, next_ledger: int | None, terminated: bool = False
    ) -> None:
        """Write the list: ``old`` closed at its end (dropped when empty), then
        ``next_ledger`` (when given) as the new current ledger."""

    def keep_closed(self, handle: LedgerHandle) -> None:
        """A ledger this writer closed: kept for reads, deleted when it has no entries."""

    def set_fenced(self, why: str) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    async def delete_ledger(self, ledger_id: int) -> None: ...


class _AddOp:
    """One add of the managed ledger (a plain class: see ``ledger.handle.PendingAddOp``)."""

    __slots__ = ("attempts", "data", "done", "finished", "sent", "started")

    def __init__(self, data: Payload, done: api.AddDone, started: float) -> None:
        self.data = data
        self.done = done
        self.finished = False
        self.attempts = 0
        self.started = started
        """``perf_counter`` when the add was asked for (the managed ledger's add latency)."""
        self.sent = 0.0
        """``perf_counter`` when it went to the current ledger (the ledger's add latency)."""


class AddStats:
    """Pulsar's ManagedLedgerMBean figures of the add path: entry sizes and add latencies in
    Pulsar's bucket layouts (microseconds; :mod:`magnetar.common.stats`), adds that
    succeeded or failed, bytes added. Updated once per entry when its add completes."""

    __slots__ = ("add_errors", "add_latency_us", "added_bytes", "entry_sizes",
                 "ledger_add_latency_us", "ledger_switch_latency_us", "succeeded")  # fmt: skip

    def __init__(self) -> None:
        self.entry_sizes = StatsBuckets(ENTRY_SIZE_BOUNDS)
        self.add_latency_us = StatsBuckets(LATENCY_BOUNDS_US)
        """From the add asked for to the entry durable (Pulsar's AddEntryLatencyBuckets)."""
        self.ledger_add_latency_us = StatsBuckets(LATENCY_BOUNDS_US)
        """From the entry sent to the ledger to durable on Aq bookies (the last attempt;
        Pulsar's LedgerAddEntryLatencyBuckets)."""
        self.ledger_switch_latency_us = StatsBuckets(LATENCY_BOUNDS_US)
        """Roll-overs: from the old ledger's close asked for to the next ledger current
        (Pulsar's LedgerSwitchLatencyBuckets)."""
        self.succeeded = 0
        self.add_errors = 0
        self.added_bytes = 0

    def refresh(self) -> None:
        self.entry_sizes.refresh()
        self.add_latency_us.refresh()
        self.ledger_add_latency_us.refresh()
        self.ledger_switch_latency_us.refresh()


class LedgerWriter:
    """Adds, roll-over and the state of one managed ledger."""

    def __init__(self, host: WriterHost, ledgers: LedgerList, cache: EntryCache) -> None:
        self._host = host
        self._list = ledgers
        self._cache = cache
        self.readers: Sized | None = None
        """The managed ledger's open cursors: while there is none, adds skip the entry cache
        (nothing would read them from there; as Pulsar caches only with active cursors).
        None: every add is cached."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.state = State.CLOSED
        self.handle: LedgerHandle | None = None
        self.sent = 0
        self._sent_bytes = 0
        self._created = 0.0
        self._check_entries = self._check_bytes = 0
        self._age_limited = False
        self._roll_deadline = 0.0
        self._queue: deque[_AddOp] = deque()
        self._retry: list[_AddOp] = []
        self._roll_task: asyncio.Task[None] | None = None
        self._next_ledger: asyncio.Future[LedgerHandle] | None = None
        """The next ledger, created ahead once the current one is nearly full."""
        self.waiters: list[asyncio.Future[None]] = []
        self.entries_added = 0
        self.stats = AddStats()

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._retry)

    def state_error(self) -> api.ManagedLedgerError:
        name = self._host.name
        if self.state is State.FENCED:
            return api.ManagedLedgerFencedError(f"{name}: fenced by another owner")
        if self.state is State.TERMINATED:
            return api.ManagedLedgerTerminatedError(f"{name}: terminated")
        return api.ManagedLedgerClosedError(f"{name}: closed")

    # --- adds ---------------------------------------------------------------------------------

    def add(self, data: Payload, done: api.AddDone) -> None:
        """Start an add; ``done`` gets the position once durable on Aq bookies (called from
        the ledger's delivery of its completions, in call order), or the error (from an
        event-loop callback of its own). Never called from inside this call."""
        if self._loop is None:  # bound on first use: get_running_loop() costs a getpid()
            self._loop = asyncio.get_running_loop()
        state = self.state
        if state is State.WRITABLE and not self._queue:
            self._send(_AddOp(data, done, started=perf_counter()))
        elif state is State.WRITABLE or state is State.ROLLING:
            self._queue.append(_AddOp(data, done, started=perf_counter()))
        elif state is State.NO_LEDGER:
            self._queue.append(_AddOp(data, done, started=perf_counter()))
            self.start_roll()
        else:
            self.stats.add_errors += 1
            self._loop.call_soon(done, None, self.state_error())

    def append(self, data: Payload) -> asyncio.Future[Position]:
        """:meth:`add` with a future for the position. Futures complete in call order."""
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.add(data, functools.partial(aio.settle, fut))
        return fut

    def _fail_op(self, op: _AddOp, error: BaseException) -> None:
        """``op`` fails with ``error``, delivered from a loop callback of its own."""
        op.finished = True
        self.stats.add_errors += 1
        loop = self._loop
        assert loop is not None
        loop.call_soon(op.done, None, error)

    def _send(self, op: _AddOp) -> None:
        handle = self.handle
        assert handle is not None
        op.attempts += 1
        op.sent = perf_counter()
        op.data = handle.add(op.data, functools.partial(self._on_added, op, handle))
        self.sent += 1
        self._sent_bytes += len(op.data)
        if self.sent >= self._check_entries or self._sent_bytes >= self._check_bytes:
            self._near_full()
        elif self._age_limited and time.monotonic() >= self._roll_deadline:
            self.start_roll()

    def thresholds(self) -> None:
        """Per-ledger limits, computed once so each add compares two integers."""
        c = self._host.config
        self._check_entries = (c.max_entries_per_ledger * 9 + 9) // 10
        self._check_bytes = (c.max_ledger_bytes * 9 + 9) // 10
        self._age_limited = c.max_ledger_age_s > 0
        self._roll_deadline = self._created + c.max_ledger_age_s

    def _near_full(self) -> None:
        """At 90% of a limit: create the next ledger ahead; at the limit: roll over."""
        c = self._host.config
        if self._next_ledger is None:
            self._next_ledger = asyncio.ensure_future(self._host.create_ledger())
        full = self.sent >= c.max_entries_per_ledger or self._sent_bytes >= c.max_ledger_bytes
        now = time.monotonic()
        if full and (c.min_ledger_age_s <= 0 or now - self._created >= c.min_ledger_age_s):
            self.start_roll()
        elif self._age_limited and now >= self._roll_deadline:
            self.start_roll()

    def past_max_age(self) -> bool:
        """The current ledger has entries and is older than the maximum ledger age."""
        age = self._host.config.max_ledger_age_s
        return (
            self.state is State.WRITABLE
            and self.sent > 0
            and age > 0
            and time.monotonic() - self._created >= age
        )

    def _on_added(
        self, op: _AddOp, handle: LedgerHandle, eid: int, exc: BaseException | None
    ) -> None:
        if exc is None:
            lid = handle.ledger_id
            pos = Position(lid, eid)
            lst = self._list
            lst.lac = pos
            if lid == lst.current_id:
                lst.current_confirmed = eid + 1
            self.entries_added += 1
            now = perf_counter()
            stats = self.stats
            size = len(op.data)
            stats.succeeded += 1
            stats.added_bytes += size
            stats.entry_sizes.add(size)
            stats.add_latency_us.add((now - op.started) * 1e6)
            stats.ledger_add_latency_us.add((now - op.sent) * 1e6)
            readers = self.readers
            if readers is None or readers:
                self._cache.put(lid, eid, op.data)
            if self.waiters:
                self.wake()
            if not op.finished:
                op.finished = True
                op.done(pos, None)
            return
        if op.finished:
            return
        if isinstance(exc, ledger_errors.LedgerFencedError):
            self._fail_op(op, api.ManagedLedgerFencedError(f"{self._host.name}: {exc}"))
            self._host.set_fenced(f"ledger {handle.ledger_id} fenced")
            return
        if self.state not in ACCEPTING:
            self._fail_op(op, self.state_error())
            return
        if op.attempts >= MAX_ADD_ATTEMPTS:
            self._fail_op(op, storage_error(exc))
        else:
            self._retry.append(op)
        if handle is self.handle:
            log.warning(
                "%s: add to ledger %d failed (%s); rolling over",
                self._host.name,
                handle.ledger_id,
                exc,
            )
            self.start_roll()

    # --- readers waiting for adds ---------------------------------------------------------------

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait_for_entries(self, after: Position) -> None:
        while self._list.lac <= after and self.state in ACCEPTING:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            await fut

    # --- roll-over ----------------------------------------------------------------------------

    def start_roll(self) -> None:
        if self.state in (State.WRITABLE, State.NO_LEDGER):
            self.state = State.ROLLING
            self._roll_task = asyncio.create_task(self._roll())

    async def _roll(self) -> None:
        host = self._host
        old = self.handle
        started = perf_counter()
        created: LedgerHandle | None = None
        try:
            creating, self._next_ledger = self._next_ledger, None
            if creating is None:
                creating = asyncio.ensure_future(host.create_ledger())
            try:
                if old is not None and not old.closed:
                    await old.close()
            except BaseException:
                host.spawn(self._discard_created(creating))
                raise
            ahead: LedgerHandle | None = None
            try:
                ahead = await creating
            except Exception as err:  # the ledger created ahead failed: try once more now
                log.info("%s: ledger created ahead failed (%s); creating again", host.name, err)
            created = ahead if ahead is not None else await host.create_ledger()
            await host.record_closed(old, next_ledger=created.ledger_id)
            if self.state is not State.ROLLING:  # fenced or closed meanwhile
                return
            self.set_current(created)
            created = None
            if old is not None:
                host.keep_closed(old)
            self.state = State.WRITABLE
            self.stats.ledger_switch_latency_us.add((perf_counter() - started) * 1e6)
            self._flush_queue()
        except Exception as err:
            if created is not None:
                host.spawn(host.delete_ledger(created.ledger_id))
            error = storage_error(err)
            if isinstance(error, api.ManagedLedgerFencedError):
                host.set_fenced(str(err))
                return
            if self.state is not State.ROLLING:
                return
            log.warning("%s: roll-over failed: %s", host.name, err)
            self.state = State.NO_LEDGER
            self.fail_queued(error)
        finally:
            self._roll_task = None

    async def settle_roll(self) -> None:
        """Wait for a roll-over under way to end (whatever its outcome)."""
        while self._roll_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._roll_task)

    def set_current(self, handle: LedgerHandle) -> None:
        self.handle = handle
        self._list.set_current(handle.ledger_id)
        self.sent = self._sent_bytes = 0
        self._created = time.monotonic()
        self.thresholds()

    def _flush_queue(self) -> None:
        if self._retry:
            self._queue.extendleft(reversed(self._retry))
            self._retry = []
        while self._queue and self.state is State.WRITABLE:
            self._send(self._queue.popleft())

    def fail_queued(self, error: BaseException) -> None:
        ops = [*self._retry, *self._queue]
        self._retry = []
        self._queue.clear()
        for op in ops:
            if not op.finished:
                self._fail_op(op, error)

    def drop_created_ahead(self) -> None:
        """Delete the ledger created ahead, if any (no roll-over will use it)."""
        if self._next_ledger is not None:
            self._host.spawn(self._discard_created(self._next_ledger))
            self._next_ledger = None

    async def _discard_created(self, creating: asyncio.Future[LedgerHandle]) -> None:
        with contextlib.suppress(Exception):
            await self._host.delete_ledger((await creating).ledger_id)

    def stop(self, state: State, error: BaseException) -> None:
        """Stop accepting adds: ``state`` (terminated, fenced, closed), queued adds fail with
        ``error``, waiting readers wake."""
        self.state = state
        self.drop_created_ahead()
        self.fail_queued(error)
        self.wake()

    async def close_current(self, *, terminated: bool) -> None:
        """Close the current ledger (after its adds) and record its end in the list."""
        handle = self.handle
        if handle is None or self._list.current_id is None:
            return
        try:
            await handle.close()
        except ledger_errors.LedgerFencedError as err:
            self._host.set_fenced(str(err))
            raise api.ManagedLedgerFencedError(str(err)) from err
        await self._host.record_closed(handle, next_ledger=None, terminated=terminated)
        self._list.current_id = None
        self._host.keep_closed(handle)
