"""Producer and consumer handles on the client layer's connections, for Magnetar's own
clients (replicators, function instances): what they need of Pulsar's client API and no more.

Why this module exists: a replicator is a consumer on one cluster and a producer on another
that must survive either side's brokers going away; a function instance is the same inside
one cluster. Both need what the official clients do on a connection: a producer sends with
sequence ids and gets a receipt per message, in order; a consumer subscribes, grants permits
(FLOW), receives and acknowledges. When the broker closes the producer or consumer (an
unload, a topic moving) or the connection is lost, the handle looks the topic up again and
re-creates itself, after a backoff with jitter (``common.backoff.Backoff``) so that many clients do
not come back at the same instant: a producer resends what had no receipt, under the same
sequence ids (the broker's deduplication drops what it already stored); a consumer's
subscription redelivers what was not acknowledged.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from typing import Final

from magnetar.client import connection, pool
from magnetar.common.backoff import Backoff
from magnetar.wire import batch, commands, frames, lookup, pb, session
from magnetar.wire.ids import MessageId

log = logging.getLogger(__name__)

_C = pb.BaseCommand
_RECREATE_ON: Final = frozenset({_C.CLOSE_PRODUCER, _C.CLOSE_CONSUMER, _C.TOPIC_MIGRATED})


class HandleClosedError(Exception):
    """The producer or consumer was closed (by its owner, or for good by the broker)."""


class RefusedError(Exception):
    """The broker refused to create the producer or consumer, for a reason retrying will not
    change (``code``: its ServerError)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{commands.error_name(code)}: {message}")
        self.code = code


_RETRIABLE: Final = frozenset(
    {pb.ServiceNotReady, pb.TooManyRequests, pb.ProducerBusy, pb.ConsumerBusy}
)
"""Answers that mean "not now": the topic loading or moving, a previous incarnation of this
producer or consumer not yet gone."""


@dataclasses.dataclass(frozen=True)
class Message:
    """One message a consumer received."""

    message_id: MessageId
    payload: bytes
    key: str | None
    properties: dict[str, str]
    publish_time: int
    producer_name: str
    sequence_id: int
    redelivery_count: int


class _Handle:
    """What producers and consumers share: the topic's connection, re-created after a
    backoff when the broker closes the handle or the connection goes."""

    kind = "handle"

    def __init__(self, clients: pool.ConnectionPool, topic: str, *, backoff: Backoff) -> None:
        self.pool = clients
        self.topic = topic
        self.backoff = backoff
        self.conn: connection.Connection | None = None
        self.closed = False
        self._ready = asyncio.Event()
        self._recreating: asyncio.Task[None] | None = None
        self.reconnects = 0

    success: int = _C.SUCCESS
    """The answer that creates the handle."""

    def _request(self) -> pb.BaseCommand:
        """The PRODUCER or SUBSCRIBE that creates the handle."""
        raise NotImplementedError

    def _attach(self, conn: connection.Connection) -> None:
        raise NotImplementedError

    def _detach(self, conn: connection.Connection) -> None:
        raise NotImplementedError

    def _created(self, conn: connection.Connection, answer: pb.BaseCommand) -> None:
        """The broker created the handle on ``conn``."""
        raise NotImplementedError

    async def _create_on(self, conn: connection.Connection) -> None:
        self._attach(conn)  # (before the answer: frames may follow it at once)
        answer = await conn.request(self._request())
        if answer.type != self.success:
            self._detach(conn)
            if answer.type == _C.ERROR:
                raise RefusedError(answer.error.error, answer.error.message)
            what = commands.type_name(self._request().type)
            raise RefusedError(pb.UnknownError, f"{what} answered with {answer.type}")
        self._created(conn, answer)

    async def _create(self) -> None:
        """Look the topic up and create the handle there, retrying what is retriable."""
        while True:
            if self.closed:
                raise HandleClosedError(f"{self.kind} on {self.topic} is closed")
            try:
                conn = await self.pool.lookup(self.topic)
                await self._create_on(conn)
            except (connection.ConnectionLostError, session.HandshakeRefusedError) as exc:
                problem = str(exc)
            except lookup.LookupFailedError as exc:
                if exc.code not in _RETRIABLE:
                    raise RefusedError(exc.code, exc.message) from None
                problem = str(exc)
            except RefusedError as exc:
                if exc.code not in _RETRIABLE:
                    raise
                problem = str(exc)
            else:
                self.conn = conn
                self.backoff.reset()
                self._ready.set()
                return
            delay = self.backoff.next()
            log.info("%s on %s: %s; again in %.2f s", self.kind, self.topic, problem, delay)
            await asyncio.sleep(delay)

    def _lost(self, why: str) -> None:
        """The broker closed this handle, or its connection went: re-create it."""
        if self.closed or self._recreating is not None:
            return
        log.info("%s on %s: %s; re-creating it", self.kind, self.topic, why)
        self._ready.clear()
        if self.conn is not None:
            self._detach(self.conn)
            self.conn = None
        self.reconnects += 1
        self._recreating = asyncio.get_running_loop().create_task(self._recreate())

    async def _recreate(self) -> None:
        try:
            await asyncio.sleep(self.backoff.next())
            await self._create()
        except (HandleClosedError, RefusedError) as exc:
            log.warning("%s on %s not re-created: %s", self.kind, self.topic, exc)
            self.closed = True
            self._ready.set()  # (waiters see it closed)
            self._given_up(exc)
        finally:
            self._recreating = None

    def connection_lost(self, exc: Exception) -> None:
        self._lost(str(exc))

    def _given_up(self, exc: Exception) -> None:
        """The handle could not be re-created and is closed for good."""

    async def _stop(self, cmd: pb.BaseCommand) -> None:
        self.closed = True
        task, self._recreating = self._recreating, None
        if task is not None:
            task.cancel()
        conn, self.conn = self.conn, None
        self._ready.set()
        if conn is not None:
            self._detach(conn)
            if not conn.is_closed:
                try:
                    await conn.request(cmd)
                except connection.ConnectionLostError:
                    pass  # (the broker forgets the handle with the connection)


