"""A subscription: its cursor, its consumers, seek and unsubscribe, its stats -- and the parts
it is made of.

The subscription is what consumers and the topic's subscriptions talk to
(:class:`~magnetar.broker.subscriptions.consumer.ConsumerOwner`, what dispatch policies call);
each concern with state of its own is a part beside it:

* ``dispatch.DispatchLoop`` -- the background task that reads or replays entries for the
  consumers' permits and hands them to the type's policy (``dispatchers``);
* ``acknowledgements.Acknowledgements`` -- what an ACK (or a transaction's) changes;
* ``redelivery.Redelivery`` -- the replay set, the redelivery counts and the rewind;
* ``delayed.DelayedDelivery`` -- Shared messages held until their deliver-at time.

Here stay the consumers' comings and goings (type changes, the active consumer of
Exclusive/Failover, what a leaving consumer gives back), ``send`` (the delivery record:
which consumer holds which position, ``owner_of``), REDELIVER, seek, the last message id,
unsubscribe and close, and the stats.

The lock (``lock``) is held by dispatch rounds and by the operations that move the cursor
under the loop's feet (rewind, seek, consumer removal, unsubscribe); FLOW, ACK and REDELIVER
only touch in-memory state synchronously and wake the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from magnetar.broker.compaction.cursor import CompactedCursor
from magnetar.broker.contracts import BrokerError, LastMessageId
from magnetar.broker.subscriptions import acks, dispatchers, selectors
from magnetar.broker.subscriptions.acknowledgements import Acknowledgements
from magnetar.broker.subscriptions.consumer import Consumer, tell_active_change
from magnetar.broker.subscriptions.delayed import DelayedDelivery
from magnetar.broker.subscriptions.dispatch import (
    DispatchLoop,
    SnapshotSink,
    TxnAckHolds,
    TxnReadFilter,
)
from magnetar.broker.subscriptions.dispatchers import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    TYPE_NAMES,
    SubType,
)
from magnetar.broker.subscriptions.entries import EntryMeta, EntryMetaCache
from magnetar.broker.subscriptions.redelivery import Redelivery
from magnetar.broker.subscriptions.stats import Meter, now_ms
from magnetar.managed_ledger.api import (
    Entry,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.wire import commands, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName


class SubscriptionOwner(Protocol):
    """What a subscription needs from the topic's subscriptions
    (:class:`magnetar.broker.subscriptions.topic_subscriptions.TopicSubscriptionsImpl`, which
    imports this module; this module does not import it)."""

    topic: TopicName
    managed_ledger: ManagedLedger
    meta_cache: EntryMetaCache
    precise_flow_control: bool
    txn_buffer: TxnReadFilter | None
    txn_acks: TxnAckHolds | None
    snapshots: SnapshotSink | None

    def forget(self, sub: Subscription) -> None: ...
    def position_for_message_id(self, mid: MessageId, *, compacted: bool = False) -> Position: ...
    async def position_for_publish_time(
        self, publish_time: int, *, compacted: bool = False
    ) -> Position: ...
    async def last_message_id(self, *, read_compacted: bool = False) -> MessageId: ...


log = logging.getLogger(__name__)

NON_DURABLE_LINGER_S: Final = 60.0
"""A reader's subscription kept this long after a seek closed its consumers."""
REPLICATED_PROPERTY: Final = "pulsar.replicated.subscription"
"""The cursor property (1) of a replicated subscription (Pulsar's), so the flag survives
restarts and ownership moves (docs/geo-replication.md, "Replicated subscriptions")."""


