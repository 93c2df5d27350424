"""Produce and consume a batch of messages through the official client and check they come
back in order: the check every smoke test (an image, a pod, a cluster) ends with."""

from __future__ import annotations

import uuid

import pulsar


def produce_and_consume(service_url: str, count: int = 100, *, prefix: str = "smoke") -> None:
    """``count`` messages on a fresh topic, received in order and acknowledged."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        topic = f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:6]}"
        consumer = client.subscribe(
            topic, "smoke", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic)
        sent = [f"message-{i}".encode() for i in range(count)]
        for payload in sent:
            producer.send(payload)
        got = []
        for _ in sent:
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent
    finally:
        client.close()
