"""The client layer against a real ``magnetar standalone``: the asyncio connection and its
pool (handshake, lookup, requests), producer and consumer handles (sequence ids and receipts,
batches from the official client, acknowledgements), their re-creation when the broker
unloads the topic, and a broker's remote transaction call going through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pulsar
import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.transactions import remote
from magnetar.client import blocking, connection, handles, pool
from magnetar.common import backoff
from magnetar.wire import commands, lookup, pb, urls
from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc, admin_call
from tests.support.wait import eventually

NS = "persistent://public/default"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("standalone") / "data") as proc:
        yield proc


@pytest.fixture
async def clients(standalone: StandaloneProc) -> AsyncIterator[pool.ConnectionPool]:
    p = pool.ConnectionPool(
        options=connection.Options(request_timeout_s=15), service_url=standalone.service_url
    )
    try:
        yield p
    finally:
        p.close()


def _backlog(standalone: StandaloneProc, topic: str, sub: str) -> int:
    stats = admin_call(standalone.http_url, "GET", f"/persistent/public/default/{topic}/stats")
    return int(stats["subscriptions"][sub]["msgBacklog"])


async def test_lookup_and_requests(
    standalone: StandaloneProc, clients: pool.ConnectionPool
) -> None:
    conn = await clients.lookup(f"{NS}/lookup")
    assert conn.session.connected is not None
    assert conn.session.connected.protocol_version == commands.PROTOCOL_VERSION
    answer = await conn.request(commands.partitioned_metadata(topic=f"{NS}/lookup", request_id=0))
    assert answer.type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE
    assert await clients.lookup(f"{NS}/other") is conn  # one connection per broker
    with pytest.raises(lookup.LookupFailedError) as refused:
        await clients.lookup("persistent://no-such-tenant/ns/t")
    assert refused.value.code != pb.ServiceNotReady


async def test_producer_receipts_in_sequence(
    standalone: StandaloneProc, clients: pool.ConnectionPool
) -> None:
    topic = f"{NS}/produced"
    with standalone_procs.client(standalone) as official:
        reader = official.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = await handles.Producer.create(clients, topic)
        ids = await asyncio.gather(
            *(producer.send(f"m{i}".encode(), key=f"k{i}") for i in range(20))
        )
        assert ids == sorted(ids) and len(set(ids)) == 20
        assert producer.last_sequence_id == 19
        await producer.close()
        got = [reader.receive(timeout_millis=10_000) for _ in range(20)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
        assert [m.partition_key() for m in got] == [f"k{i}" for i in range(20)]
    with pytest.raises(handles.HandleClosedError):
        await producer.send(b"late")


async def test_consumer_splits_batches_and_acknowledges(
    standalone: StandaloneProc, clients: pool.ConnectionPool
) -> None:
    topic = f"{NS}/consumed"
    consumer = await handles.Consumer.subscribe(clients, topic, "sub", receiver_queue=10)
    with standalone_procs.client(standalone) as official:
        p = official.create_producer(topic, batching_enabled=True, batching_max_messages=5)
        for i in range(25):
            p.send_async(f"v{i}".encode(), None, properties={"i": str(i)})
        p.flush()
    got = [await asyncio.wait_for(consumer.receive(), 15) for _ in range(25)]
    assert [m.payload for m in got] == [f"v{i}".encode() for i in range(25)]
    assert [m.properties for m in got] == [{"i": str(i)} for i in range(25)]
    assert any(m.message_id.batch_index > 0 for m in got)  # (batches were split)
    for m in got:
        consumer.acknowledge(m.message_id)
    await eventually(lambda: _backlog(standalone, "consumed", "sub") == 0, timeout=15)
    await consumer.close()


async def test_handles_come_back_after_an_unload(
    standalone: StandaloneProc, clients: pool.ConnectionPool
) -> None:
    topic = f"{NS}/unloaded"
    fast = backoff.Backoff(initial_s=0.05, max_s=0.5)
    consumer = await handles.Consumer.subscribe(clients, topic, "sub", backoff=fast)
    producer = await handles.Producer.create(clients, topic, backoff=fast)
    first = await producer.send(b"before")
    admin_call(standalone.http_url, "PUT", "/persistent/public/default/unloaded/unload")
    second = await asyncio.wait_for(producer.send(b"after"), 30)
    assert second > first
    await eventually(lambda: producer.reconnects >= 1 and consumer.reconnects >= 1, timeout=15)
    # at least once: "before" may come again (it was not acknowledged), "after" comes
    received = [(await asyncio.wait_for(consumer.receive(), 30))]
    while received[-1].payload != b"after":
        assert len(received) < 10, [m.payload for m in received]
        received.append(await asyncio.wait_for(consumer.receive(), 30))
    assert {m.payload for m in received} <= {b"before", b"after"}, received
    await producer.close()
    await consumer.close()


async def test_a_remote_transaction_call_goes_through_a_client_connection(
    standalone: StandaloneProc,
) -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.END_TXN_ON_PARTITION)
    e = cmd.endTxnOnPartition
    e.request_id, e.txnid_least_bits, e.txnid_most_bits = 77, 1, 0
    e.topic, e.txn_action = f"{NS}/txn", pb.COMMIT
    with pytest.raises(BrokerError) as refused:  # (transactions are off in this standalone)
        await remote.request(
            standalone.service_url, cmd, pb.BaseCommand.END_TXN_ON_PARTITION_RESPONSE
        )
    assert refused.value.code == pb.NotAllowedError
    with pytest.raises(BrokerError, match="not reachable"):
        await remote.request("pulsar://", cmd, pb.BaseCommand.END_TXN_ON_PARTITION_RESPONSE)


def test_blocking_lookup_follows_to_the_owner(standalone: StandaloneProc) -> None:
    service = urls.parse_service_url(standalone.service_url)
    deadline = time.monotonic() + 15

    def connect(address: urls.Address, proxy_to: str | None) -> blocking.BlockingConnection:
        return blocking.BlockingConnection(address, deadline=deadline, proxy_to=proxy_to)

    conn = blocking.find_owner(
        topic=f"{NS}/blocking", service=service, connect=connect, deadline=deadline
    )
    try:
        assert conn.address == service.first and conn.session.connected is not None
        answer = conn.request(
            commands.partitioned_metadata(topic=f"{NS}/b", request_id=0), deadline
        )
        assert answer.type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE
    finally:
        conn.close()