class Subscription:
    """One subscription of a persistent topic (see the module docstring)."""

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
        self.last_mark_delete_advanced_ms = 0
        """When an acknowledgement last moved the mark-delete position (epoch ms)."""
        self.expiries = Meter()
        """Entries expired by the message TTL (Pulsar's totalMsgExpired, msgRateExpired)."""
        self.last_expire_ms = 0
        self.durable = durable
        self.sub_type: SubType = sub_type
        self.key_shared_mode = key_shared_mode
        self.consumers: list[Consumer] = []
        self.policy = dispatchers.make_policy(
            self, sub_type, key_shared_mode=key_shared_mode, precise=self.owner.precise_flow_control
        )
        self.owner_of: dict[Position, Consumer] = {}
        """Which consumer holds each position delivered and not acknowledged."""
        self.lock = asyncio.Lock()
        self.dispatch = DispatchLoop(self)
        self.redelivery = Redelivery()
        self.delayed = DelayedDelivery(on_due=self.dispatch.wake)
        self.acknowledgements = Acknowledgements(self)
        self._linger: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._closed = False
        self.avg_messages_per_entry = 1.0
        self.out = Meter()

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
        self.dispatch.wake()

    @property
    def read_compacted(self) -> bool:
        """The consumers read the topic's compacted view (the cursor reads through it)."""
        return isinstance(self.cursor, CompactedCursor)

    def next_unacked_position(self) -> Position:
        return self.ml.next_position(self.cursor.mark_delete_position)

    @property
    def replicated(self) -> bool:
        """Its mark-delete position is carried over to the other clusters of the topic."""
        return self.durable and self.cursor.properties.get(REPLICATED_PROPERTY) == 1

    async def set_replicated(self, replicated: bool) -> None:
        """Flag (or unflag) the subscription as replicated, in its cursor's properties."""
        if not self.durable or self.replicated == replicated:
            return
        properties = dict(self.cursor.properties)
        if replicated:
            properties[REPLICATED_PROPERTY] = 1
        else:
            properties.pop(REPLICATED_PROPERTY, None)
        try:
            await self.cursor.mark_delete(self.cursor.mark_delete_position, properties=properties)
        except ManagedLedgerError as exc:
            raise BrokerError(pb.PersistenceError, f"flagging {self.name}: {exc}") from exc

    async def move_to(self, position: Position) -> None:
        """Acknowledge everything up to ``position`` (another cluster's replicated-subscription
        update); nothing when the subscription is there already."""
        async with self.lock:
            if self._closed or position <= self.cursor.mark_delete_position:
                return
            await self.cursor.mark_delete(position)
            self.last_mark_delete_advanced_ms = now_ms()
            for c in self.consumers:
                self.acknowledgements.acked_upto(c, position)
        self.wake()

    # -- consumers ----------------------------------------------------------------------------

    async def add_consumer(self, c: Consumer, sub_type: SubType) -> None:
        async with self.lock:
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
            self.dispatch.ensure_running()
            self.wake()

    def _change_type(self, sub_type: SubType, key_shared_mode: int) -> None:
        """A subscription without consumers takes the type of the next one (as Pulsar)."""
        was_replaying = bool(self.redelivery.replay) or len(self.delayed) > 0
        self.sub_type = sub_type
        self.key_shared_mode = key_shared_mode
        self.policy = dispatchers.make_policy(
            self, sub_type, key_shared_mode=key_shared_mode, precise=self.owner.precise_flow_control
        )
        if was_replaying and not self.policy.uses_replay:
            self.redelivery.clear()
            self.delayed.clear()
            self.redelivery.rewind = True

    def _update_active(self, *, joined: Consumer | None = None) -> None:
        policy = self.policy
        assert isinstance(policy, dispatchers.SingleActive)
        new = policy.pick()
        old = policy.active
        policy.active = new
        if new is not old and old is not None:
            # the new active consumer starts from the first unacknowledged message
            self.redelivery.rewind = True
        if self.sub_type == FAILOVER:
            tell_active_change(self.consumers, new, changed=new is not old, joined=joined)

    async def remove_consumer(self, c: Consumer) -> None:
        async with self.lock:
            if c.closed:
                return
            self._detach(c, redeliver=True)
            if isinstance(self.policy, dispatchers.SingleActive):
                self._update_active()
            self.wake()
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
        owner_of = self.owner_of
        for position in pending:
            if owner_of.get(position) is c:
                del owner_of[position]
        if not redeliver or not pending:
            return
        self.redelivery.count(pending)
        if self.policy.uses_replay:
            for position, (_, key_hash) in pending.items():
                self.redelivery.park(position, key_hash)
        else:
            self.redelivery.rewind = True
        if not self.consumers and not self.policy.uses_replay:
            self.redelivery.rewind = True

    def maybe_reached_end(self) -> None:
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

    # -- delivery (policies call this) --------------------------------------------------------

    def send(self, c: Consumer, entry: Entry, meta: EntryMeta) -> None:
        """Deliver ``entry`` to ``c`` (policies call this)."""
        position = entry.position
        ack_set = self.cursor.batch_ack_set(position) if meta.is_batch else None
        n = meta.num_messages
        unacked = acks.unacked_count(ack_set, n) if ack_set else n
        c.cnx.send_message(
            consumer_id=c.consumer_id,
            message_id=MessageId(position.ledger_id, position.entry_id, self.partition_index),
            redelivery_count=self.redelivery.counts.get(position, 0),
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
        self.owner_of[position] = c
        c.out.add(n, meta.size)
        self.out.add(n, meta.size)
        self.avg_messages_per_entry += (n - self.avg_messages_per_entry) * 0.1

    # -- acknowledgements (the part: ``acknowledgements``) -------------------------------------

    async def ack(self, c: Consumer, cmd: pb.CommandAck) -> None:
        await self.acknowledgements.ack(c, cmd)

    def expired(self, entries: int) -> None:
        """The message TTL acknowledged ``entries`` of this subscription's backlog."""
        self.expiries.add(entries)
        self.last_expire_ms = now_ms()

    async def transaction_acks(self, cmd: pb.CommandAck) -> None:
        """Apply the acknowledgements a committed transaction held (``transactions.
        pending_acks``), whichever consumer sent them (it may be gone)."""
        await self.acknowledgements.transaction_acks(cmd)

    def transaction_released(self, positions: Sequence[Position]) -> None:
        """An aborted transaction's acknowledgements: deliver those messages again."""
        self.acknowledgements.transaction_released(positions)

    # -- redelivery -------------------------------------------------------------------------

    def redeliver(
        self, c: Consumer, mids: Sequence[pb.MessageIdData], *, consumer_epoch: int | None
    ) -> None:
        if c.closed:
            return
        if consumer_epoch is not None and (c.epoch is None or consumer_epoch > c.epoch):
            c.epoch = consumer_epoch
        if not self.policy.uses_replay:
            self.redelivery.rewind = True  # Exclusive/Failover: rewind (counted when applied)
            self.wake()
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
            if self.owner_of.get(position) is c:
                del self.owner_of[position]
            self.redelivery.park(position, key_hash)
        c.unacked_messages -= n
        c.redelivered.add(n)
        self.redelivery.count(picked)
        self.wake()

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
        async with self.lock:
            if self._closed:
                raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closing")
            closing = list(self.consumers)
            for c in closing:
                self._detach(c, redeliver=False)
            if isinstance(self.policy, dispatchers.SingleActive):
                self.policy.active = None
            self.redelivery.reset()
            self.delayed.clear()
            self.owner_of.clear()
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
        async with self.lock:
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
        async with self.lock:
            closing = list(self.consumers)
            for c in closing:
                self._detach(c, redeliver=False)
            await self._close_locked(delete_cursor=delete_cursor)
        if send_close:
            for c in closing:
                self._send_close(c)

    async def _close_locked(self, *, delete_cursor: bool) -> None:
        self._closed = True
        self.wake()
        self.delayed.cancel()
        if self._linger is not None:
            self._linger.cancel()
        self._linger = None
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
            "msgBacklogNoDelayed": max(0, self.cursor.backlog() - len(self.delayed)),
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "type": TYPE_NAMES.get(self.sub_type, "Exclusive"),
            "msgRateOut": self.out.msg_rate(),
            "msgThroughputOut": self.out.byte_rate(),
            "msgOutCounter": self.out.msgs,
            "bytesOutCounter": self.out.bytes,
            "msgRateRedeliver": self.redelivery.redelivered.msg_rate(),
            "msgDelayed": len(self.delayed),
            "consumers": consumers,
            "isDurable": self.durable,
            "isReplicated": self.replicated,
            "blockedSubscriptionOnUnackedMsgs": False,
            "lastExpireTimestamp": self.last_expire_ms,
            "msgRateExpired": self.expiries.msg_rate(),
            "totalMsgExpired": self.expiries.msgs,
            "lastAckedTimestamp": max((c.last_acked_ms for c in self.consumers), default=0),
            "lastConsumedFlowTimestamp": max((c.last_flow_ms for c in self.consumers), default=0),
            "lastMarkDeleteAdvancedTimestamp": self.last_mark_delete_advanced_ms,
            "msgAckRate": sum(float(c["msgAckRate"]) for c in consumers),
        }
        policy = self.policy
        if isinstance(policy, dispatchers.SingleActive) and policy.active is not None:
            out["activeConsumerName"] = policy.active.consumer_name
        if self.sub_type == KEY_SHARED:
            out["keySharedMode"] = "STICKY" if self.key_shared_mode == pb.STICKY else "AUTO_SPLIT"
        return out
