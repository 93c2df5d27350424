"""Small helpers for driving the official client in subscription tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pulsar

from tests.support.wait import wait_until

NO_MORE_MS = 400
"""How long a receive waits before a test concludes nothing more is coming."""


def publish(
    client: pulsar.Client,
    topic: str,
    payloads: Iterable[str],
    *,
    batch: bool = False,
    keys: Callable[[int], str] | None = None,
    **producer_args: object,
) -> list[pulsar.MessageId]:
    """Send payloads in order (batched: one async burst, then flush); their ids."""
    producer = client.create_producer(
        topic, batching_enabled=batch, batching_max_publish_delay_ms=50, **producer_args
    )
    ids: list[pulsar.MessageId | None] = []
    try:
        if batch:
            out: dict[int, pulsar.MessageId] = {}
            for i, p in enumerate(payloads):
                kw = {"partition_key": keys(i)} if keys else {}

                def done(res: pulsar.Result, mid: pulsar.MessageId, i: int = i) -> None:
                    out[i] = mid

                producer.send_async(p.encode(), done, **kw)
                ids.append(None)
            producer.flush()
            wait_until(lambda: len(out) >= len(ids), what="every send receipted")
            return [out[i] for i in range(len(ids))]
        result = []
        for i, p in enumerate(payloads):
            kw = {"partition_key": keys(i)} if keys else {}
            result.append(producer.send(p.encode(), **kw))
        return result
    finally:
        producer.close()


def receive(consumer: pulsar.Consumer, n: int, *, timeout_ms: int = 5000) -> list[pulsar.Message]:
    """Exactly ``n`` messages (fails the test on timeout)."""
    return [consumer.receive(timeout_ms) for _ in range(n)]


def drain(
    consumer: pulsar.Consumer | pulsar.Reader,
    *,
    idle_ms: int = NO_MORE_MS,
    ack: bool = False,
    first_ms: int | None = None,
) -> list:
    """Everything that arrives until nothing comes for ``idle_ms`` (acknowledging each one
    as it comes when ``ack``). ``first_ms``: wait that long for the first message (e.g.
    while the consumer reconnects after a seek), when messages are expected."""
    out = []
    while True:
        wait = first_ms if (first_ms is not None and not out) else idle_ms
        try:
            if isinstance(consumer, pulsar.Reader):
                out.append(consumer.read_next(wait))
            else:
                m = consumer.receive(wait)
                if ack:
                    consumer.acknowledge(m)
                out.append(m)
        except pulsar.Timeout:
            return out


def texts(messages: Iterable[pulsar.Message]) -> list[str]:
    return [m.data().decode() for m in messages]
