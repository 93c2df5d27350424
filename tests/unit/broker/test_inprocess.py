"""The broker core in-process: a real BrokerService (embedded metadata store, the in-memory
managed ledger) and real ServerConnections fed frames through a recording transport -- no
socket, no subprocess. Covers the protocol flows a client drives: CONNECT, LOOKUP,
PRODUCER/SEND, SUBSCRIBE/FLOW/MESSAGE, ACK, SEEK, and what survives a reconnect."""

from __future__ import annotations

from magnetar.broker.service import BrokerService
from magnetar.wire import commands, frames, pb
from tests.support.inprocess import TOPIC, Client
from tests.support.wait import eventually

_C = pb.BaseCommand


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
