"""Produce and consume a batch of messages through the official client and check they come
back in order: the check every smoke test (an image, a pod, a cluster) ends with; and
:func:`send_all`, the pipelined publish many tests start with; :class:`KeepProducing`, a
producer kept running in the background while a test disturbs the cluster (a rotation, a
restart), recording what was receipted."""

from __future__ import annotations

import threading
import time
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


def round_trip(
    client: pulsar.Client,
    topic: str,
    count: int = 5,
    *,
    subscription: str = "smoke",
    batching: bool = True,
) -> None:
    """``count`` messages on ``topic`` through ``client``, received in order and
    acknowledged."""
    consumer = client.subscribe(
        topic, subscription, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic, batching_enabled=batching)
    sent = [f"message-{i}".encode() for i in range(count)]
    for payload in sent:
        producer.send(payload)
    got = []
    for _ in sent:
        msg = consumer.receive(timeout_millis=30_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == sent


def produce_and_consume(service_url: str, count: int = 100, *, prefix: str = "smoke") -> None:
    """``count`` messages on a fresh topic, received in order and acknowledged."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        round_trip(client, f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:6]}", count)
    finally:
        client.close()


class KeepProducing:
    """``producer`` sending numbered payloads (send_async, paced) on a thread of its own from
    ``start()`` to ``stop()``; ``receipts`` maps each receipted payload to its (ledger,
    entry), ``failures`` lists the sends that failed."""

    def __init__(self, producer: pulsar.Producer, *, prefix: bytes = b"r") -> None:
        self.producer = producer
        self.prefix = prefix
        self.receipts: dict[bytes, tuple[int, int]] = {}
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            payload = b"%s-%06d" % (self.prefix, i)
            i += 1

            def done(res: pulsar.Result, mid: pulsar.MessageId, p: bytes = payload) -> None:
                with self._lock:
                    if res == pulsar.Result.Ok:
                        self.receipts[p] = (mid.ledger_id(), mid.entry_id())
                    else:
                        self.failures.append(str(res))

            self.producer.send_async(payload, done)
            if i % 50 == 0:
                time.sleep(0.01)  # paces the producer

    def start(self) -> KeepProducing:
        self._thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.receipts)

    def stop(self) -> None:
        """Stop sending, and wait until everything sent is receipted or failed."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.producer.flush()
