"""Non-persistent topics with the official client against a real standalone: delivered to
the consumers connected at publish time, never stored, dropped (and counted) for a consumer
without permits, every subscription type, readers, partitions, producer access modes, and
clients that keep working across an unload, a restart and the inactivity collection."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.client.admin import AdminError
from tests.support.standalone import StandaloneProc, admin_call
from tests.support.wait import wait_until

NS = "non-persistent://public/default"
ADMIN_NS = "/non-persistent/public/default"


def np(topic: str) -> str:
    return f"{NS}/{topic}"


def admin(standalone: StandaloneProc, method: str, path: str, body: Any = None) -> Any:
    return admin_call(standalone.http_url, method, path, body, timeout=15)


def stats(standalone: StandaloneProc, topic: str) -> dict[str, Any]:
    found: dict[str, Any] = admin(standalone, "GET", f"{ADMIN_NS}/{topic}/stats")
    return found


def receive_all(consumer: pulsar.Consumer, *, idle_ms: int = 1_000) -> list[pulsar.Message]:
    """Everything the consumer gets until it has been idle for ``idle_ms``."""
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
    assert {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got} == {(0, 0)}
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
    # a queue of 10: the client grants 10 permits and no more until the application reads
    slow = client.subscribe(np(topic), "slow", receiver_queue_size=10)
    fast = client.subscribe(np(topic), "fast")
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(300):
        producer.send(f"x{i}".encode())
    assert len(receive_all(fast)) == 300  # the other subscription lost nothing
    found = stats(standalone, topic)
    sub = found["subscriptions"]["slow"]
    assert sub["msgOutCounter"] == 10 and sub["msgDropCounter"] == 290
    assert found["subscriptions"]["fast"]["msgDropCounter"] == 0
    assert found["msgInCounter"] == 300 and found["storageSize"] == 0
    assert found["publishers"][0]["msgDropRate"] == 0.0
    labels = f'cluster="standalone",namespace="public/default",topic="{np(topic)}"'
    metrics = standalone.metrics()
    assert f"pulsar_in_messages_total{{{labels}}} 300" in metrics
    # dispatched, per subscription (as Pulsar: no topic-level pulsar_out_messages_total)
    for sub, count in (("fast", 300), ("slow", 10)):
        sub_labels = (
            f'cluster="standalone",namespace="public/default",subscription="{sub}",'
            f'topic="{np(topic)}"'
        )
        assert f"pulsar_out_messages_total{{{sub_labels}}} {count}.0" in metrics
    assert f"pulsar_storage_size{{{labels}}} 0" in metrics
    got = receive_all(slow, idle_ms=500)
    assert [m.data() for m in got] == [f"x{i}".encode() for i in range(10)]
    # rates are per second over the last interval: they show the burst once computed
    wait_until(
        lambda: stats(standalone, topic)["subscriptions"]["slow"]["msgDropRate"] > 0,
        timeout=10,
        what="msgDropRate of the slow subscription",
    )
    # having read its queue, the client grants permits again and gets what comes next
    producer.send(b"later")
    assert slow.receive(timeout_millis=10_000).data() == b"later"


def test_topic_drop_rate_sums_its_subscriptions(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    client.subscribe(np(topic), "a", receiver_queue_size=1)
    producer = client.create_producer(np(topic), batching_enabled=False)
    for _ in range(50):
        producer.send(b"y")

    def topic_rate() -> bool:
        found = stats(standalone, topic)
        return bool(found["msgDropRate"] > 0) and found["msgDropRate"] == pytest.approx(
            found["subscriptions"]["a"]["msgDropRate"]
        )

    wait_until(topic_rate, timeout=10, what="the topic's msgDropRate")


def test_shared_round_robin(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(np(topic), "sh", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(np(topic), "sh", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(np(topic), batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode())
    got_a, got_b = receive_all(a), receive_all(b)
    assert len(got_a) == len(got_b) == 20
    assert sorted(int(m.data()) for m in got_a + got_b) == list(range(40))


def test_exclusive_refuses_a_second_consumer_and_other_types(
    client: pulsar.Client, topic: str
) -> None:
    client.subscribe(np(topic), "ex")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(np(topic), "ex")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(np(topic), "ex", consumer_type=pulsar.ConsumerType.Shared)


def test_failover_delivers_to_the_active_consumer_only(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
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
    assert stats(standalone, topic)["subscriptions"]["fo"]["activeConsumerName"] == "a"
    first.close()  # b takes over
    wait_until(
        lambda: stats(standalone, topic)["subscriptions"]["fo"].get("activeConsumerName") == "b",
        timeout=10,
        what="b to become the active consumer",
    )
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


def test_reader_sees_what_is_published_from_now(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    producer = client.create_producer(np(topic), batching_enabled=False)
    producer.send(b"before the reader")
    reader = client.create_reader(np(topic), pulsar.MessageId.earliest)
    for i in range(5):
        producer.send(f"r{i}".encode())
    assert [reader.read_next(timeout_millis=10_000).data() for _ in range(5)] == [
        f"r{i}".encode() for i in range(5)
    ]
    assert len(stats(standalone, topic)["subscriptions"]) == 1
    reader.close()
    # a reader's subscription goes with it
    wait_until(
        lambda: stats(standalone, topic)["subscriptions"] == {},
        timeout=10,
        what="the reader's subscription to go",
    )


def test_batches_arrive_whole(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    consumer = client.subscribe(np(topic), "b")
    producer = client.create_producer(
        np(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(100):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    got = receive_all(consumer)
    assert [m.data() for m in got] == [f"{i}".encode() for i in range(100)]
    found = stats(standalone, topic)
    assert found["msgInCounter"] == 100
    entries = admin(standalone, "GET", f"{ADMIN_NS}/{topic}/internalStats")["entriesAddedCounter"]
    assert entries < 100  # batches stayed entries end to end
    assert found["subscriptions"]["b"]["msgOutCounter"] == 100


def test_partitioned_topic(client: pulsar.Client, standalone: StandaloneProc, topic: str) -> None:
    admin(standalone, "PUT", f"{ADMIN_NS}/{topic}/partitions", 3)
    assert client.get_topic_partitions(np(topic)) == [
        f"{np(topic)}-partition-{i}" for i in range(3)
    ]
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


def test_regex_subscription_finds_the_non_persistent_topics(
    client: pulsar.Client, topic: str
) -> None:
    names = [np(f"{topic}-re-{i}") for i in range(2)]
    producers = [client.create_producer(n, batching_enabled=False) for n in names]
    consumer = client.subscribe(
        re.compile(f"{np(topic)}-re-.*"),
        "re",
        regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly,
    )
    for n, p in zip(names, producers, strict=True):
        p.send(n.encode())
    got = receive_all(consumer)
    assert sorted(m.data().decode() for m in got) == sorted(names)


def test_producer_access_modes_and_names(client: pulsar.Client, topic: str) -> None:
    client.create_producer(np(topic), access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(np(topic), batching_enabled=False)  # shared, under an exclusive
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(np(topic), access_mode=pulsar.ProducerAccessMode.Exclusive)
    other = f"{topic}-names"
    client.create_producer(np(other), producer_name="same")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(np(other), producer_name="same")


def _pair(
    client: pulsar.Client, topic: str, first: bytes
) -> tuple[pulsar.Producer, pulsar.Consumer]:
    """A consumer (subscription "s") and a producer on ``topic``, ``first`` sent through."""
    consumer = client.subscribe(np(topic), "s")
    producer = client.create_producer(np(topic), batching_enabled=False)
    producer.send(first)
    assert consumer.receive(timeout_millis=10_000).data() == first
    return producer, consumer


def _keeps_delivering(producer: pulsar.Producer, consumer: pulsar.Consumer) -> None:
    def delivered() -> bool:
        producer.send(b"again")
        try:
            while consumer.receive(timeout_millis=500).data() != b"again":
                pass
            return True
        except pulsar.Timeout:
            return False

    wait_until(delivered, timeout=30, interval=0.2, what="delivery after the topic came back")


def test_unload_then_clients_reconnect(
    client: pulsar.Client, standalone: StandaloneProc, topic: str
) -> None:
    producer, consumer = _pair(client, topic, b"first")
    assert stats(standalone, topic)["msgInCounter"] == 1
    admin(standalone, "PUT", f"{ADMIN_NS}/{topic}/unload")
    _keeps_delivering(producer, consumer)
    found = stats(standalone, topic)  # the topic loaded again, with both clients back
    assert len(found["publishers"]) == 1 and len(found["subscriptions"]["s"]["consumers"]) == 1


@pytest.fixture(scope="module")
def quick_gc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    """A standalone that drops a non-persistent topic after 1 s without clients (the check
    runs every stats interval, 5 s)."""
    proc = StandaloneProc(
        Path(tmp_path_factory.mktemp("np-gc")) / "data",
        extra_args=["--non-persistent-inactive", "1"],
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def _listed(proc: StandaloneProc) -> list[str]:
    found: list[str] = admin(proc, "GET", ADMIN_NS)
    return found


def test_inactive_topics_are_dropped_and_come_back(quick_gc: StandaloneProc, topic: str) -> None:
    client = pulsar.Client(quick_gc.service_url, operation_timeout_seconds=15)
    try:
        producer, consumer = _pair(client, topic, b"one")
        assert np(topic) in _listed(quick_gc)
        producer.close()
        consumer.close()
        wait_until(lambda: np(topic) not in _listed(quick_gc), timeout=30, what="the collection")
        with pytest.raises(AdminError) as err:
            stats(quick_gc, topic)
        assert err.value.status == 404
        # the next client loads it again
        _pair(client, topic, b"two")
        assert stats(quick_gc, topic)["msgInCounter"] == 1
    finally:
        client.close()


def test_clients_keep_working_across_a_restart(quick_gc: StandaloneProc, topic: str) -> None:
    client = pulsar.Client(quick_gc.service_url, operation_timeout_seconds=30)
    try:
        producer, consumer = _pair(client, topic, b"before")
        quick_gc.restart()  # kill -9 and start on the same ports: the topic is gone
        _keeps_delivering(producer, consumer)
        assert stats(quick_gc, topic)["subscriptions"]["s"]["consumers"]
    finally:
        client.close()
