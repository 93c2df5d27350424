"""What a consumer of batches is sent for its receiver queue, by default (Pulsar's
preciseDispatcherFlowControl off): one entry per permit, every entry read sent, the permits
below zero. Against every Magnetar target and, with ``make test-clients-pulsar``, Apache
Pulsar 4.0.7, so the default is Pulsar's own and not a reading of its docs
(docs/configuration.md, "Dispatch flow control").
"""

from __future__ import annotations

import time
import uuid

import pulsar

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target

BATCH = 50
BATCHES = 10
QUEUE = 100


def _permits(t: Target, base: str) -> int | None:
    status, stats = call(t, "GET", f"{base}/stats")
    assert status == 200, stats
    consumers = stats["subscriptions"]["sub"]["consumers"]
    return int(consumers[0]["availablePermits"]) if consumers else None


def test_a_consumer_of_batches_gets_the_backlog_its_queue_reads(client_target: Target) -> None:
    t = client_target
    local = f"flow-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    c = client(t)
    try:
        # the subscription first, so the backlog is the subscription's
        c.subscribe(full, "sub", consumer_type=pulsar.ConsumerType.Exclusive).close()
        producer = c.create_producer(
            full,
            batching_enabled=True,
            batching_max_messages=BATCH,
            batching_max_publish_delay_ms=10_000,
        )
        for i in range(BATCH * BATCHES):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        producer.close()
        # a receiver queue of 100 messages, and nothing received: the client grants 100
        # permits once; the broker reads one entry per permit (up to 100) and sends them all
        consumer = c.subscribe(
            full, "sub", consumer_type=pulsar.ConsumerType.Exclusive, receiver_queue_size=QUEUE
        )
        want = QUEUE - BATCH * BATCHES
        deadline = time.monotonic() + 30
        permits = _permits(t, base)
        while permits != want and time.monotonic() < deadline:
            time.sleep(0.2)
            permits = _permits(t, base)
        assert permits == want
        consumer.close()
    finally:
        c.close()
