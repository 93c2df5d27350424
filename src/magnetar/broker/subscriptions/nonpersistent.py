"""Subscriptions of a non-persistent topic: messages go to the consumers connected now, or
nowhere.

Nothing is stored and nothing is read back. When a producer's entry arrives the topic hands
it to :meth:`NonPersistentSubscriptions.broadcast`, which gives it to each subscription at
once: Exclusive/Failover to the active consumer, Shared to the next consumer round robin,
Key_Shared to the consumer owning the key's hash -- *if* that consumer has permits and its
connection is writable; otherwise the entry is dropped for that subscription and counted
(``msgDropRate``), as Pulsar's non-persistent dispatchers do. Acknowledgements, redelivery
requests and SEEKs are accepted and change nothing (there is nothing to redeliver or rewind);
the admin operations on stored messages (create at a position, reset) are refused. Messages
carry message id 0:0 (with their batch index), the id Pulsar gives every non-persistent
entry.

As in Pulsar, a subscription made by a consumer stays while the topic is loaded (a reader's,
non-durable, goes with its consumer); subscriptions live in memory only, like the topic.

The consumer-selection policies are the persistent dispatchers' (``selectors``): the same
round robin, active-consumer choice and Key_Shared hash ranges.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from magnetar.broker.contracts import BrokerError, ConsumerHandle, LastMessageId, ServerCnx
from magnetar.broker.subscriptions import acks, selectors
from magnetar.broker.subscriptions.consumer import Consumer, tell_active_change
from magnetar.broker.subscriptions.dispatchers import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    TYPE_NAMES,
    SubType,
    can_take,
)
from magnetar.broker.subscriptions.entries import EntryMeta, read_meta
from magnetar.broker.subscriptions.stats import Meter, now_ms
from magnetar.wire import pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

NON_PERSISTENT_ID = MessageId(0, 0)
"""The id of every non-persistent entry (Pulsar's ``create(0L, 0L, ...)``)."""


class NonPersistentSubscription:
    """One subscription of a non-persistent topic (the owner of its :class:`Consumer`s)."""

    def __init__(self, owner: NonPersistentSubscriptions, name: str, *, durable: bool) -> None:
        self.owner = owner
        self.name = name
        self.durable = durable
        self._message_id = NON_PERSISTENT_ID._replace(partition=owner.partition_index)
        self.sub_type: SubType | None = None
        self.key_shared_mode = pb.AUTO_SPLIT
        self.consumers: list[Consumer] = []
        self.active: Consumer | None = None
        self.rr: selectors.RoundRobin[Consumer] = selectors.RoundRobin()
        self.owners: selectors.KeyHashOwners[Consumer] = selectors.KeyHashOwners(sticky=False)
        self.out = Meter()
        self.dropped = Meter()
        self.closed = False

    # -- consumers --------------------------------------------------------------------------

    def add_consumer(self, c: Consumer, sub_type: SubType) -> None:
        if self.closed:
            raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closing")
        if not self.consumers:  # an idle subscription takes the type of its next consumer
            self.sub_type = sub_type
            self.key_shared_mode = c.key_shared_mode
            self.owners = selectors.KeyHashOwners(sticky=c.key_shared_mode == pb.STICKY)
            self.active = None
        elif sub_type != self.sub_type or (
            sub_type == KEY_SHARED and c.key_shared_mode != self.key_shared_mode
        ):
            what = "type" if sub_type != self.sub_type else "key shared mode"
            raise BrokerError(pb.ConsumerBusy, f"Subscription {self.name} is of a different {what}")
        if sub_type == EXCLUSIVE and self.consumers:
            raise BrokerError(
                pb.ConsumerBusy, f"Exclusive consumer is already connected to {self.name}"
            )
        if sub_type == KEY_SHARED:
            try:
                self.owners.add(c, c.hash_ranges)
            except selectors.AssignError as exc:
                raise BrokerError(pb.ConsumerAssignError, str(exc)) from None
        self.consumers.append(c)
        self._update_active(joined=c)

    def _update_active(self, *, joined: Consumer | None = None) -> None:
        if self.sub_type not in (EXCLUSIVE, FAILOVER):
            return
        new = selectors.pick_active(self.consumers, partition_index=self.owner.partition_index)
        old, self.active = self.active, new
        if self.sub_type == FAILOVER:
            tell_active_change(self.consumers, new, changed=new is not old, joined=joined)

    def _detach(self, c: Consumer) -> None:
        c.closed = True
        c.permits = 0
        if c in self.consumers:
            self.consumers.remove(c)
        if self.sub_type == KEY_SHARED:
            self.owners.remove(c)
        self._update_active()

    async def remove_consumer(self, c: Consumer) -> None:
        if c.closed:
            return
        self._detach(c)
        if not self.consumers and not self.durable:
            self.close()

    def close(self, *, send_close: bool = False) -> None:
        """Detach every consumer (CLOSE_CONSUMER to each when asked) and forget it."""
        closing = list(self.consumers)
        for c in closing:
            self._detach(c)
        self.closed = True
        self.owner.forget(self)
        if send_close:
            for c in closing:
                c.tell_closed()

    # -- dispatch -----------------------------------------------------------------------------

    def dispatch(self, data: bytes, meta: EntryMeta) -> None:
        """Give the entry to the consumer this subscription's type picks, or drop it."""
        c = self._pick(meta)
        if c is None or not can_take(c):
            self.dropped.add(meta.num_messages, meta.size)
            return
        c.cnx.send_message(
            consumer_id=c.consumer_id,
            message_id=self._message_id,
            redelivery_count=0,
            headers_and_payload=data,
        )
        c.permits -= meta.num_messages
        c.out.add(meta.num_messages, meta.size)
        c.last_consumed_ms = now_ms()
        self.out.add(meta.num_messages, meta.size)

    def _pick(self, meta: EntryMeta) -> Consumer | None:
        t = self.sub_type
        if t == SHARED:
            return self.rr.pick(self.consumers, can_take)
        if t == KEY_SHARED:
            return self.owners.select(meta.key_hash)
        return self.active

    # -- what consumers ask (ConsumerHandle calls these) --------------------------------------

    def wake(self) -> None:
        """FLOW: nothing waits to be sent, the next entries will find the permits."""

    async def ack(self, c: Consumer, cmd: pb.CommandAck) -> None:
        c.last_acked_ms = now_ms()  # nothing is kept, so nothing to remove
        c.acked.add(acks.messages_acked(cmd.message_id))

    def redeliver(
        self,
        c: Consumer,
        mids: Sequence[pb.MessageIdData],
        *,
        consumer_epoch: int | None = None,
    ) -> None:
        """Nothing to redeliver: nothing is kept."""

    async def seek(self, cmd: pb.CommandSeek) -> None:
        """Nothing to rewind to (Pulsar accepts and ignores it too)."""

    async def get_last_message_id(self) -> LastMessageId:
        return LastMessageId(last=MessageId(-1, -1, self.owner.partition_index), mark_delete=None)

    async def unsubscribe(self, c: Consumer) -> None:
        others = [x for x in self.consumers if x is not c]
        if others:
            raise BrokerError(
                pb.ConsumerBusy,
                f"Subscription {self.name} has {len(others)} other connected consumer(s)",
            )
        self._detach(c)
        self.close()

    def consumer_extra_stats(self, c: Consumer) -> dict[str, object]:
        if self.sub_type != KEY_SHARED:
            return {}
        return {"keyHashRanges": self.owners.ranges_of(c)}

    # -- stats ----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Pulsar's NonPersistentSubscriptionStats shape."""
        out: dict[str, Any] = {
            "msgBacklog": 0,
            "msgBacklogNoDelayed": 0,
            "unackedMessages": 0,
            "type": TYPE_NAMES.get(self.sub_type, "None") if self.sub_type is not None else "None",
            "msgRateOut": self.out.msg_rate(),
            "msgThroughputOut": self.out.byte_rate(),
            "msgOutCounter": self.out.msgs,
            "bytesOutCounter": self.out.bytes,
            "msgRateRedeliver": 0.0,
            "msgDropRate": self.dropped.msg_rate(),
            "msgDropCounter": self.dropped.msgs,
            "consumers": [c.stats() for c in self.consumers],
            "isDurable": self.durable,
            "isReplicated": False,
            "lastAckedTimestamp": max((c.last_acked_ms for c in self.consumers), default=0),
            "lastConsumedFlowTimestamp": max((c.last_flow_ms for c in self.consumers), default=0),
            "msgAckRate": sum(c.acked.msg_rate() for c in self.consumers),
        }
        if self.active is not None and self.sub_type in (EXCLUSIVE, FAILOVER):
            out["activeConsumerName"] = self.active.consumer_name
        if self.sub_type == KEY_SHARED:
            out["keySharedMode"] = "STICKY" if self.key_shared_mode == pb.STICKY else "AUTO_SPLIT"
        return out


class NonPersistentSubscriptions:
    """The subscriptions of one non-persistent topic (implements TopicSubscriptions, plus
    :meth:`broadcast` for the topic's publish path)."""

    def __init__(self, topic: TopicName) -> None:
        self.topic = topic
        self.partition_index = topic.partition_index
        self._subs: dict[str, NonPersistentSubscription] = {}

    # -- publish path -------------------------------------------------------------------------

    def broadcast(self, data: bytes) -> None:
        if not self._subs:
            return
        meta = read_meta(data)
        for sub in list(self._subs.values()):
            sub.dispatch(data, meta)

    def dropped_rate(self) -> float:
        return sum(s.dropped.msg_rate() for s in self._subs.values())

    def has_consumers(self) -> bool:
        return any(s.consumers for s in self._subs.values())

    # -- TopicSubscriptions ---------------------------------------------------------------------

    async def subscribe(self, cmd: pb.CommandSubscribe, cnx: ServerCnx) -> ConsumerHandle:
        name = cmd.subscription
        if not name:
            raise BrokerError(pb.UnknownError, "a subscription name is required")
        if cmd.read_compacted:
            raise BrokerError(pb.NotAllowedError, "readCompacted only valid on persistent topics")
        sub = self._subs.get(name)
        created = sub is None
        if sub is None:
            sub = NonPersistentSubscription(self, name, durable=cmd.durable)
            self._subs[name] = sub
        consumer = Consumer(subscription=sub, cnx=cnx, cmd=cmd)
        try:
            sub.add_consumer(consumer, cmd.subType)
        except BrokerError:
            if created:
                sub.close()
            raise
        return consumer

    def names(self) -> list[str]:
        return sorted(self._subs)

    async def create(self, name: str, *, start: Any) -> None:
        raise BrokerError(
            pb.NotAllowedError,
            "Create subscription on non-persistent topic can only be done through client",
        )

    async def delete(self, name: str, *, force: bool = False) -> None:
        sub = self._subs.get(name)
        if sub is None:
            raise BrokerError(pb.SubscriptionNotFound, f"Subscription {name} not found")
        if sub.consumers and not force:
            raise BrokerError(
                pb.ConsumerBusy, f"Subscription {name} has active connected consumers"
            )
        sub.close(send_close=True)

    async def reset(
        self, name: str, *, message_id: MessageId | None = None, publish_time: int | None = None
    ) -> None:
        raise BrokerError(
            pb.NotAllowedError, "Reset cursor on a non-persistent topic is not allowed"
        )

    def on_entries_added(self) -> None:
        """Entries were already handed out by broadcast()."""

    async def close_all(self, *, reason: str) -> None:
        subs = list(self._subs.values())
        if subs:
            log.info("closing %d subscription(s) of %s: %s", len(subs), self.topic, reason)
        for sub in subs:
            sub.close(send_close=True)

    def stats(self) -> Mapping[str, Mapping[str, Any]]:
        return {name: sub.stats() for name, sub in sorted(self._subs.items())}

    def forget(self, sub: NonPersistentSubscription) -> None:
        if self._subs.get(sub.name) is sub:
            del self._subs[sub.name]
