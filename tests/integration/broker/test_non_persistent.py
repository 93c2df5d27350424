"""Non-persistent topics with the official client: delivered to the consumers connected at
publish time, never stored, dropped for a consumer without permits (and counted), every
subscription type, readers, partitions, producer access modes, unload."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.support.procs import wait_until
from tests.support.standalone import StandaloneProc

NS = "non-persistent://public/default"


def np(topic: str) -> str:
    return f"{NS}/{topic}"


def admin(standalone: StandaloneProc, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{standalone.http_url}/admin/v2{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=15) as r:
        text = r.read()
        return json.loads(text) if text else None


def receive_all(consumer: pulsar.Consumer, *, idle_ms: int = 1_000) -> list[pulsar.Message]:
    got = []
    while True:
        try:
            got.append(consumer.receive(timeout_millis=idle_ms))
        except pulsar.Timeout:
            return got


def test_delivered_to_connected_consumers_with_receipts(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(np(topic), "s")
    producer = client.create_producer(np(topic), batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(0, 0)}  # Pulsar's id for them
    got = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    for m in got:
        consumer.acknowledge(m)  # accepted, changes nothing
    assert receive_all(consumer, idle_ms=500) == []


def test_nothing_is_kept_for_later(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(10):
        producer.send(f"before-{i}".encode())  # no subscription: nobody gets these
    consumer = client.subscribe(np(topic), "late", initial_position=pulsar.InitialPosition.Earliest)
    assert receive_all(consumer, idle_ms=500) == []
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"


def test_consumer_without_permits_loses_messages_and_drops_are_counted(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    slow = client.subscribe(np(topic), "slow", receiver_queue_size=10)
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(300):
        producer.send(f"x{i}".encode())
    stats = admin(standalone, "GET", f"/non-persistent/public/default/{topic}/stats")
    sub = stats["subscriptions"]["slow"]
    assert sub["msgOutCounter"] + sub["msgDropCounter"] == 300
    assert 0 < sub["msgOutCounter"] < 300 and sub["msgDropCounter"] > 0

    def drop_rate_shown() -> bool:  # rates cover at least a second
        st = admin(standalone, "GET", f"/non-persistent/public/default/{topic}/stats")
        return bool(st["subscriptions"]["slow"]["msgDropRate"] > 0 and st["msgDropRate"] > 0)

    wait_until(drop_rate_shown, timeout=10, interval=0.2, what="msgDropRate")
    assert stats["msgInCounter"] == 300 and stats["storageSize"] == 0
    got = receive_all(slow, idle_ms=500)
    assert len(got) == sub["msgOutCounter"]  # what was sent is what the client had


def test_shared_round_robin(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(np(topic), "sh", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(np(topic), "sh", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode())
    got_a, got_b = receive_all(a), receive_all(b)
    assert len(got_a) == len(got_b) == 20
    assert sorted(int(m.data()) for m in got_a + got_b) == list(range(40))


def test_exclusive_refuses_a_second_consumer(client: pulsar.Client, topic: str) -> None:
    client.subscribe(np(topic), "ex")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(np(topic), "ex")


def test_failover_delivers_to_the_active_consumer_only(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(
        np(topic), "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a"
    )
    second = client.subscribe(
        np(topic), "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b"
    )
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(10):
        producer.send(f"{i}".encode())
    assert len(receive_all(first)) == 10 and receive_all(second, idle_ms=300) == []
    first.close()  # b takes over
    time.sleep(0.2)
    for i in range(5):
        producer.send(f"{i}".encode())
    assert len(receive_all(second)) == 5


def test_key_shared_keeps_each_key_on_one_consumer(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(np(topic), "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        for _ in range(2)
    ]
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(60):
        producer.send(f"{i}".encode(), partition_key=f"key-{i % 6}")
    owners: dict[str, set[int]] = {}
    total = 0
    for n, c in enumerate(consumers):
        for m in receive_all(c):
            owners.setdefault(m.partition_key(), set()).add(n)
            total += 1
    assert total == 60 and len(owners) == 6
    assert all(len(who) == 1 for who in owners.values())
    assert {n for who in owners.values() for n in who} == {0, 1}  # both got keys


def test_reader_sees_what_is_published_from_now(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(np(topic), batching_enabled=False)
    producer.send(b"before the reader")
    reader = client.create_reader(np(topic), pulsar.MessageId.earliest)
    for i in range(5):
        producer.send(f"r{i}".encode())
    assert [reader.read_next(timeout_millis=10_000).data() for _ in range(5)] == [
        f"r{i}".encode() for i in range(5)
    ]
    reader.close()


def test_batches_arrive_whole(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(np(topic), "b")
    producer = client.create_producer(
        np(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(100):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    got = receive_all(consumer)
    assert [m.data() for m in got] == [f"{i}".encode() for i in range(100)]


def test_partitioned_topic(client: pulsar.Client, standalone: StandaloneProc, topic: str) -> None:
    admin(standalone, "PUT", f"/non-persistent/public/default/{topic}/partitions", 3)
    consumer = client.subscribe(np(topic), "p")
    producer = client.create_producer(
        np(topic),
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(30):
        producer.send(f"{i}".encode())
    got = receive_all(consumer)
    assert sorted(int(m.data()) for m in got) == list(range(30))
    assert {m.topic_name() for m in got} == {f"{np(topic)}-partition-{i}" for i in range(3)}


def test_exclusive_producer_access_mode(client: pulsar.Client, topic: str) -> None:
    client.create_producer(np(topic), access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(Exception, match=r"(?i)busy|fenced"):
        client.create_producer(np(topic), access_mode=pulsar.ProducerAccessMode.Exclusive)


def test_unload_then_clients_reconnect(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    consumer = client.subscribe(np(topic), "u")
    producer = client.create_producer(np(topic), batching_enabled=False)
    producer.send(b"first")
    assert consumer.receive(timeout_millis=10_000).data() == b"first"
    admin(standalone, "PUT", f"/non-persistent/public/default/{topic}/unload")

    def delivered_again() -> bool:
        producer.send(b"again")
        try:
            return consumer.receive(timeout_millis=500).data() == b"again"
        except pulsar.Timeout:
            return False

    wait_until(delivered_again, timeout=20, what="delivery after the unload")
