"""A subscription: its cursor, consumers, redelivery state and the dispatch loop.

Dispatch runs in one background task per subscription. A round reads (or replays) entries
for the permits the consumers have, hands them to the type's policy (``dispatchers``) and
sends MESSAGE frames through each consumer's ServerCnx with the stored entry unchanged.
Rounds hold the subscription lock, as do the operations that move the cursor under the
loop's feet (rewind, seek, consumer removal, unsubscribe); FLOW, ACK and REDELIVER only touch
in-memory state synchronously and wake the loop. When nothing can be sent the loop sleeps
until woken: by FLOW, a new consumer, a redelivery, new entries (``on_entries_added`` or the
managed ledger's ``wait_for_entries``), a slow connection draining, or a delayed message
coming due.

Redelivery: Shared and Key_Shared keep a replay set of positions (nacked, left behind by a
disconnected consumer, waiting for a busy key's consumer) that is served before new reads;
Exclusive and Failover rewind the cursor instead. Either way the broker counts redeliveries
per position and sends the count in MESSAGE.redelivery_count (the clients' dead-letter
policy relies on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Final, Protocol

from magnetar.broker.compaction.cursor import CompactedCursor
from magnetar.broker.contracts import BrokerError, LastMessageId, ServerCnx
from magnetar.broker.subscriptions import acks, dispatchers, selectors
from magnetar.broker.subscriptions.consumer import Consumer, tell_active_change
from magnetar.broker.subscriptions.dispatchers import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    TYPE_NAMES,
    SubType,
)
from magnetar.broker.subscriptions.entries import EntryMeta, EntryMetaCache
from magnetar.broker.subscriptions.stats import Meter, now_ms
from magnetar.managed_ledger.api import (
    Entry,
    InvalidPositionError,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    Position,
)
from magnetar.wire import commands, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName


class TxnReadFilter(Protocol):
    """What dispatch asks a topic's transaction buffer (``broker.transactions.buffer``):
    how far it may read, and which entries it must acknowledge without delivering."""

    @property
    def active(self) -> bool: ...
    @property
    def max_read_position(self) -> Position | None: ...
    def hides(self, meta: EntryMeta) -> bool: ...


class TxnAckHolds(Protocol):
    """Messages a transaction's acknowledgement holds (``broker.transactions.pending_acks``):
    not delivered to anyone until the transaction ends."""

    def any_held(self, subscription: str) -> bool: ...
    def holds(self, subscription: str, position: Position) -> bool: ...


class SubscriptionOwner(Protocol):
    """What a subscription needs from the topic's subscriptions
    (:class:`magnetar.broker.subscriptions.topic_subscriptions.TopicSubscriptionsImpl`, which
    imports this module; this module does not import it)."""

    topic: TopicName
    managed_ledger: ManagedLedger
    meta_cache: EntryMetaCache
    txn_buffer: TxnReadFilter | None
    txn_acks: TxnAckHolds | None

    def forget(self, sub: Subscription) -> None: ...
    def position_for_message_id(self, mid: MessageId, *, compacted: bool = False) -> Position: ...
    async def position_for_publish_time(
        self, publish_time: int, *, compacted: bool = False
    ) -> Position: ...
    async def last_message_id(self, *, read_compacted: bool = False) -> MessageId: ...


log = logging.getLogger(__name__)

MAX_REPLAY: Final = 10_000
"""Entries parked in the replay set beyond which no new entries are read (Key_Shared
look-ahead past a busy key is bounded by this)."""
NON_DURABLE_LINGER_S: Final = 60.0
"""A reader's subscription kept this long after a seek closed its consumers."""


class _Outcome(enum.Enum):
    PROGRESS = "progress"
    IDLE = "idle"
    WAIT_ENTRIES = "wait-entries"
    WAIT_WRITABLE = "wait-writable"


