"""Producers with the official client: lookup, auto-creation, names, access modes, receipts,
batching, chunking, message ids from storage."""

from __future__ import annotations

import threading

import pulsar
import pytest

from tests.support.standalone import StandaloneProc
from tests.support.wait import holds_for, wait_until


def test_connect_lookup_and_partitioned_metadata(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    assert client.get_topic_partitions(topic) == [f"persistent://public/default/{topic}"]
    msg_id = producer.send(b"hello")
    assert msg_id.ledger_id() >= 1 and msg_id.entry_id() == 0
    assert msg_id.partition() == -1


def test_short_and_full_names_are_one_topic(client: pulsar.Client, topic: str) -> None:
    short = client.create_producer(topic)
    full = client.create_producer(f"persistent://public/default/{topic}")
    tenant_ns = client.create_producer(f"public/default/{topic}")
    ids = [p.send(b"x") for p in (short, full, tenant_ns)]
    # one managed ledger: consecutive entries of the same ledger
    assert len({i.ledger_id() for i in ids}) == 1
    assert [i.entry_id() for i in ids] == [0, 1, 2]


def test_auto_creation_and_unknown_namespace(client: pulsar.Client, topic: str) -> None:
    client.create_producer(f"persistent://public/default/{topic}-new").send(b"x")
    with pytest.raises((pulsar.TopicNotFound, pulsar.LookupError, pulsar.Timeout)):
        client.create_producer(f"persistent://no-such-tenant/no-ns/{topic}")


def test_generated_producer_names_are_unique(client: pulsar.Client, topic: str) -> None:
    names = {client.create_producer(topic).producer_name() for _ in range(5)}
    names |= {client.create_producer(f"{topic}-other").producer_name() for _ in range(3)}
    assert len(names) == 8
    assert all(n.startswith("standalone-") for n in names)


def test_named_producer_twice_is_busy(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, producer_name="alice")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="alice")


def test_receipts_in_order_with_storage_ids(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, max_pending_messages=5000, block_if_queue_full=True)
    results: list[tuple[int, pulsar.Result, pulsar.MessageId]] = []
    lock = threading.Lock()
    n = 3000

    def callback(i: int) -> object:
        def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            with lock:
                results.append((i, res, mid))

        return done

    for i in range(n):
        producer.send_async(b"m%d" % i, callback(i))
    producer.flush()
    wait_until(lambda: len(results) >= n, timeout=30, what=f"{n} receipts")
    assert [r[0] for r in results] == list(range(n))  # receipts in send order
    assert all(r[1] == pulsar.Result.Ok for r in results)
    positions = [(r[2].ledger_id(), r[2].entry_id()) for r in results]
    assert positions == sorted(positions) and len(set(positions)) == n  # one entry each


def test_batches_are_one_entry(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=50,
        batching_max_publish_delay_ms=1000,
    )
    ids: list[pulsar.MessageId] = []
    lock = threading.Lock()

    def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
        assert res == pulsar.Result.Ok
        with lock:
            ids.append(mid)

    for i in range(200):
        producer.send_async(b"b%d" % i, done)
    producer.flush()
    wait_until(lambda: len(ids) >= 200, timeout=20, what="200 receipts")
    entries: dict[tuple[int, int], list[int]] = {}
    for mid in ids:
        entries.setdefault((mid.ledger_id(), mid.entry_id()), []).append(mid.batch_index())
    assert len(entries) == 4  # 200 messages in batches of 50: four entries
    for indexes in entries.values():
        assert sorted(indexes) == list(range(50))


def test_chunked_message_is_stored(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * (7 * 1024 * 1024 // 256)  # 7 MiB > the 5 MiB max message size
    msg_id = producer.send(big)
    small = producer.send(b"after")
    # 2 chunks, then the small message: the ids come from storage, in order
    assert small.entry_id() > msg_id.entry_id()


def test_exclusive_second_producer_is_refused(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    # as the reference broker: ProducerFenced for a second exclusive producer ...
    with pytest.raises((pulsar.ProducerFenced, pulsar.ProducerBusy)):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    # ... and ProducerBusy for a shared one
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.send(b"still mine")
    first.close()
    client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive).send(b"x")


def test_exclusive_refused_while_shared_producers(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic)
    with pytest.raises((pulsar.ProducerFenced, pulsar.ProducerBusy)):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)


def test_wait_for_exclusive_waits_then_gets_it(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    got: list[pulsar.Producer] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            got.append(
                client.create_producer(
                    topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive
                )
            )
        except BaseException as err:
            errors.append(err)

    waiter = threading.Thread(target=create, daemon=True)
    waiter.start()
    holds_for(
        lambda: not got and not errors,
        2.0,
        what="WaitForExclusive waiting while another producer holds the topic",
    )
    first.send(b"first")
    first.close()
    waiter.join(timeout=15)
    assert not errors and got
    assert got[0].send(b"second").entry_id() == 1


def test_exclusive_with_fencing_takes_over(client: pulsar.Client, topic: str) -> None:
    old = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.Exclusive, send_timeout_millis=5000
    )
    old.send(b"old")
    new = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    assert new.send(b"new").entry_id() == 1
    # the old producer gets CLOSE_PRODUCER and is fenced on re-creation
    with pytest.raises(pulsar.PulsarException):
        old.send(b"old again")
    assert new.send(b"new again").entry_id() == 2


def test_auto_created_partitioned_topics(tmp_path_factory: pytest.TempPathFactory) -> None:
    proc = StandaloneProc(
        tmp_path_factory.mktemp("partitioned") / "data",
        extra_args=["--auto-topic-creation-type", "partitioned", "--default-num-partitions", "3"],
    ).start()
    try:
        c = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
        try:
            parts = c.get_topic_partitions("auto-p")
            assert parts == [f"persistent://public/default/auto-p-partition-{i}" for i in range(3)]
            producer = c.create_producer(
                "auto-p", message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
            )
            seen = {producer.send(b"%d" % i).partition() for i in range(9)}
            assert seen == {0, 1, 2}
            # a partition name is never itself partitioned
            assert c.get_topic_partitions("auto-p-partition-1") == [
                "persistent://public/default/auto-p-partition-1"
            ]
        finally:
            c.close()
    finally:
        proc.stop()
