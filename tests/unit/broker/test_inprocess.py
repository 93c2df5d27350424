"""The broker core in-process: a real BrokerService (embedded metadata store, the in-memory
managed ledger) and real ServerConnections fed frames through a recording transport -- no
socket, no subprocess. Covers the protocol flows a client drives: CONNECT, LOOKUP,
PRODUCER/SEND, SUBSCRIBE/FLOW/MESSAGE, ACK, SEEK, and what survives a reconnect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.metadata import api as md
from magnetar.metadata import open_store
from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import MessageId
from tests.support.wait import eventually

_C = pb.BaseCommand
TOPIC = "persistent://public/default/inproc"


class RecordingTransport(asyncio.Transport):
    """Collects what the connection writes; closing it is recorded, not performed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.written += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Client:
    """One connection driven by hand: commands in, decoded frames out."""

    def __init__(self, service: BrokerService) -> None:
        self.cnx = ServerConnection(service)
        self.transport = RecordingTransport()
        self.cnx.protocol.connection_made(self.transport)
        self._decoder = frames.FrameDecoder()
        self._read = 0
        self.frames: list[frames.Frame] = []
        self._rid = 0

    def rid(self) -> int:
        self._rid += 1
        return self._rid

    def send(self, cmd: pb.BaseCommand, payload: bytes | None = None) -> None:
        data = (
            frames.encode_command(cmd)
            if payload is None
            else frames.encode_payload_command(cmd, payload)
        )
        self.cnx.protocol.data_received(data)

    def _pump(self) -> None:
        new = bytes(self.transport.written[self._read :])
        self._read = len(self.transport.written)
        self.frames.extend(self._decoder.feed(new))

    async def expect(self, kind: int | tuple[int, ...], **fields: Any) -> frames.Frame:
        """The first frame of type ``kind`` (or of one of the types ``kind``; whose body has
        ``fields``) not taken yet."""
        kinds = kind if isinstance(kind, tuple) else (kind,)

        def matching() -> frames.Frame | None:
            self._pump()
            for i, f in enumerate(self.frames):
                body = commands.body(f.command) if commands.has_body(f.command) else None
                if f.type in kinds and all(getattr(body, k) == v for k, v in fields.items()):
                    return self.frames.pop(i)
            return None

        what = " or ".join(commands.type_name(k) for k in kinds)
        found = await eventually(matching, timeout=5, what=what)
        assert found is not None
        return found

    async def connect(self) -> None:
        self.send(commands.connect(client_version="inproc", protocol_version=20))
        await self.expect(_C.CONNECTED)

    async def producer(self, producer_id: int, topic: str = TOPIC) -> str:
        self.send(commands.producer(topic=topic, producer_id=producer_id, request_id=self.rid()))
        ok = await self.expect(_C.PRODUCER_SUCCESS)
        return str(ok.command.producer_success.producer_name)

    async def publish(self, producer_id: int, seq: int, text: str) -> MessageId:
        meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
        self.send(
            commands.send(producer_id=producer_id, sequence_id=seq),
            frames.encode_headers_and_payload(meta, text.encode()),
        )
        receipt = await self.expect(_C.SEND_RECEIPT, sequence_id=seq)
        mid = receipt.command.send_receipt.message_id
        return MessageId(mid.ledgerId, mid.entryId)

    async def subscribe(self, consumer_id: int, sub: str, *, topic: str = TOPIC, **kw: Any) -> None:
        self.send(
            commands.subscribe(
                topic=topic,
                subscription=sub,
                consumer_id=consumer_id,
                request_id=self.rid(),
                initial_position=pb.CommandSubscribe.Earliest,
                **kw,
            )
        )
        await self.expect(_C.SUCCESS)

    async def receive(self, consumer_id: int, n: int) -> list[tuple[MessageId, bytes]]:
        out = []
        for _ in range(n):
            f = await self.expect(_C.MESSAGE, consumer_id=consumer_id)
            mid = f.command.message.message_id
            assert f.payload is not None
            out.append((MessageId(mid.ledgerId, mid.entryId), bytes(f.payload)))
        return out

    def nothing_more(self, kind: int) -> bool:
        self._pump()
        return not any(f.type == kind for f in self.frames)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[BrokerService]:
    store: md.MetadataStore = await open_store(f"embedded://{tmp_path / 'metadata'}")
    config = BrokerConfig(bind_address="127.0.0.1", port=1, http_port=2, session_ttl_s=5.0)
    svc = BrokerService(config=config, store=store, managed_ledgers=MemoryManagedLedgerFactory())
    await svc.start()
    try:
        yield svc
    finally:
        await svc.close()
        await store.close()


