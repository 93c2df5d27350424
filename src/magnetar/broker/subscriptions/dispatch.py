"""A subscription's dispatch loop: one background task that reads or replays entries for the
consumers' permits and hands them to the subscription type's policy.

Why this module exists: the loop is the one part of a subscription that runs by itself; the
rest (consumers, acknowledgements, seek) only changes state and wakes it. A round reads (or
replays) entries for the permits the consumers have, hands them to the policy
(``dispatchers``), which sends MESSAGE frames through each consumer's ServerCnx with the
stored entry unchanged. Rounds hold the subscription lock, as do the operations that move the
cursor under the loop's feet (rewind, seek, consumer removal, unsubscribe); FLOW, ACK and
REDELIVER only touch in-memory state synchronously and wake the loop. When nothing can be sent
the loop sleeps until woken: by FLOW, a new consumer, a redelivery, new entries
(``on_entries_added`` or the managed ledger's ``wait_for_entries``), a slow connection
draining, or a delayed message coming due.

Transactions shape a round too: dispatch reads no further than an open transaction's first
entry (``TxnReadFilter.max_read_position``), acknowledges aborted entries without delivering
them, and leaves out messages a transaction's acknowledgement holds. Markers (the broker's
own entries: transaction ends, replicated-subscription snapshots) are acknowledged and never
delivered; a replicated-subscription snapshot marker goes to the topic's controller
(``SnapshotSink``) on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable
from typing import Any, Final, Protocol

from magnetar.broker.contracts import ServerCnx
from magnetar.broker.subscriptions import dispatchers
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.delayed import DelayedDelivery
from magnetar.broker.subscriptions.entries import EntryMeta, EntryMetaCache, split_entry
from magnetar.broker.subscriptions.redelivery import Redelivery
from magnetar.managed_ledger.api import (
    Entry,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    Position,
)
from magnetar.wire import markers
from magnetar.wire.errors import WireError
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

MAX_REPLAY: Final = 10_000
"""Entries parked in the replay set beyond which no new entries are read (Key_Shared
look-ahead past a busy key is bounded by this)."""


class TxnReadFilter(Protocol):
    """What dispatch asks a topic's transaction buffer (``broker.transactions.buffer``):
    how far it may read, and which entries it must acknowledge without delivering."""

    @property
    def active(self) -> bool: ...
    @property
    def max_read_position(self) -> Position | None: ...
    def hides(self, meta: EntryMeta) -> bool: ...


class SnapshotSink(Protocol):
    """The topic's replicated-subscriptions controller, as dispatch and subscriptions see it
    (``broker.replicated_subscriptions``)."""

    def snapshot_read(self, payload: bytes) -> None: ...
    def ensure_running(self) -> None: ...


class TxnAckHolds(Protocol):
    """Messages a transaction's acknowledgement holds (``broker.transactions.pending_acks``):
    not delivered to anyone until the transaction ends."""

    def any_held(self, subscription: str) -> bool: ...
    def holds(self, subscription: str, position: Position) -> bool: ...


class DispatchTopic(Protocol):
    """What the loop reads of the topic's subscriptions."""

    @property
    def topic(self) -> TopicName: ...
    @property
    def txn_buffer(self) -> TxnReadFilter | None: ...
    @property
    def txn_acks(self) -> TxnAckHolds | None: ...
    @property
    def snapshots(self) -> SnapshotSink | None: ...


class Dispatched(Protocol):
    """What the loop needs from its subscription
    (:class:`magnetar.broker.subscriptions.subscription.Subscription`, which imports this
    module; this module does not import it)."""

    name: str
    cursor: ManagedCursor
    consumers: list[Consumer]
    policy: dispatchers.Policy
    redelivery: Redelivery
    delayed: DelayedDelivery
    owner_of: dict[Position, Consumer]
    lock: asyncio.Lock

    @property
    def owner(self) -> DispatchTopic: ...
    @property
    def closed(self) -> bool: ...
    @property
    def ml(self) -> ManagedLedger: ...
    @property
    def meta_cache(self) -> EntryMetaCache: ...
    def maybe_reached_end(self) -> None: ...


