"""Produce and consume a batch of messages through the official client and check they come
back in order: the check every smoke test (an image, a pod, a cluster) ends with; and
:func:`send_all`, the pipelined publish many tests start with."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pulsar


def send_all(
    producer: pulsar.Producer,
    payloads: Sequence[bytes],
    *,
    keys: Sequence[str] | None = None,
    timeout: float = 60.0,
) -> None:
    """send_async every payload (with ``keys[i]`` as its partition key when given) and wait
    for every receipt, failing on any error."""
    left = len(payloads)
    failed: list[pulsar.Result] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        nonlocal left
        with lock:
            if res != pulsar.Result.Ok:
                failed.append(res)
            left -= 1
            if left == 0:
                done.set()

    for i, payload in enumerate(payloads):
        if keys is None:
            producer.send_async(payload, callback)
        else:
            producer.send_async(payload, callback, partition_key=keys[i])
    assert not payloads or done.wait(timeout), f"{left} receipts missing"
    assert not failed, failed[:5]


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
