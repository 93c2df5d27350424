"""A producer attached to a topic: the publish path and in-order send receipts.

The hot path of the broker. Per SEND the work is: one ``managed_ledger.add_entry`` of the
stored bytes (headers and payload exactly as received; a client batch is one entry), one
pending record, and, when the add is durable, one SEND_RECEIPT carrying the entry's
(ledger, entry) id. Receipts go out strictly in the order the SENDs arrived (the client
drops the connection on an out-of-order receipt): completions are queued and released from
the head only. Nothing here logs per message.

With deduplication on (``broker.dedup``), each SEND is first classified by the topic's
:class:`~magnetar.broker.dedup.Deduplication`: a duplicate is answered with a receipt for
ledger = entry = -1 and not stored, a resend of a message still being stored with a
SEND_ERROR (the client reconnects and resends); both answers keep their place in the
per-producer receipt order.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Protocol

from magnetar.broker import replication
from magnetar.broker.contracts import BrokerError, ServerCnx
from magnetar.broker.dedup import Deduplication, Verdict
from magnetar.broker.subscriptions.entries import split_entry
from magnetar.broker.transactions.ids import TxnId
from magnetar.common.buffers import Payload
from magnetar.common.stats import LatencyWindow
from magnetar.managed_ledger.api import AddDone, ManagedLedgerTerminatedError, Position
from magnetar.wire import commands, frames, markers, pb
from magnetar.wire.errors import WireError
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)


class ProducerTopic(Protocol):
    """What a producer needs from its topic (:class:`magnetar.broker.topic.Topic`, which
    imports this module; this module does not import it)."""

    name: TopicName
    fenced_reason: str | None
    fenced_error: pb.ServerError.ValueType
    dedup: Deduplication | None
    msg_in: int
    bytes_in: int
    publish_latency_ms: LatencyWindow
    add: Callable[[Payload, AddDone], None]

    def append_txn(self, txn: TxnId, data: Payload) -> asyncio.Future[Position]: ...
    def replicated_marker(self, position: Position, marker_type: int, payload: bytes) -> None: ...
    def add_failed(self, exc: BaseException) -> None: ...
    def entries_added(self) -> None: ...
    def remove_producer(self, producer: Producer) -> None: ...


class AccessMode(enum.IntEnum):
    SHARED = pb.Shared
    EXCLUSIVE = pb.Exclusive
    WAIT_FOR_EXCLUSIVE = pb.WaitForExclusive
    EXCLUSIVE_WITH_FENCING = pb.ExclusiveWithFencing


class _Pending:
    """One SEND waiting for durability (a PendingAddOp in BookKeeper terms)."""

    __slots__ = (
        "dedup", "done", "error", "highest_sequence_id", "marker", "position", "sequence_id",
        "started",
    )  # fmt: skip

    def __init__(self, sequence_id: int, highest_sequence_id: int) -> None:
        self.started = perf_counter()
        """When the SEND was taken (Pulsar's publish latency ends with its receipt)."""
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.done = False
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.dedup = False
        """Recorded by deduplication once stored (a NEW send with deduplication on)."""
        self.marker: tuple[int, bytes] | None = None
        """(marker type, payload) of a replicated-subscription marker another cluster's
        replicator sends: the topic hears of it once stored."""


DUPLICATE_POSITION = Position(-1, -1)
"""What a duplicate's receipt carries (Pulsar: ledger = entry = -1)."""


class MessageInFlightError(Exception):
    """A resend of a message whose first copy is still being stored."""


def _replicated_subscription_marker(data: Payload) -> tuple[int, bytes] | None:
    """(type, payload) when ``data`` is a replicated-subscription marker, else None (most
    entries are told apart by two bytes, without parsing)."""
    try:
        raw_meta, payload = split_entry(data)
        if markers.METADATA_TAG not in bytes(raw_meta):
            return None
        marker_type = frames.parse_message_metadata(raw_meta).marker_type
    except WireError:
        return None
    if marker_type not in markers.REPLICATED_SUBSCRIPTION_MARKERS:
        return None
    return marker_type, bytes(payload)


def _is_last_chunk(data: Payload) -> bool:
    meta = frames.parse_message_metadata(split_entry(data)[0])
    return not meta.HasField("chunk_id") or meta.chunk_id >= meta.num_chunks_from_msg - 1


def send_error_code(exc: BaseException) -> pb.ServerError.ValueType:
    if isinstance(exc, ManagedLedgerTerminatedError):
        return pb.TopicTerminatedError
    return pb.PersistenceError


class Producer:
    __slots__ = (
        "_drained",
        "_last_counts",
        "_pending",
        "access_mode",
        "bytes_in",
        "closed",
        "cnx",
        "epoch",
        "metadata",
        "msg_in",
        "name",
        "on_detach",
        "producer_id",
        "rate_in",
        "replicator",
        "schema_version",
        "throughput_in",
        "topic",
        "topic_epoch",
        "user_provided_name",
    )

    def __init__(
        self,
        *,
        topic: ProducerTopic,
        cnx: ServerCnx,
        producer_id: int,
        name: str,
        epoch: int,
        access_mode: AccessMode,
        user_provided_name: bool,
        topic_epoch: int | None,
        metadata: dict[str, str],
        schema_version: bytes = b"",
        on_detach: Callable[[Producer], None] | None = None,
    ) -> None:
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.epoch = epoch
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.topic_epoch = topic_epoch
        self.metadata = metadata
        self.schema_version = schema_version
        """The version of the producer's schema in the topic's history (empty: none)."""
        self.on_detach = on_detach
        self.closed = False
        self._pending: deque[_Pending] = deque()
        self._drained: asyncio.Event | None = None
        self.replicator = replication.is_replicator(name)
        """Another cluster's replicator: its SEND sequence ids are derived from the source
        positions, one per entry, whatever the entry holds (docs/geo-replication.md)."""
        self.msg_in = 0
        self.bytes_in = 0
        self.rate_in = 0.0
        self.throughput_in = 0.0
        self._last_counts = (0, 0)

    @property
    def exclusive(self) -> bool:
        return self.access_mode is not AccessMode.SHARED

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def is_successor_to(self, other: Producer) -> bool:
        """A reconnection of ``other`` (same name, id and connection, higher epoch)."""
        return (
            self.name == other.name
            and self.producer_id == other.producer_id
            and self.cnx is other.cnx
            and other.epoch < self.epoch
        )

    # --- publish path ----------------------------------------------------------------------

    def publish(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        data: Payload,
        is_chunk: bool = False,
        txn: TxnId | None = None,
    ) -> None:
        """Store one SEND's entry; its receipt follows once durable, in order. With
        ``txn`` the entry goes through the topic's transaction buffer."""
        topic = self.topic
        if self.closed:
            self._send_error(sequence_id, pb.PersistenceError, "producer is closed")
            return
        if topic.fenced_reason is not None:
            self._send_error(sequence_id, topic.fenced_error, topic.fenced_reason)
            return
        dedup = topic.dedup
        if dedup is not None and (not dedup.enabled or (is_chunk and not _is_last_chunk(data))):
            dedup = None  # not judged: deduplication is off, or a chunk before the last
        if (
            dedup is not None
            and highest_sequence_id == sequence_id
            and num_messages > 1
            and not self.replicator
        ):
            derived = dedup.highest_sequence_id(data)
            if derived is not None:
                highest_sequence_id = derived
        op = _Pending(sequence_id, highest_sequence_id)
        if dedup is not None:
            verdict = dedup.check(self.name, sequence_id, highest_sequence_id)
            if verdict is not Verdict.NEW:
                op.done = True
                if verdict is Verdict.DUPLICATE:
                    op.position = DUPLICATE_POSITION
                else:
                    op.error = MessageInFlightError(
                        f"message {sequence_id} of {self.name} is still being stored"
                    )
                self._pending.append(op)
                if self._pending[0] is op:
                    self._release()
                return
            op.dedup = True
        if txn is None:
            # the callback never runs from inside add(): op is queued below first
            topic.add(data, functools.partial(self._completed, op))
        else:
            try:
                future = topic.append_txn(txn, data)
            except BrokerError as exc:
                if op.dedup and dedup is not None:
                    dedup.forget_pushed(self.name)
                op.done = True
                op.error = exc
                self._pending.append(op)
                if self._pending[0] is op:
                    self._release()
                return
            future.add_done_callback(functools.partial(self._completed_future, op))
        if self.replicator:
            op.marker = _replicated_subscription_marker(data)
        self._pending.append(op)
        topic.msg_in += num_messages
        topic.bytes_in += len(data)
        self.msg_in += num_messages
        self.bytes_in += len(data)

    def _completed_future(self, op: _Pending, future: asyncio.Future[Position]) -> None:
        if future.cancelled():
            self._completed(op, None, asyncio.CancelledError())
        elif (exc := future.exception()) is not None:
            self._completed(op, None, exc)
        else:
            self._completed(op, future.result(), None)

    def _completed(
        self, op: _Pending, position: Position | None, exc: BaseException | None
    ) -> None:
        op.done = True
        dedup = self.topic.dedup if op.dedup else None
        if isinstance(exc, asyncio.CancelledError):
            op.error = exc
        elif exc is None:
            assert position is not None
            op.position = position
            if dedup is not None and dedup.enabled:
                dedup.stored(self.name, op.highest_sequence_id, position)
            if op.marker is not None:
                self.topic.replicated_marker(position, *op.marker)
        else:
            op.error = exc
            self.topic.add_failed(exc)
        if op.error is not None and dedup is not None:
            dedup.forget_pushed(self.name)
        if self._pending[0] is op:  # else an earlier add is still in flight: it releases us
            self._release()

    def _release(self) -> None:
        """Answer the completed SENDs at the head of the queue, in order."""
        pending = self._pending
        cnx = self.cnx
        pid = self.producer_id
        stored = False
        now = 0.0
        while pending and pending[0].done:
            head = pending.popleft()
            pos = head.position
            if pos is not None:
                if pos is not DUPLICATE_POSITION:
                    stored = True
                    now = now or perf_counter()
                    self.topic.publish_latency_ms.add((now - head.started) * 1000.0)
                cnx.send_receipt(
                    pid, head.sequence_id, pos.ledger_id, pos.entry_id, head.highest_sequence_id
                )
            elif isinstance(head.error, BrokerError):
                self._send_error(head.sequence_id, head.error.code, head.error.message)  # type: ignore[arg-type]
            elif not isinstance(head.error, asyncio.CancelledError):
                err = head.error or RuntimeError("add failed")
                self._send_error(head.sequence_id, send_error_code(err), f"storage: {err}")
        if stored:
            self.topic.entries_added()
        if not pending and self._drained is not None:
            self._drained.set()

    def _send_error(self, sequence_id: int, code: pb.ServerError.ValueType, message: str) -> None:
        self.cnx.send_command(
            commands.send_error(
                producer_id=self.producer_id, sequence_id=sequence_id, error=code, message=message
            )
        )

    def send_checksum_error(self, sequence_id: int) -> None:
        self._send_error(sequence_id, pb.ChecksumError, "checksum mismatch")

    # --- lifecycle -------------------------------------------------------------------------

    async def drain(self, wait: float = 30.0) -> None:
        """Wait until every accepted SEND was answered (receipt or error)."""
        if not self._pending:
            return
        self._drained = asyncio.Event()
        try:
            async with asyncio.timeout(wait):
                await self._drained.wait()
        except TimeoutError:
            log.warning(
                "producer %s on %s: %d sends still pending",
                self.name,
                self.topic.name,
                len(self._pending),
            )
        finally:
            self._drained = None

    async def close(self) -> None:
        """Client-requested close: answer what is in flight, then detach from the topic."""
        if self.closed:
            return
        self.closed = True
        await self.drain()
        self.topic.remove_producer(self)

    def disconnect(self, *, notify: bool) -> None:
        """Broker-side close (unload, fencing, connection gone): detach now; with
        ``notify`` the client gets CLOSE_PRODUCER and re-creates the producer."""
        if self.closed:
            return
        self.closed = True
        self.topic.remove_producer(self)
        if notify:
            self.cnx.close_producer(self.producer_id)
        if self.on_detach is not None:
            self.on_detach(self)

    def update_rates(self, dt: float) -> None:
        msgs, size = self._last_counts
        self.rate_in = (self.msg_in - msgs) / dt
        self.throughput_in = (self.bytes_in - size) / dt
        self._last_counts = (self.msg_in, self.bytes_in)

    def stats(self) -> dict[str, object]:
        return {
            "msgRateIn": self.rate_in,
            "msgThroughputIn": self.throughput_in,
            "averageMsgSize": self.throughput_in / self.rate_in if self.rate_in else 0.0,
            "producerId": self.producer_id,
            "producerName": self.name,
            "accessMode": self.access_mode.name.title().replace("_", ""),
            "address": self.cnx.remote_address,
            "clientVersion": self.cnx.client_version,
            "metadata": dict(self.metadata),
            "pendingSends": len(self._pending),
        }