class _Outcome(enum.Enum):
    PROGRESS = "progress"
    IDLE = "idle"
    WAIT_ENTRIES = "wait-entries"
    WAIT_WRITABLE = "wait-writable"


class DispatchLoop:
    """The task of one subscription and the event that wakes it."""

    def __init__(self, sub: Dispatched) -> None:
        self.sub = sub
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch {self.sub.owner.topic}/{self.sub.name}"
            )

    async def _run(self) -> None:
        sub = self.sub
        spurious = 0
        while not sub.closed:
            self._wake.clear()
            try:
                # no break inside the `async with` (a try/finally): mypyc does not compile it
                async with sub.lock:
                    done = None if sub.closed else await self._round()
                if done is None:
                    break
                outcome, cnxs = done
            except asyncio.CancelledError:
                raise
            except (ManagedLedgerClosedError, ManagedLedgerFencedError) as exc:
                # the topic is going away (unload, another owner): its close_all follows
                log.info("subscription %s/%s: stops: %s", sub.owner.topic, sub.name, exc)
                return
            except ManagedLedgerError as exc:
                log.warning("subscription %s/%s: read failed: %s", sub.owner.topic, sub.name, exc)
                pause = 0.5
            except Exception:
                log.exception("subscription %s/%s: dispatch error", sub.owner.topic, sub.name)
                if not sub.policy.uses_replay:
                    # entries read but not sent must not be skipped
                    sub.redelivery.rewind = True
                pause = 1.0
            else:
                pause = 0.0
            if pause:  # waited outside the handler (structure/test_compiled_handlers.py)
                await self._sleep_or_wake(pause)
                continue
            if outcome is _Outcome.PROGRESS:
                spurious = 0
                await asyncio.sleep(0)
                continue
            if spurious > 2:
                await asyncio.sleep(0.01)
            if outcome is _Outcome.WAIT_ENTRIES:
                lce = sub.ml.last_confirmed_entry
                woken = await self._wait(sub.ml.wait_for_entries(lce))
            elif outcome is _Outcome.WAIT_WRITABLE:
                woken = await self._wait(*(cnx.wait_writable() for cnx in cnxs))
            else:
                woken = await self._wait()
            spurious = 0 if woken else spurious + 1

    async def _sleep_or_wake(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _wait(self, *others: Awaitable[Any]) -> bool:
        """Wait for the wake event or any of ``others``; True when woken by the event."""
        if self._wake.is_set():
            for aw in others:
                if asyncio.iscoroutine(aw):
                    aw.close()
            return True
        wake = asyncio.ensure_future(self._wake.wait())
        tasks = [asyncio.ensure_future(aw) for aw in others]
        try:
            await asyncio.wait([wake, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (wake, *tasks):
                if not t.done():
                    t.cancel()
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    log.debug("dispatch wait ended with %r", t.exception())
        return self._wake.is_set()

    async def _round(self) -> tuple[_Outcome, list[ServerCnx]]:
        sub = self.sub
        redelivery = sub.redelivery
        if redelivery.rewind:
            self._apply_rewind()
        if not sub.consumers:
            return _Outcome.IDLE, []
        if sub.delayed.waiting:
            self._release_delayed()
        policy = sub.policy
        budget, blocked = policy.budget()
        if budget <= 0:
            return (_Outcome.WAIT_WRITABLE, blocked) if blocked else (_Outcome.IDLE, [])
        cache = sub.meta_cache
        cursor = sub.cursor
        if redelivery.replay:
            positions = policy.replay_candidates(budget)
            if positions:
                entries = await cursor.replay(positions)
                # what was acknowledged during the read is gone from the set; the rest
                # leaves it now (entries the cursor no longer has, too)
                live = {p for p in positions if p in redelivery.replay}
                for p in positions:
                    redelivery.drop(p)
                batch = [(e, cache.get(e)) for e in entries if e.position in live]
                batch = self._drop_held(batch)
                if batch and policy.route(batch, replay=True):
                    return _Outcome.PROGRESS, []
            if len(redelivery.replay) >= MAX_REPLAY:
                return _Outcome.IDLE, []  # look-ahead past busy keys is bounded
        if not cursor.has_more_entries():
            if sub.ml.terminated:
                sub.maybe_reached_end()
                return _Outcome.IDLE, []
            return _Outcome.WAIT_ENTRIES, []
        txn = sub.owner.txn_buffer
        if txn is not None and txn.active:
            limit = txn.max_read_position
            if limit is not None and cursor.read_position > limit:
                return _Outcome.IDLE, []  # held by an open transaction: its end wakes us
        entries = await cursor.read_entries(budget)
        if not entries:
            return _Outcome.WAIT_ENTRIES, []
        batch = [(e, cache.get(e)) for e in entries]
        if any(m.marker for _, m in batch):
            batch = await self._markers(batch)
            if not batch:
                return _Outcome.PROGRESS, []
        if txn is not None and txn.active:
            batch, held = await self._transaction_filter(txn, batch)
            if not batch:
                return (_Outcome.IDLE if held else _Outcome.PROGRESS), []
        batch = self._drop_held(batch)
        if batch:
            policy.route(batch, replay=False)
        return _Outcome.PROGRESS, []

    async def _markers(self, batch: list[tuple[Entry, EntryMeta]]) -> list[tuple[Entry, EntryMeta]]:
        """Acknowledge the markers, never delivered (a snapshot marker goes to the topic's
        controller first); the rest."""
        out: list[tuple[Entry, EntryMeta]] = []
        done: list[Position] = []
        sink = self.sub.owner.snapshots
        for entry, meta in batch:
            if not meta.marker:
                out.append((entry, meta))
                continue
            done.append(entry.position)
            if meta.marker == markers.SNAPSHOT and sink is not None:
                try:
                    sink.snapshot_read(bytes(split_entry(entry.data)[1]))
                except WireError as exc:
                    log.warning("snapshot marker at %s not readable: %s", entry.position, exc)
        await self.sub.cursor.delete(done)
        return out

    def _drop_held(self, batch: list[tuple[Entry, EntryMeta]]) -> list[tuple[Entry, EntryMeta]]:
        """Leave out messages a transaction's acknowledgement holds (delivered again only
        if it aborts: ``Acknowledgements.transaction_released``)."""
        sub = self.sub
        holds = sub.owner.txn_acks
        if holds is None or not holds.any_held(sub.name):
            return batch
        return [(e, m) for e, m in batch if not holds.holds(sub.name, e.position)]

    async def _transaction_filter(
        self, txn: TxnReadFilter, batch: list[tuple[Entry, EntryMeta]]
    ) -> tuple[list[tuple[Entry, EntryMeta]], bool]:
        """Drop what an open transaction still holds (read again after its end) and
        acknowledge markers and aborted entries; True when something was held back."""
        cursor = self.sub.cursor
        limit = txn.max_read_position
        out: list[tuple[Entry, EntryMeta]] = []
        hidden: list[Position] = []
        held = False
        for entry, meta in batch:
            if limit is not None and entry.position > limit:
                cursor.seek(entry.position)
                held = True
                break
            if txn.hides(meta):
                hidden.append(entry.position)
            else:
                out.append((entry, meta))
        if hidden:
            await cursor.delete(hidden)
        return out, held

    def _apply_rewind(self) -> None:
        """Exclusive/Failover redelivery: everything unacked goes out again, in order."""
        sub = self.sub
        redelivery = sub.redelivery
        redelivery.rewind = False
        for c in sub.consumers:
            if c.pending:
                redelivery.count(c.pending)
                c.redelivered.add(c.unacked_messages)
                c.pending = {}
                c.unacked_messages = 0
        sub.owner_of.clear()
        redelivery.clear()
        sub.delayed.clear()
        sub.cursor.rewind()

    def _release_delayed(self) -> None:
        """Delayed messages whose time has come go to the replay set."""
        sub = self.sub
        lookup = sub.meta_cache.lookup
        for position in sub.delayed.release_due():
            meta = lookup(position)
            sub.redelivery.park(position, meta.key_hash if meta is not None else 0)
