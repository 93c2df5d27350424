"""Delayed delivery (deliver_after / deliver_at) on Shared subscriptions."""

from __future__ import annotations

import datetime
import time

import pulsar

from tests.integration.broker.subscriptions.helpers import texts


def test_delayed_message_is_held_until_due(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    t0 = time.monotonic()
    producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=1200))
    producer.send(b"now")
    first = consumer.receive(5000)
    assert texts([first]) == ["now"]  # the later message does not block the one behind it
    consumer.acknowledge(first)
    second = consumer.receive(5000)
    assert texts([second]) == ["later"]
    assert time.monotonic() - t0 >= 1.1
