"""The seams inside the broker, written down once.

Why this module exists: the connection layer (framing, handshake, lookup, producers) and
the subscription layer (dispatchers, consumers, acknowledgements) are separate bodies of
code. The connection layer drives subscriptions through :class:`TopicSubscriptions` and
:class:`ConsumerHandle`; subscriptions talk back to their client only through
:class:`ServerCnx`. Neither imports the other's modules: two import-linter contracts in
``pyproject.toml`` (run by ``make lint``) fail when the connection layer (``connection``,
``consumers``, ``requests``, ``transport``) imports ``broker.subscriptions`` or the reverse.

Errors that must reach a client as a protocol ``Error``/``SendError`` are raised as
:class:`BrokerError` with the ServerError code; the connection layer turns them into the
right response for the request that failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from magnetar.common import errors
from magnetar.managed_ledger.api import ManagedLedger
from magnetar.wire import pb
from magnetar.wire.ids import MessageId, to_unsigned
from magnetar.wire.topics import TopicName

BROKER_REQUEST_ID: Final = to_unsigned(-1)
"""request_id of CLOSE_CONSUMER, which the broker sends on its own, as Pulsar's -1."""
PRODUCER_CLOSE_REQUEST_ID: Final = 0
"""request_id of CLOSE_PRODUCER, which the broker sends on its own."""


class BrokerError(errors.MagnetarError):
    """A failure to report to the client with a protocol ServerError code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ServerCnx(Protocol):
    """One client connection, as producers and consumers see it."""

    @property
    def remote_address(self) -> str: ...

    @property
    def client_version(self) -> str: ...

    @property
    def protocol_version(self) -> int: ...

    def send_command(self, cmd: pb.BaseCommand) -> None:
        """Queue a command without payload (ACTIVE_CONSUMER_CHANGE, ...)."""

    def send_receipt(
        self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
    ) -> None:
        """Queue a SEND_RECEIPT (``commands.send_receipt``; the publish path's answer)."""

    def close_producer(self, producer_id: int) -> None:
        """The broker closed this producer (unload, fencing): the connection forgets it and
        sends CLOSE_PRODUCER; the client creates it again."""

    def close_consumer(self, consumer_id: int) -> None:
        """The broker closed this consumer (unload, subscription deleted): the connection
        forgets it and sends CLOSE_CONSUMER; the client subscribes again."""

    def send_message(
        self,
        *,
        consumer_id: int,
        message_id: MessageId,
        redelivery_count: int,
        headers_and_payload: bytes | memoryview,
        ack_set: Sequence[int] | None = None,
        consumer_epoch: int | None = None,
    ) -> None:
        """Queue a MESSAGE frame; ``headers_and_payload`` is the stored entry, unchanged."""

    def is_writable(self) -> bool:
        """False while the outgoing buffer is over its high-water mark (slow client)."""

    async def wait_writable(self) -> None:
        """Return once the outgoing buffer drained below its low-water mark."""

    def close(self) -> None:
        """Close the connection (the client reconnects)."""


@dataclass(frozen=True, slots=True)
class LastMessageId:
    last: MessageId
    mark_delete: MessageId | None


class ConsumerHandle(Protocol):
    """A consumer attached to a subscription, driven by its connection's commands."""

    @property
    def consumer_id(self) -> int: ...

    @property
    def consumer_name(self) -> str: ...

    def flow(self, permits: int) -> None: ...

    async def ack(self, cmd: pb.CommandAck) -> None:
        """Apply an ACK (individual, cumulative, batch-index). Raises BrokerError."""

    def redeliver_unacknowledged(
        self, message_ids: Sequence[pb.MessageIdData], consumer_epoch: int | None = None
    ) -> None:
        """Negative acks / ack timeouts; an empty list means every unacked message.

        ``consumer_epoch``: the command's consumer_epoch when it has one (clients that track
        epochs drop MESSAGEs of an older epoch after asking for a redelivery)."""

    async def seek(self, cmd: pb.CommandSeek) -> None:
        """Reset the subscription to a message id or publish time. Raises BrokerError."""

    async def get_last_message_id(self) -> LastMessageId: ...

    async def unsubscribe(self) -> None:
        """Delete the subscription (only if this is its only consumer). Raises BrokerError."""

    async def close(self) -> None:
        """Detach (client closed it, or its connection went away): its unacknowledged
        messages become available to the subscription's other consumers."""

    def stats(self) -> Mapping[str, Any]:
        """Pulsar's consumer stats fields (msgRateOut, availablePermits, unackedMessages...)."""


class TopicSubscriptions(Protocol):
    """The subscriptions of one topic (one partition), owned by the topic."""

    async def subscribe(self, cmd: pb.CommandSubscribe, cnx: ServerCnx) -> ConsumerHandle:
        """Attach a consumer (creating the subscription as asked). Raises BrokerError:
        ConsumerBusy for a second exclusive consumer, SubscriptionNotFound, ..."""

    def names(self) -> list[str]: ...

    async def create(self, name: str, *, start: Any) -> None:
        """Create a durable subscription without consumers (admin API)."""

    async def delete(self, name: str, *, force: bool = False) -> None: ...

    async def reset(
        self, name: str, *, message_id: MessageId | None = None, publish_time: int | None = None
    ) -> None:
        """Reset subscription ``name`` to a message id or the first message published at or
        after ``publish_time`` (ms), as SEEK does (admin resetcursor). Raises BrokerError."""

    def on_entries_added(self) -> None:
        """Called by the topic after new entries were confirmed (wakes dispatchers)."""

    async def close_all(self, *, reason: str) -> None:
        """Send CLOSE_CONSUMER to every consumer and detach them (unload, delete)."""

    def stats(self) -> Mapping[str, Mapping[str, Any]]:
        """Per subscription: Pulsar's subscription stats (msgBacklog, type, consumers...)."""


class BroadcastSubscriptions(TopicSubscriptions, Protocol):
    """The subscriptions of a non-persistent topic: entries are handed out as they come."""

    def broadcast(self, data: bytes) -> None:
        """Give a producer's entry to each subscription's consumer now (or drop it)."""

    def dropped_rate(self) -> float:
        """Messages per second dropped over all subscriptions (consumers without permits)."""

    def has_consumers(self) -> bool: ...


class TopicSubscriptionsFactory(Protocol):
    def __call__(
        self,
        *,
        topic: TopicName,
        managed_ledger: ManagedLedger,
        compacted: Any = None,
        precise_flow_control: bool = False,
    ) -> TopicSubscriptions:
        """``compacted``: the topic's compacted view
        (:class:`magnetar.broker.compaction.view.CompactedTopic`), read by read_compacted
        subscriptions; ``precise_flow_control``: Pulsar's preciseDispatcherFlowControl."""