async def test_lookup_answers_connect_to_this_broker(service: BrokerService) -> None:
    c = Client(service)
    await c.connect()
    c.send(commands.lookup(topic=TOPIC, request_id=7))
    f = await c.expect(_C.LOOKUP_RESPONSE, request_id=7)
    answer = f.command.lookupTopicResponse
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == service.config.service_url
    c.send(commands.partitioned_metadata(topic=TOPIC, request_id=8))
    f = await c.expect(_C.PARTITIONED_METADATA_RESPONSE, request_id=8)
    assert f.command.partitionMetadataResponse.partitions == 0


async def test_commands_before_connect_close_the_connection(service: BrokerService) -> None:
    c = Client(service)
    c.send(commands.lookup(topic=TOPIC, request_id=1))
    await eventually(lambda: c.transport.closed, what="the connection closed")


async def test_produce_subscribe_flow_ack_and_redelivery_after_reconnect(
    service: BrokerService,
) -> None:
    c = Client(service)
    await c.connect()
    assert await c.producer(1)
    ids = [await c.publish(1, seq, f"m{seq}") for seq in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5

    await c.subscribe(10, "sub")
    assert c.nothing_more(_C.MESSAGE)  # no permits, no messages
    c.send(commands.flow(consumer_id=10, permits=3))
    got = await c.receive(10, 3)
    assert [p.endswith(f"m{i}".encode()) for i, (_, p) in enumerate(got)] == [True] * 3
    assert [m for m, _ in got] == ids[:3]
    c.send(commands.flow(consumer_id=10, permits=10))
    rest = await c.receive(10, 2)
    assert [m for m, _ in rest] == ids[3:]
    c.send(commands.ack(consumer_id=10, message_ids=[ids[0], ids[1]], cumulative=True))
    c.send(commands.ack(consumer_id=10, message_ids=[ids[3]]))
    subscription = service.topics[TOPIC].subscriptions
    await eventually(
        lambda: subscription.stats()["sub"]["msgBacklog"] == 2, what="backlog after acks"
    )

    # a new connection of the same subscription gets what was not acknowledged
    c.cnx.protocol.connection_lost(None)
    d = Client(service)
    await d.connect()
    await d.subscribe(11, "sub")
    d.send(commands.flow(consumer_id=11, permits=10))
    again = await d.receive(11, 2)
    assert [m for m, _ in again] == [ids[2], ids[4]]


async def test_seek_moves_the_subscription_back(service: BrokerService) -> None:
    c = Client(service)
    await c.connect()
    await c.producer(1)
    ids = [await c.publish(1, seq, f"s{seq}") for seq in range(4)]
    await c.subscribe(20, "seeker")
    c.send(commands.flow(consumer_id=20, permits=10))
    await c.receive(20, 4)
    c.send(commands.ack(consumer_id=20, message_ids=[ids[-1]], cumulative=True))

    seek = pb.BaseCommand(type=_C.SEEK)
    seek.seek.consumer_id = 20
    seek.seek.request_id = c.rid()
    ids[1].fill(seek.seek.message_id)
    c.send(seek)
    await c.expect(_C.SUCCESS, request_id=seek.seek.request_id)
    await c.expect(_C.CLOSE_CONSUMER, consumer_id=20)  # the client subscribes again
    await c.subscribe(21, "seeker")
    c.send(commands.flow(consumer_id=21, permits=10))
    assert [m for m, _ in await c.receive(21, 3)] == ids[1:]


async def test_send_on_an_unknown_producer_closes_the_connection(
    service: BrokerService,
) -> None:
    c = Client(service)
    await c.connect()
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    c.send(
        commands.send(producer_id=99, sequence_id=0),
        frames.encode_headers_and_payload(meta, b"x"),
    )
    await eventually(lambda: c.transport.closed, what="the connection closed")
    assert c.nothing_more(_C.SEND_RECEIPT)
