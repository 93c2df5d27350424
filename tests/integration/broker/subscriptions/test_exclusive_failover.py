"""Exclusive and Failover subscriptions, initial positions, type conflicts."""

from __future__ import annotations

import pulsar
import pytest

from tests.integration.broker.subscriptions.helpers import drain, publish, receive, texts

ExclusiveT = pulsar.ConsumerType.Exclusive
FailoverT = pulsar.ConsumerType.Failover
SharedT = pulsar.ConsumerType.Shared
EARLIEST = pulsar.InitialPosition.Earliest


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batched"])
def test_exclusive_delivers_in_order(client: pulsar.Client, topic: str, batch: bool) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=ExclusiveT, initial_position=EARLIEST)
    sent = [f"m{i}" for i in range(60)]
    publish(client, topic, sent, batch=batch)
    got = receive(consumer, len(sent))
    assert texts(got) == sent
    for m in got:
        consumer.acknowledge(m)
    assert drain(consumer) == []


def test_second_exclusive_consumer_is_busy(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s", consumer_type=ExclusiveT)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=ExclusiveT)
    # another subscription of the same topic is independent
    client.subscribe(topic, "other", consumer_type=ExclusiveT)


def test_type_is_fixed_while_consumers_are_attached(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "s", consumer_type=SharedT)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=FailoverT)
    first.close()
    # without consumers the next one sets the type again (as Pulsar does)
    client.subscribe(topic, "s", consumer_type=FailoverT)


def test_initial_position_earliest_and_latest(client: pulsar.Client, topic: str) -> None:
    publish(client, topic, ["old-0", "old-1"])
    earliest = client.subscribe(topic, "e", initial_position=EARLIEST)
    latest = client.subscribe(topic, "l", initial_position=pulsar.InitialPosition.Latest)
    publish(client, topic, ["new-0"])
    assert texts(drain(earliest)) == ["old-0", "old-1", "new-0"]
    assert texts(drain(latest)) == ["new-0"]


def test_failover_active_consumer_by_name_and_switch_on_close(
    client: pulsar.Client, topic: str
) -> None:
    # join order b, a, c: the lexically first name is active, not the first to join
    b = client.subscribe(
        topic, "fo", consumer_type=FailoverT, consumer_name="b", initial_position=EARLIEST
    )
    a = client.subscribe(topic, "fo", consumer_type=FailoverT, consumer_name="a")
    c = client.subscribe(topic, "fo", consumer_type=FailoverT, consumer_name="c")
    sent = [f"m{i}" for i in range(20)]
    publish(client, topic, sent)
    got_a = receive(a, 20)
    assert texts(got_a) == sent
    assert drain(b, idle_ms=300) == []
    assert drain(c, idle_ms=300) == []
    for m in got_a[:10]:  # a acknowledges only the first half, then goes away
        a.acknowledge(m)
    a.close()
    publish(client, topic, ["after"])
    # b (next by name) takes over from the first unacknowledged message, in order
    got_b = texts(drain(b))
    assert got_b == [*sent[10:], "after"]
    assert drain(c, idle_ms=300) == []


def test_failover_on_a_partition_picks_by_partition_index(
    client: pulsar.Client, topic: str
) -> None:
    # a partition of a partitioned topic: active = consumers[partition % n] (Pulsar's rule)
    partition = f"{topic}-partition-1"
    a = client.subscribe(
        partition, "fo", consumer_type=FailoverT, consumer_name="a", initial_position=EARLIEST
    )
    b = client.subscribe(partition, "fo", consumer_type=FailoverT, consumer_name="b")
    publish(client, partition, ["x", "y"])
    assert texts(drain(b)) == ["x", "y"]
    assert drain(a, idle_ms=300) == []
