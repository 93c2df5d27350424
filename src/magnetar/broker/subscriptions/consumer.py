"""A consumer attached to a subscription: its permits, what it holds unacknowledged, its stats.

The connection layer drives it through the :class:`~magnetar.broker.contracts.ConsumerHandle`
methods; every decision (which entry goes where, what an ack changes) is the subscription's.
The consumer only keeps per-consumer state:

* ``permits`` -- FLOW adds, each message dispatched takes one (a batch entry takes its
  message count; permits may go below zero by the tail of the last batch, as in Pulsar);
* ``pending`` -- entries delivered and not yet acknowledged, with how many of their messages
  are still unacknowledged and their sticky-key hash, so a disconnect or a REDELIVER gives
  back exactly these.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from magnetar.broker.contracts import LastMessageId, ServerCnx
from magnetar.broker.subscriptions.stats import Meter, now_ms
from magnetar.managed_ledger.api import Position
from magnetar.wire import commands, pb

log = logging.getLogger(__name__)

ACTIVE_EVENTS_VERSION: Final = 12
"""Clients from this protocol version on understand ACTIVE_CONSUMER_CHANGE."""


class ConsumerOwner(Protocol):
    """What a consumer asks of its subscription (persistent or non-persistent)."""

    def wake(self) -> None: ...

    async def ack(self, c: Consumer, cmd: pb.CommandAck) -> None: ...

    def redeliver(
        self, c: Consumer, mids: Sequence[pb.MessageIdData], *, consumer_epoch: int | None
    ) -> None: ...

    async def seek(self, cmd: pb.CommandSeek) -> None: ...

    async def get_last_message_id(self) -> LastMessageId: ...

    async def unsubscribe(self, c: Consumer) -> None: ...

    async def remove_consumer(self, c: Consumer) -> None: ...

    def consumer_extra_stats(self, c: Consumer) -> dict[str, object]: ...


class Consumer:
    """One consumer of one subscription (implements ConsumerHandle)."""

    def __init__(
        self, *, subscription: ConsumerOwner, cnx: ServerCnx, cmd: pb.CommandSubscribe
    ) -> None:
        self.subscription = subscription
        self.cnx = cnx
        self._consumer_id = cmd.consumer_id
        self._consumer_name = cmd.consumer_name or uuid.uuid4().hex[:10]
        self.priority_level = cmd.priority_level
        self.permits = 0
        self.pending: dict[Position, tuple[int, int]] = {}
        """Delivered, unacknowledged entries: position -> (unacked messages, key hash)."""
        self.unacked_messages = 0
        self.epoch: int | None = None
        """Sent in MESSAGE once a REDELIVER carried an epoch (the client then drops frames of
        older epochs); never before, so a client is never told of an epoch it did not ask."""
        self.closed = False
        self.told_end = False
        """REACHED_END_OF_TOPIC sent (terminated topic read to its end)."""
        self.join_read_position: Position | None = None
        """Key_Shared: read position when it joined; newer entries wait until acked up to it."""
        ks = cmd.keySharedMeta
        self.key_shared_mode = ks.keySharedMode if cmd.HasField("keySharedMeta") else pb.AUTO_SPLIT
        self.hash_ranges = [(r.start, r.end) for r in ks.hashRanges]
        self.allow_out_of_order = ks.allowOutOfOrderDelivery
        self.metadata = {kv.key: kv.value for kv in cmd.metadata}
        self.connected_since = datetime.datetime.now(datetime.UTC).isoformat()
        self.out = Meter()
        self.redelivered = Meter()
        self.acked = Meter()
        """Messages acknowledged (Pulsar's msgAckRate)."""
        self.last_acked_ms = 0
        self.last_flow_ms = 0
        """When the client last granted permits (Pulsar's lastConsumedFlowTimestamp)."""
        self.last_consumed_ms = 0

    # -- ConsumerHandle -------------------------------------------------------------------

    @property
    def consumer_id(self) -> int:
        return self._consumer_id

    @property
    def consumer_name(self) -> str:
        return self._consumer_name

    @property
    def is_closed(self) -> bool:
        return self.closed

    def flow(self, permits: int) -> None:
        if permits <= 0 or self.closed:
            return
        self.last_flow_ms = now_ms()
        self.permits += permits
        self.subscription.wake()

    async def ack(self, cmd: pb.CommandAck) -> None:
        await self.subscription.ack(self, cmd)

    def redeliver_unacknowledged(
        self, message_ids: Sequence[pb.MessageIdData], consumer_epoch: int | None = None
    ) -> None:
        self.subscription.redeliver(self, message_ids, consumer_epoch=consumer_epoch)

    async def seek(self, cmd: pb.CommandSeek) -> None:
        await self.subscription.seek(cmd)

    async def get_last_message_id(self) -> LastMessageId:
        return await self.subscription.get_last_message_id()

    async def unsubscribe(self) -> None:
        await self.subscription.unsubscribe(self)

    async def close(self) -> None:
        await self.subscription.remove_consumer(self)

    def stats(self) -> Mapping[str, Any]:
        out: dict[str, Any] = {
            "consumerName": self._consumer_name,
            "consumerId": self._consumer_id,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "msgRateOut": self.out.msg_rate(),
            "msgThroughputOut": self.out.byte_rate(),
            "msgOutCounter": self.out.msgs,
            "bytesOutCounter": self.out.bytes,
            "msgRateRedeliver": self.redelivered.msg_rate(),
            "msgAckRate": self.acked.msg_rate(),
            "priorityLevel": self.priority_level,
            "address": self.cnx.remote_address,
            "clientVersion": self.cnx.client_version,
            "connectedSince": self.connected_since,
            "blockedConsumerOnUnackedMsgs": False,
            "lastAckedTimestamp": self.last_acked_ms,
            "lastConsumedTimestamp": self.last_consumed_ms,
            "lastConsumedFlowTimestamp": self.last_flow_ms,
            "metadata": dict(self.metadata),
        }
        out.update(self.subscription.consumer_extra_stats(self))
        return out

    # -- what the broker tells the client on its own --------------------------------------

    def tell_active(self, active: bool) -> None:
        """ACTIVE_CONSUMER_CHANGE (Failover), when the client understands it."""
        if self.cnx.protocol_version >= ACTIVE_EVENTS_VERSION:
            self.cnx.send_command(
                commands.active_consumer_change(consumer_id=self._consumer_id, is_active=active)
            )

    def tell_closed(self) -> None:
        """CLOSE_CONSUMER: the client subscribes again (unload, subscription deleted)."""
        try:
            self.cnx.close_consumer(self._consumer_id)
        except Exception as exc:  # the connection may be gone already
            log.debug("CLOSE_CONSUMER to %s not sent: %s", self, exc)

    def __repr__(self) -> str:
        return f"Consumer({self._consumer_name!r}, id={self._consumer_id})"


def tell_active_change(
    consumers: Sequence[Consumer],
    active: Consumer | None,
    *,
    changed: bool,
    joined: Consumer | None,
) -> None:
    """ACTIVE_CONSUMER_CHANGE of a Failover subscription: to every consumer when the active
    one ``changed``, else to the one that just ``joined`` (whether it is the active one)."""
    if changed:
        for c in consumers:
            c.tell_active(c is active)
    elif joined is not None:
        joined.tell_active(joined is active)
