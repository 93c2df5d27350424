"""Negative acks, REDELIVER, the broker's redelivery count and the dead-letter topic."""

from __future__ import annotations

import pulsar

from tests.integration.broker.subscriptions.helpers import drain, publish, texts

EARLIEST = pulsar.InitialPosition.Earliest


def test_negative_ack_redelivers_with_increasing_count(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    publish(client, topic, ["a", "b"])
    counts: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(6):
        m = consumer.receive(5000)
        counts[m.data().decode()].append(m.redelivery_count())
        if m.data() == b"b" or m.redelivery_count() >= 2:
            consumer.acknowledge(m)
        else:
            consumer.negative_acknowledge(m)
        if len(counts["a"]) == 3 and counts["b"]:
            break
    assert counts["a"] == [0, 1, 2]
    assert counts["b"] == [0]
    assert drain(consumer) == []


def test_dead_letter_topic_after_max_redeliveries(client: pulsar.Client, topic: str) -> None:
    max_redeliver = 2
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=max_redeliver),
    )
    dlq = client.subscribe(f"{topic}-s-DLQ", "dlq-reader", initial_position=EARLIEST)
    publish(client, topic, ["poison", "fine"])
    seen: list[tuple[str, int]] = []
    while len(seen) < 20:  # bounded: a broker that never counts must fail, not hang
        try:
            m = consumer.receive(1500)
        except pulsar.Timeout:
            break
        seen.append((m.data().decode(), m.redelivery_count()))
        if m.data() == b"fine":
            consumer.acknowledge(m)
        else:
            consumer.negative_acknowledge(m)
    assert ("fine", 0) in seen
    assert [c for t, c in seen if t == "poison"] == list(range(max_redeliver + 1))
    dead = drain(dlq, idle_ms=3000)
    assert texts(dead) == ["poison"]


def test_negative_ack_on_exclusive_rewinds_everything_unacked(
    client: pulsar.Client, topic: str
) -> None:
    # not shared: the client asks for "everything unacked" (empty REDELIVER); the broker
    # rewinds to the first unacknowledged message and counts the redelivery
    consumer = client.subscribe(topic, "s", negative_ack_redelivery_delay_ms=100)
    publish(client, topic, ["a", "b", "c"])
    first = [consumer.receive(5000) for _ in range(3)]
    consumer.acknowledge(first[0])
    consumer.negative_acknowledge(first[1])
    again = drain(consumer, idle_ms=1000)
    assert texts(again) == ["b", "c"]
    assert [m.redelivery_count() for m in again] == [1, 1]
