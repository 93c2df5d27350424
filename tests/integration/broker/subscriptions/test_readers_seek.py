"""Readers (non-durable subscriptions), seek by id and time, GET_LAST_MESSAGE_ID."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.integration.broker.subscriptions.helpers import drain, publish, texts
from tests.support.wait import wait_until

EARLIEST = pulsar.InitialPosition.Earliest


def test_reader_from_earliest_and_latest(client: pulsar.Client, topic: str) -> None:
    publish(client, topic, ["a", "b"])
    from_earliest = client.create_reader(topic, pulsar.MessageId.earliest)
    from_latest = client.create_reader(topic, pulsar.MessageId.latest)
    publish(client, topic, ["c"])
    assert texts(drain(from_earliest)) == ["a", "b", "c"]
    assert texts(drain(from_latest)) == ["c"]


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_reader_from_message_id(
    client: pulsar.Client, topic: str, inclusive: bool, batch: bool
) -> None:
    sent = [f"m{i}" for i in range(10)]
    ids = publish(client, topic, sent, batch=batch)
    reader = client.create_reader(topic, ids[4], start_message_id_inclusive=inclusive)
    expected = sent[4:] if inclusive else sent[5:]
    assert texts(drain(reader)) == expected


def test_readers_leave_no_subscription_behind(client: pulsar.Client, topic: str) -> None:
    publish(client, topic, ["a"])
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert texts(drain(reader)) == ["a"]
    reader.close()
    # a durable subscription created afterwards at Latest starts empty: the reader's cursor
    # held nothing back and is gone
    consumer = client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Latest)
    assert drain(consumer, idle_ms=200) == []


def test_has_message_available(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()  # the topic exists, empty
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    publish(client, topic, ["a", "b"])
    assert reader.has_message_available()
    reader.read_next(5000)
    assert reader.has_message_available()
    reader.read_next(5000)
    assert not reader.has_message_available()


def test_has_message_available_with_batches(client: pulsar.Client, topic: str) -> None:
    publish(client, topic, [f"m{i}" for i in range(5)], batch=True, batching_max_messages=100)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = 0
    while reader.has_message_available():
        reader.read_next(5000)
        seen += 1
    assert seen == 5


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_seek_consumer_by_message_id(client: pulsar.Client, topic: str, inclusive: bool) -> None:
    sent = [f"m{i}" for i in range(10)]
    consumer = client.subscribe(
        topic, "s", initial_position=EARLIEST, start_message_id_inclusive=inclusive
    )
    ids = publish(client, topic, sent)
    for m in drain(consumer):
        consumer.acknowledge(m)
    consumer.seek(ids[3])
    # the broker resets the subscription *to* the id (as Pulsar: backlog from it on); the
    # client drops the id itself unless the consumer is start-inclusive
    wait_until(consumer.is_connected, what="consumer reconnected after seek")
    assert texts(drain(consumer, idle_ms=1500, first_ms=15_000)) == (
        sent[3:] if inclusive else sent[4:]
    )
    consumer.seek(pulsar.MessageId.earliest)
    assert texts(drain(consumer, idle_ms=1500, first_ms=15_000)) == sent


def test_seek_consumer_by_publish_time(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, ["old-0", "old-1", "old-2"])
    # publish times strictly before / after the boundary: clock steps, not waits for a state
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    publish(client, topic, ["new-0", "new-1"])
    for m in drain(consumer):
        consumer.acknowledge(m)
    consumer.seek(boundary)
    assert texts(drain(consumer, idle_ms=1500, first_ms=15_000)) == ["new-0", "new-1"]
    consumer.seek(0)  # before everything: all of it again
    assert texts(drain(consumer, idle_ms=1500, first_ms=15_000)) == [
        "old-0",
        "old-1",
        "old-2",
        "new-0",
        "new-1",
    ]
    consumer.seek(boundary + 3_600_000)  # after everything: nothing
    assert drain(consumer, idle_ms=800) == []


def test_seek_reader_by_time_and_id(client: pulsar.Client, topic: str) -> None:
    sent = [f"m{i}" for i in range(6)]
    ids = publish(client, topic, sent[:3])
    # publish times strictly before / after the boundary: clock steps, not waits for a state
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    ids += publish(client, topic, sent[3:])
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert texts(drain(reader)) == sent
    reader.seek(boundary)
    assert texts(drain(reader, idle_ms=1500, first_ms=15_000)) == sent[3:]
    reader.seek(ids[1])
    assert (
        texts(drain(reader, idle_ms=1500, first_ms=15_000)) == sent[2:]
    )  # not inclusive: after the id