class Subscription:
    def __init__(
        self,
        *,
        owner: SubscriptionOwner,
        name: str,
        cursor: ManagedCursor,
        sub_type: SubType,
        durable: bool,
        key_shared_mode: int = pb.AUTO_SPLIT,
    ) -> None:
        self.owner = owner
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType = sub_type
        self.key_shared_mode = key_shared_mode
        self.consumers: list[Consumer] = []
        self.policy = dispatchers.make_policy(self, sub_type, key_shared_mode=key_shared_mode)
        self.replay: dict[Position, int] = {}
        """Positions to (re)deliver before new reads -> their sticky-key hash."""
        self.replay_hashes: dict[int, int] = {}
        """Key_Shared: how many replay positions each key hash has (newer entries wait)."""
        self._owner_of: dict[Position, Consumer] = {}
        self._counts: dict[Position, int] = {}
        """Broker-tracked redelivery count per position."""
        self._delayed: list[tuple[int, Position]] = []
        self._delayed_set: set[Position] = set()
        self._delay_timer: asyncio.TimerHandle | None = None
        self._delay_due = 0
        self._linger: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._rewind = False
        self._closed = False
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.avg_messages_per_entry = 1.0
        self.out = Meter()
        self.redelivered = Meter()

    # -- context ----------------------------------------------------------------------------

    @property
    def ml(self) -> ManagedLedger:
        return self.owner.managed_ledger

    @property
    def meta_cache(self) -> EntryMetaCache:
        return self.owner.meta_cache

    @property
    def partition_index(self) -> int:
        return self.owner.topic.partition_index

    @property
    def closed(self) -> bool:
        return self._closed

    def wake(self) -> None:
        self._wake.set()

    @property
    def read_compacted(self) -> bool:
        """The consumers read the topic's compacted view (the cursor reads through it)."""
        return isinstance(self.cursor, CompactedCursor)

    def next_unacked_position(self) -> Position:
        return self.ml.next_position(self.cursor.mark_delete_position)

    # -- consumers ----------------------------------------------------------------------------

    async def add_consumer(self, c: Consumer, sub_type: SubType) -> None:
        async with self._lock:
            if self._closed:
                raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closing")
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            if sub_type != self.sub_type or (
                sub_type == KEY_SHARED and c.key_shared_mode != self.key_shared_mode
            ):
                if self.consumers:
                    what = "type" if sub_type != self.sub_type else "key shared mode"
                    raise BrokerError(
                        pb.ConsumerBusy, f"Subscription {self.name} is of a different {what}"
                    )
                self._change_type(sub_type, c.key_shared_mode)
            if sub_type == EXCLUSIVE and self.consumers:
                raise BrokerError(
                    pb.ConsumerBusy, f"Exclusive consumer is already connected to {self.name}"
                )
            try:
                self.policy.add(c)
            except selectors.AssignError as exc:
                raise BrokerError(pb.ConsumerAssignError, str(exc)) from None
            self.consumers.append(c)
            if isinstance(self.policy, dispatchers.SingleActive):
                self._update_active(joined=c)
            self._ensure_task()
            self._wake.set()

    def _change_type(self, sub_type: SubType, key_shared_mode: int) -> None:
        """A subscription without consumers takes the type of the next one (as Pulsar)."""
        was_replaying = bool(self.replay) or bool(self._delayed_set)
        self.sub_type = sub_type
        self.key_shared_mode = key_shared_mode
        self.policy = dispatchers.make_policy(self, sub_type, key_shared_mode=key_shared_mode)
        if was_replaying and not self.policy.uses_replay:
            self._clear_replay()
            self._rewind = True

    def _update_active(self, *, joined: Consumer | None = None) -> None:
        policy = self.policy
        assert isinstance(policy, dispatchers.SingleActive)
        new = policy.pick()
        old = policy.active
        policy.active = new
        if new is not old and old is not None:
            # the new active consumer starts from the first unacknowledged message
            self._rewind = True
        if self.sub_type == FAILOVER:
            tell_active_change(self.consumers, new, changed=new is not old, joined=joined)

    async def remove_consumer(self, c: Consumer) -> None:
        async with self._lock:
            if c.closed:
                return
            self._detach(c, redeliver=True)
            if isinstance(self.policy, dispatchers.SingleActive):
                self._update_active()
            self._wake.set()
            if not self.consumers and not self.durable:
                await self._close_locked(delete_cursor=True)

    def _detach(self, c: Consumer, *, redeliver: bool) -> None:
        """Take ``c`` out of the subscription; its pending entries are redelivered."""
        c.closed = True
        if c in self.consumers:
            self.consumers.remove(c)
        self.policy.remove(c)
        pending, c.pending = c.pending, {}
        c.unacked_messages = 0
        c.permits = 0
        owner_of = self._owner_of
        for position in pending:
            if owner_of.get(position) is c:
                del owner_of[position]
        if not redeliver or not pending:
            return
        self._count_redeliveries(pending)
        if self.policy.uses_replay:
            for position, (_, key_hash) in pending.items():
                self.park(position, key_hash)
        else:
            self._rewind = True
        if not self.consumers and not self.policy.uses_replay:
            self._rewind = True

    def _count_redeliveries(self, positions: dict[Position, tuple[int, int]]) -> None:
        counts = self._counts
        n = 0
        for position, (unacked, _) in positions.items():
            counts[position] = counts.get(position, 0) + 1
            n += unacked
        self.redelivered.add(n)

    # -- dispatch loop ----------------------------------------------------------------------

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch {self.owner.topic}/{self.name}"
            )

    async def _run(self) -> None:
        spurious = 0
        while not self._closed:
            self._wake.clear()
            try:
                async with self._lock:
                    if self._closed:
                        break
                    outcome, cnxs = await self._round()
            except asyncio.CancelledError:
                raise
            except (ManagedLedgerClosedError, ManagedLedgerFencedError) as exc:
                # the topic is going away (unload, another owner): its close_all follows
                log.info("subscription %s/%s: stops: %s", self.owner.topic, self.name, exc)
                return
            except ManagedLedgerError as exc:
                log.warning("subscription %s/%s: read failed: %s", self.owner.topic, self.name, exc)
                await self._sleep_or_wake(0.5)
                continue
            except Exception:
                log.exception("subscription %s/%s: dispatch error", self.owner.topic, self.name)
                if not self.policy.uses_replay:
                    self._rewind = True  # entries read but not sent must not be skipped
                await self._sleep_or_wake(1.0)
                continue
            if outcome is _Outcome.PROGRESS:
                spurious = 0
                await asyncio.sleep(0)
                continue
            if spurious > 2:
                await asyncio.sleep(0.01)
            if outcome is _Outcome.WAIT_ENTRIES:
                lce = self.ml.last_confirmed_entry
                woken = await self._wait(self.ml.wait_for_entries(lce))
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
        if self._rewind:
            self._apply_rewind()
        if not self.consumers:
            return _Outcome.IDLE, []
        if self._delayed:
            self._release_delayed()
        policy = self.policy
        budget, blocked = policy.budget()
        if budget <= 0:
            return (_Outcome.WAIT_WRITABLE, blocked) if blocked else (_Outcome.IDLE, [])
        cache = self.meta_cache
        if self.replay:
            positions = policy.replay_candidates(budget)
            if positions:
                entries = await self.cursor.replay(positions)
                # what was acknowledged during the read is gone from the set; the rest
                # leaves it now (entries the cursor no longer has, too)
                live = {p for p in positions if p in self.replay}
                for p in positions:
                    self._drop_replay(p)
                batch = [(e, cache.get(e)) for e in entries if e.position in live]
                batch = self._drop_held(batch)
                if batch and policy.route(batch, replay=True):
                    return _Outcome.PROGRESS, []
            if len(self.replay) >= MAX_REPLAY:
                return _Outcome.IDLE, []  # look-ahead past busy keys is bounded
        if not self.cursor.has_more_entries():
            if self.ml.terminated:
                self._maybe_reached_end()
                return _Outcome.IDLE, []
            return _Outcome.WAIT_ENTRIES, []
        txn = self.owner.txn_buffer
        if txn is not None and txn.active:
            limit = txn.max_read_position
            if limit is not None and self.cursor.read_position > limit:
                return _Outcome.IDLE, []  # held by an open transaction: its end wakes us
        entries = await self.cursor.read_entries(budget)
        if not entries:
            return _Outcome.WAIT_ENTRIES, []
        batch = [(e, cache.get(e)) for e in entries]
        if txn is not None and txn.active:
            batch, held = await self._transaction_filter(txn, batch)
            if not batch:
                return (_Outcome.IDLE if held else _Outcome.PROGRESS), []
        batch = self._drop_held(batch)
        if batch:
            policy.route(batch, replay=False)
        return _Outcome.PROGRESS, []

    def _drop_held(self, batch: list[tuple[Entry, EntryMeta]]) -> list[tuple[Entry, EntryMeta]]:
        """Leave out messages a transaction's acknowledgement holds (delivered again only
        if it aborts: ``transaction_released``)."""
        holds = self.owner.txn_acks
        if holds is None or not holds.any_held(self.name):
            return batch
        return [(e, m) for e, m in batch if not holds.holds(self.name, e.position)]

    async def _transaction_filter(
        self, txn: TxnReadFilter, batch: list[tuple[Entry, EntryMeta]]
    ) -> tuple[list[tuple[Entry, EntryMeta]], bool]:
        """Drop what an open transaction still holds (read again after its end) and
        acknowledge markers and aborted entries; True when something was held back."""
        limit = txn.max_read_position
        out: list[tuple[Entry, EntryMeta]] = []
        hidden: list[Position] = []
        held = False
        for entry, meta in batch:
            if limit is not None and entry.position > limit:
                self.cursor.seek(entry.position)
                held = True
                break
            if txn.hides(meta):
                hidden.append(entry.position)
            else:
                out.append((entry, meta))
        if hidden:
            await self.cursor.delete(hidden)
        return out, held

    def _maybe_reached_end(self) -> None:
        """A terminated topic read to its end and every message acknowledged: tell each
        consumer once. As Pulsar, not before the acknowledgements: a client may treat
        REACHED_END_OF_TOPIC as final (the Go client drops the connection on it, losing
        what it had not yet handed out)."""
        if self.cursor.backlog() > 0 or self.cursor.has_more_entries():
            return
        for c in self.consumers:
            if not c.told_end:
                c.told_end = True
                c.cnx.send_command(commands.reached_end_of_topic(c.consumer_id))

    def send(self, c: Consumer, entry: Entry, meta: EntryMeta) -> None:
        """Deliver ``entry`` to ``c`` (policies call this)."""
        position = entry.position
        ack_set = self.cursor.batch_ack_set(position) if meta.is_batch else None
        n = meta.num_messages
        unacked = acks.unacked_count(ack_set, n) if ack_set else n
        c.cnx.send_message(
            consumer_id=c.consumer_id,
            message_id=MessageId(position.ledger_id, position.entry_id, self.partition_index),
            redelivery_count=self._counts.get(position, 0),
            headers_and_payload=entry.data,
            ack_set=ack_set,
            consumer_epoch=c.epoch,
        )
        c.permits -= n
        previous = c.pending.get(position)
        if previous is not None:
            c.unacked_messages -= previous[0]
        c.pending[position] = (unacked, meta.key_hash)
        c.unacked_messages += unacked
        self._owner_of[position] = c
        c.out.add(n, meta.size)
        self.out.add(n, meta.size)
        self.avg_messages_per_entry += (n - self.avg_messages_per_entry) * 0.1

    def park(self, position: Position, key_hash: int) -> None:
        """Put ``position`` in the replay set (policies call this)."""
        if position in self.replay:
            return
        self.replay[position] = key_hash
        hashes = self.replay_hashes
        hashes[key_hash] = hashes.get(key_hash, 0) + 1

    def _drop_replay(self, position: Position) -> None:
        key_hash = self.replay.pop(position, None)
        if key_hash is None:
            return
        left = self.replay_hashes[key_hash] - 1
        if left:
            self.replay_hashes[key_hash] = left
        else:
            del self.replay_hashes[key_hash]

    def _clear_replay(self) -> None:
        self.replay.clear()
        self.replay_hashes.clear()
        self._delayed.clear()
        self._delayed_set.clear()

    def _apply_rewind(self) -> None:
        """Exclusive/Failover redelivery: everything unacked goes out again, in order."""
        self._rewind = False
        for c in self.consumers:
            if c.pending:
                self._count_redeliveries(c.pending)
                c.redelivered.add(c.unacked_messages)
                c.pending = {}
                c.unacked_messages = 0
        self._owner_of.clear()
        self._clear_replay()
        self.cursor.rewind()

    # -- delayed delivery (Shared) ----------------------------------------------------------

    def delay(self, position: Position, deliver_at: int) -> None:
        if position in self._delayed_set:
            return
        self._delayed_set.add(position)
        heapq.heappush(self._delayed, (deliver_at, position))
        self._arm_delay_timer()

    def _arm_delay_timer(self) -> None:
        if not self._delayed:
            return
        due = self._delayed[0][0]
        if self._delay_timer is not None and self._delay_due <= due:
            return
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        loop = asyncio.get_running_loop()
        self._delay_due = due
        self._delay_timer = loop.call_later(max(0.0, (due - now_ms()) / 1000), self._delay_fired)

    def _delay_fired(self) -> None:
        self._delay_timer = None
        self._wake.set()

    def _release_delayed(self) -> None:
        now = now_ms()
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, position = heapq.heappop(delayed)
            if position in self._delayed_set:
                self._delayed_set.discard(position)
                meta = self.meta_cache.lookup(position)
                self.park(position, meta.key_hash if meta is not None else 0)
        self._arm_delay_timer()

    # -- acknowledgements ------------------------------------------------------------------

    async def ack(self, c: Consumer, cmd: pb.CommandAck) -> None:
        if c.closed:
            # detached (a seek, a close): as in Pulsar, where the consumer is gone before the
            # cursor resets, its acks in flight must not acknowledge what the seek made pending
            raise BrokerError(pb.ConsumerNotFound, f"consumer {c} is no longer attached")
        if not cmd.message_id:
            return
        c.last_acked_ms = now_ms()
        try:
            if cmd.ack_type == pb.CommandAck.Cumulative:
                await self._ack_cumulative(c, cmd.message_id[-1])
            else:
                await self._ack_individual(cmd.message_id)
        except InvalidPositionError as exc:
            log.debug("ack of an unknown position ignored: %s", exc)
        except ManagedLedgerError as exc:
            raise BrokerError(pb.PersistenceError, f"acknowledgement failed: {exc}") from exc
        if self.ml.terminated:
            self._maybe_reached_end()
        if self.sub_type == KEY_SHARED and any(
            x.join_read_position is not None for x in self.consumers
        ):
            self._wake.set()

    async def _batch_size(self, mid: pb.MessageIdData, position: Position) -> int:
        if mid.HasField("batch_size") and mid.batch_size > 0:
            return mid.batch_size
        meta = self.meta_cache.lookup(position)
        if meta is None:
            meta = self.meta_cache.get(await self.ml.read_entry(position))
        return meta.num_messages

    async def _ack_individual(self, mids: Sequence[pb.MessageIdData]) -> None:
        whole: list[Position] = []
        for mid in mids:
            position = acks.position_of(mid)
            if not mid.ack_set:
                whole.append(position)
                continue
            size = await self._batch_size(mid, position)
            acked = acks.acked_indexes(mid.ack_set, size)
            if len(acked) >= size:
                whole.append(position)
                continue
            if not acked:
                continue
            await self.cursor.delete_batch_indexes(position, acked=acked, batch_size=size)
            if self.cursor.is_deleted(position):
                self._acked(position)
            else:
                self._partially_acked(position, self.cursor.batch_ack_set(position), size)
        if whole:
            for position in whole:
                self._acked(position)
            await self.cursor.delete(whole)

    async def _ack_cumulative(self, c: Consumer, mid: pb.MessageIdData) -> None:
        if self.sub_type in (SHARED, KEY_SHARED):
            raise BrokerError(
                pb.NotAllowedError,
                f"cumulative acknowledgement is not allowed on {TYPE_NAMES[self.sub_type]} "
                "subscriptions",
            )
        position = acks.position_of(mid)
        upto = position
        partial: list[int] | None = None
        size = 0
        if mid.ack_set:
            size = await self._batch_size(mid, position)
            if acks.unacked_count(mid.ack_set, size):
                partial = acks.acked_indexes(mid.ack_set, size)
                before = acks.previous_in_ledger(position)
                upto = before if before is not None else self.cursor.mark_delete_position
        self._acked_upto(c, upto)
        if upto > self.cursor.mark_delete_position:
            await self.cursor.mark_delete(upto)
        if partial:
            await self.cursor.delete_batch_indexes(position, acked=partial, batch_size=size)
            if self.cursor.is_deleted(position):
                self._acked(position)
            else:
                self._partially_acked(position, self.cursor.batch_ack_set(position), size)

    def _acked(self, position: Position) -> None:
        c = self._owner_of.pop(position, None)
        if c is not None:
            entry = c.pending.pop(position, None)
            if entry is not None:
                c.unacked_messages -= entry[0]
        if self._counts:
            self._counts.pop(position, None)
        if self.replay:
            self._drop_replay(position)
        if self._delayed_set:
            self._delayed_set.discard(position)

    def _partially_acked(self, position: Position, ack_set: list[int] | None, size: int) -> None:
        c = self._owner_of.get(position)
        if c is None or position not in c.pending:
            return
        unacked, key_hash = c.pending[position]
        left = acks.unacked_count(ack_set, size) if ack_set else unacked
        c.pending[position] = (left, key_hash)
        c.unacked_messages += left - unacked

    def _acked_upto(self, c: Consumer, upto: Position) -> None:
        pending = c.pending
        for position in [p for p in pending if p <= upto]:
            unacked, _ = pending.pop(position)
            c.unacked_messages -= unacked
            if self._owner_of.get(position) is c:
                del self._owner_of[position]
        if self._counts:
            for position in [p for p in self._counts if p <= upto]:
                del self._counts[position]

    async def transaction_acks(self, cmd: pb.CommandAck) -> None:
        """Apply the acknowledgements a committed transaction held (``transactions.
        pending_acks``), whichever consumer sent them (it may be gone)."""
        try:
            if cmd.ack_type == pb.CommandAck.Cumulative and cmd.message_id:
                position = acks.position_of(cmd.message_id[-1])
                for c in self.consumers:
                    self._acked_upto(c, position)
                if position > self.cursor.mark_delete_position:
                    await self.cursor.mark_delete(position)
            else:
                await self._ack_individual(cmd.message_id)
        except InvalidPositionError as exc:
            log.debug("transactional ack of an unknown position ignored: %s", exc)
        self._wake.set()

    def transaction_released(self, positions: Sequence[Position]) -> None:
        """An aborted transaction's acknowledgements: deliver those messages again."""
        by_consumer: dict[Consumer, list[pb.MessageIdData]] = {}
        unowned: list[Position] = []
        for position in positions:
            c = self._owner_of.get(position)
            if c is not None:
                mid = pb.MessageIdData(ledgerId=position.ledger_id, entryId=position.entry_id)
                by_consumer.setdefault(c, []).append(mid)
            elif not self.cursor.is_deleted(position):
                unowned.append(position)  # its consumer left, or dispatch held it back
        for c, mids in by_consumer.items():
            self.redeliver(c, mids, consumer_epoch=None)
        if unowned:
            if self.policy.uses_replay:
                for position in unowned:
                    meta = self.meta_cache.lookup(position)
                    self.park(position, meta.key_hash if meta is not None else 0)
            else:
                self._rewind = True
            self._wake.set()

    # -- redelivery -------------------------------------------------------------------------

    def redeliver(
        self, c: Consumer, mids: Sequence[pb.MessageIdData], *, consumer_epoch: int | None
    ) -> None:
        if c.closed:
            return
        if consumer_epoch is not None and (c.epoch is None or consumer_epoch > c.epoch):
            c.epoch = consumer_epoch
        if not self.policy.uses_replay:
            self._rewind = True  # Exclusive/Failover: rewind (counted when applied)
            self._wake.set()
            return
        if mids:
            picked: dict[Position, tuple[int, int]] = {}
            for mid in mids:
                position = acks.position_of(mid)
                held = c.pending.pop(position, None)
                if held is not None:
                    picked[position] = held
        else:
            picked, c.pending = c.pending, {}
        if not picked:
            return
        n = 0
        for position, (unacked, key_hash) in picked.items():
            n += unacked
            if self._owner_of.get(position) is c:
                del self._owner_of[position]
            self.park(position, key_hash)
        c.unacked_messages -= n
        c.redelivered.add(n)
        self._count_redeliveries(picked)
        self._wake.set()

    # -- seek, last message id, unsubscribe ---------------------------------------------------

    async def seek(self, cmd: pb.CommandSeek) -> None:
        compacted = self.read_compacted
        if cmd.HasField("message_publish_time"):
            position = await self.owner.position_for_publish_time(
                cmd.message_publish_time, compacted=compacted
            )
        elif cmd.HasField("message_id"):
            position = self.owner.position_for_message_id(
                MessageId.from_proto(cmd.message_id), compacted=compacted
            )
        else:
            raise BrokerError(pb.UnknownError, "SEEK needs a message id or a publish time")
        async with self._lock:
            if self._closed:
                raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closing")
            closing = list(self.consumers)
            for c in closing:
                self._detach(c, redeliver=False)
            if isinstance(self.policy, dispatchers.SingleActive):
                self.policy.active = None
            self._rewind = False
            self._clear_replay()
            self._owner_of.clear()
            self._counts.clear()
            try:
                await self.cursor.reset(position)
            except ManagedLedgerError as exc:
                raise BrokerError(pb.UnknownError, f"seek to {position} failed: {exc}") from exc
            if not self.durable:
                self._start_linger()
        # reset first, then close: the client re-subscribes and reads from the new position
        for c in closing:
            self._send_close(c)

    def _start_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        loop = asyncio.get_running_loop()
        self._linger = loop.call_later(NON_DURABLE_LINGER_S, self._linger_expired)

    def _linger_expired(self) -> None:
        self._linger = None
        if not self.consumers and not self._closed:
            self._closing = asyncio.get_running_loop().create_task(self.close(delete_cursor=True))

    @staticmethod
    def _send_close(c: Consumer) -> None:
        c.tell_closed()

    async def get_last_message_id(self) -> LastMessageId:
        last = await self.owner.last_message_id(read_compacted=self.read_compacted)
        md = self.cursor.mark_delete_position
        return LastMessageId(
            last=last,
            mark_delete=MessageId(md.ledger_id, md.entry_id, self.partition_index),
        )

    async def unsubscribe(self, c: Consumer) -> None:
        async with self._lock:
            others = [x for x in self.consumers if x is not c]
            if others:
                raise BrokerError(
                    pb.ConsumerBusy,
                    f"Subscription {self.name} has {len(others)} other connected consumer(s)",
                )
            self._detach(c, redeliver=False)
            await self._close_locked(delete_cursor=True)

    async def close(self, *, delete_cursor: bool, send_close: bool = False) -> None:
        """Detach every consumer (sending CLOSE_CONSUMER when asked) and stop dispatching;
        ``delete_cursor`` also deletes the cursor and forgets the subscription."""
        async with self._lock:
            closing = list(self.consumers)
            for c in closing:
                self._detach(c, redeliver=False)
            await self._close_locked(delete_cursor=delete_cursor)
        if send_close:
            for c in closing:
                self._send_close(c)

    async def _close_locked(self, *, delete_cursor: bool) -> None:
        self._closed = True
        self._wake.set()
        for timer in (self._delay_timer, self._linger):
            if timer is not None:
                timer.cancel()
        self._delay_timer = self._linger = None
        self.owner.forget(self)
        if delete_cursor:
            try:
                await self.ml.delete_cursor(self.name)
            except ManagedLedgerError as exc:
                log.warning("deleting cursor %s of %s: %s", self.name, self.owner.topic, exc)

    # -- stats ------------------------------------------------------------------------------

    def consumer_extra_stats(self, c: Consumer) -> dict[str, object]:
        return self.policy.extra_stats(c)

    def stats(self) -> dict[str, Any]:
        consumers = [c.stats() for c in self.consumers]
        out: dict[str, Any] = {
            "msgBacklog": self.cursor.backlog(),
            "msgBacklogNoDelayed": max(0, self.cursor.backlog() - len(self._delayed_set)),
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "type": TYPE_NAMES.get(self.sub_type, "Exclusive"),
            "msgRateOut": self.out.msg_rate(),
            "msgThroughputOut": self.out.byte_rate(),
            "msgOutCounter": self.out.msgs,
            "bytesOutCounter": self.out.bytes,
            "msgRateRedeliver": self.redelivered.msg_rate(),
            "msgDelayed": len(self._delayed_set),
            "consumers": consumers,
            "isDurable": self.durable,
            "isReplicated": False,
            "blockedSubscriptionOnUnackedMsgs": False,
            "lastExpireTimestamp": 0,
            "lastAckedTimestamp": max((c.last_acked_ms for c in self.consumers), default=0),
        }
        policy = self.policy
        if isinstance(policy, dispatchers.SingleActive) and policy.active is not None:
            out["activeConsumerName"] = policy.active.consumer_name
        if self.sub_type == KEY_SHARED:
            out["keySharedMode"] = "STICKY" if self.key_shared_mode == pb.STICKY else "AUTO_SPLIT"
        return out