class Producer(_Handle):
    """Sends messages to one topic; ``send`` returns the message id of the receipt.
    Created by ``Producer.create``."""

    kind = "producer"

    def __init__(
        self,
        clients: pool.ConnectionPool,
        topic: str,
        *,
        producer_id: int,
        name: str | None,
        backoff: Backoff,
    ) -> None:
        super().__init__(clients, topic, backoff=backoff)
        self.producer_id = producer_id
        self.name = name
        self.epoch = 0
        self.last_sequence_id = -1
        self._unacknowledged: collections.OrderedDict[
            int, tuple[bytes, asyncio.Future[MessageId]]
        ] = collections.OrderedDict()

    @classmethod
    async def create(
        cls,
        clients: pool.ConnectionPool,
        topic: str,
        *,
        producer_id: int = 1,
        name: str | None = None,
        backoff: Backoff | None = None,
    ) -> Producer:
        producer = cls(
            clients, topic, producer_id=producer_id, name=name, backoff=backoff or Backoff()
        )
        await producer._create()
        return producer

    success = _C.PRODUCER_SUCCESS

    def _request(self) -> pb.BaseCommand:
        return commands.producer(
            topic=self.topic,
            producer_id=self.producer_id,
            request_id=0,
            producer_name=self.name,
            epoch=self.epoch,
        )

    def _attach(self, conn: connection.Connection) -> None:
        conn.attach_producer(self.producer_id, self)

    def _created(self, conn: connection.Connection, answer: pb.BaseCommand) -> None:
        self.epoch += 1
        ok = answer.producer_success
        self.name = ok.producer_name
        if self.last_sequence_id < 0:
            self.last_sequence_id = ok.last_sequence_id
        for data, _ in self._unacknowledged.values():  # resent, in order, same sequence ids
            conn.write(data)

    def _detach(self, conn: connection.Connection) -> None:
        conn.detach_producer(self.producer_id)

    async def send(
        self,
        payload: bytes,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
        sequence_id: int | None = None,
    ) -> MessageId:
        """Send one message and wait for its receipt (across reconnections); its id, or
        ``ids.DUPLICATE`` when the broker's deduplication had it already."""
        if self.closed:
            raise HandleClosedError(f"producer on {self.topic} is closed")
        await self._ready.wait()
        if self.closed:
            raise HandleClosedError(f"producer on {self.topic} is closed")
        seq = self.last_sequence_id + 1 if sequence_id is None else sequence_id
        self.last_sequence_id = max(self.last_sequence_id, seq)
        assert self.name is not None
        md = pb.MessageMetadata(
            producer_name=self.name, sequence_id=seq, publish_time=int(time.time() * 1000)
        )
        if key is not None:
            md.partition_key = key
        for k, v in (properties or {}).items():
            md.properties.add(key=k, value=v)
        data = frames.encode_payload_command(
            commands.send(producer_id=self.producer_id, sequence_id=seq),
            frames.encode_headers_and_payload(md, payload),
        )
        receipt: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._unacknowledged[seq] = (data, receipt)
        conn = self.conn
        if conn is not None:
            try:
                conn.write(data)
                await conn.drain()
            except connection.ConnectionLostError:
                pass  # (resent once re-created)
        return await receipt

    async def send_stored(
        self, metadata: pb.MessageMetadata, payload: bytes, *, sequence_id: int
    ) -> asyncio.Future[MessageId]:
        """Send an entry as stored elsewhere (``metadata`` as it is, a batch's payload
        unsplit) under ``sequence_id``, which only grows; returns once it is written, with
        the future of its receipt (across reconnections; HandleClosedError when the
        producer is closed for good). A replicator's send: receipts come in order, so it
        can keep many in flight."""
        if self.closed:
            raise HandleClosedError(f"producer on {self.topic} is closed")
        await self._ready.wait()
        if self.closed:
            raise HandleClosedError(f"producer on {self.topic} is closed")
        self.last_sequence_id = max(self.last_sequence_id, sequence_id)
        count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        data = frames.encode_payload_command(
            commands.send(
                producer_id=self.producer_id,
                sequence_id=sequence_id,
                num_messages=count,
                highest_sequence_id=sequence_id,
            ),
            frames.encode_headers_and_payload(metadata, payload),
        )
        receipt: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._unacknowledged[sequence_id] = (data, receipt)
        conn = self.conn
        if conn is not None:
            try:
                conn.write(data)
                await conn.drain()
            except connection.ConnectionLostError:
                pass  # (resent once re-created)
        return receipt

    def _given_up(self, exc: Exception) -> None:
        for _, receipt in self._unacknowledged.values():
            if not receipt.done():
                receipt.set_exception(HandleClosedError(f"producer on {self.topic}: {exc}"))
        self._unacknowledged.clear()

    def frame_received(self, frame: frames.Frame) -> None:
        cmd = frame.command
        t = frame.type
        if t == _C.SEND_RECEIPT:
            r = cmd.send_receipt
            entry = self._unacknowledged.pop(r.sequence_id, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(MessageId.from_proto(r.message_id))
        elif t == _C.SEND_ERROR:
            self._lost(f"SEND_ERROR {commands.error_name(cmd.send_error.error)}")
        elif t in _RECREATE_ON:
            self._lost(f"the broker sent {commands.type_name(t)}")

    async def close(self) -> None:
        """CLOSE_PRODUCER; messages without a receipt fail with HandleClosedError."""
        await self._stop(commands.close_producer(producer_id=self.producer_id, request_id=0))
        for _, receipt in self._unacknowledged.values():
            if not receipt.done():
                receipt.set_exception(HandleClosedError(f"producer on {self.topic} closed"))
        self._unacknowledged.clear()


class Consumer(_Handle):
    """Receives the messages of one subscription; ``receive`` one at a time (the messages
    of a batch one by one), ``acknowledge`` each. Created by ``Consumer.subscribe``."""

    kind = "consumer"

    def __init__(
        self,
        clients: pool.ConnectionPool,
        topic: str,
        *,
        subscription: str,
        consumer_id: int,
        sub_type: pb.CommandSubscribe.SubType.ValueType,
        initial_position: pb.CommandSubscribe.InitialPosition.ValueType,
        receiver_queue: int,
        backoff: Backoff,
        durable: bool = True,
    ) -> None:
        super().__init__(clients, topic, backoff=backoff)
        self.durable = durable
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.sub_type = sub_type
        self.initial_position = initial_position
        self.receiver_queue = receiver_queue
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        self._taken = 0  # messages received since the last FLOW
        self._unacked: dict[MessageId, set[int]] = {}

    @classmethod
    async def subscribe(
        cls,
        clients: pool.ConnectionPool,
        topic: str,
        subscription: str,
        *,
        consumer_id: int = 1,
        sub_type: pb.CommandSubscribe.SubType.ValueType = pb.CommandSubscribe.Exclusive,
        initial_position: pb.CommandSubscribe.InitialPosition.ValueType = (
            pb.CommandSubscribe.Earliest
        ),
        receiver_queue: int = 1000,
        backoff: Backoff | None = None,
        durable: bool = True,
    ) -> Consumer:
        """``durable=False``: a reader's subscription, gone when the consumer closes."""
        consumer = cls(
            clients,
            topic,
            subscription=subscription,
            consumer_id=consumer_id,
            sub_type=sub_type,
            initial_position=initial_position,
            receiver_queue=receiver_queue,
            backoff=backoff or Backoff(),
            durable=durable,
        )
        await consumer._create()
        return consumer

    def _request(self) -> pb.BaseCommand:
        return commands.subscribe(
            topic=self.topic,
            subscription=self.subscription,
            consumer_id=self.consumer_id,
            request_id=0,
            sub_type=self.sub_type,
            initial_position=self.initial_position,
            durable=self.durable,
        )

    def _attach(self, conn: connection.Connection) -> None:
        conn.attach_consumer(self.consumer_id, self)

    def _created(self, conn: connection.Connection, answer: pb.BaseCommand) -> None:
        # what was queued but not received is redelivered by the subscription
        while not self._queue.empty():
            self._queue.get_nowait()
        self._taken = 0
        conn.send(commands.flow(consumer_id=self.consumer_id, permits=self.receiver_queue))

    def _detach(self, conn: connection.Connection) -> None:
        conn.detach_consumer(self.consumer_id)

    def frame_received(self, frame: frames.Frame) -> None:
        t = frame.type
        if t != _C.MESSAGE:
            if t in _RECREATE_ON:
                self._lost(f"the broker sent {commands.type_name(t)}")
            return  # (ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC)
        m = frame.command.message
        entry = MessageId.from_proto(m.message_id)
        md = frame.message_metadata()
        assert frame.payload is not None
        parts = batch.split_entry(md, frame.payload, decompress_payload=True)
        if batch.is_batch(md):
            keep = set(batch.unacked_from_ack_set(m.ack_set)) if m.ack_set else None
            self._unacked[entry] = set(range(len(parts)))
        else:
            keep = None
        for i, part in enumerate(parts):
            if keep is not None and i not in keep:
                continue
            smd = part.metadata
            self._queue.put_nowait(
                Message(
                    message_id=entry._replace(batch_index=i) if batch.is_batch(md) else entry,
                    payload=bytes(part.payload),
                    key=smd.partition_key if smd.HasField("partition_key") else None,
                    properties={kv.key: kv.value for kv in smd.properties},
                    publish_time=md.publish_time,
                    producer_name=md.producer_name,
                    sequence_id=smd.sequence_id if smd.HasField("sequence_id") else md.sequence_id,
                    redelivery_count=m.redelivery_count,
                )
            )

    async def receive(self) -> Message:
        """The next message (waits for one; HandleClosedError once closed)."""
        while True:
            if self.closed:
                raise HandleClosedError(f"consumer on {self.topic} is closed")
            try:
                message = await asyncio.wait_for(self._queue.get(), timeout=1.0)
            except TimeoutError:
                continue  # (to notice a close)
            self._taken += 1
            conn = self.conn
            if self._taken >= self.receiver_queue // 2 and conn is not None:
                try:
                    conn.send(commands.flow(consumer_id=self.consumer_id, permits=self._taken))
                    self._taken = 0
                except connection.ConnectionLostError:
                    pass  # (permits granted afresh when re-created)
            return message

    def acknowledge(self, message_id: MessageId) -> None:
        """Acknowledge one message (a batch's entry once all its messages are)."""
        conn = self.conn
        if conn is None:
            return  # (not acknowledged: redelivered after the re-creation)
        entry = message_id.entry()
        left = self._unacked.get(entry)
        if left is not None:
            left.discard(message_id.batch_index)
            if left:
                return
            del self._unacked[entry]
        try:
            conn.send(commands.ack(consumer_id=self.consumer_id, message_ids=[entry]))
        except connection.ConnectionLostError:
            pass

    async def close(self) -> None:
        """CLOSE_CONSUMER (the subscription stays)."""
        await self._stop(commands.close_consumer(consumer_id=self.consumer_id, request_id=0))
