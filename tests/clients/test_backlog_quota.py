"""Backlog quotas as pulsar-admin sets them (``namespaces set-backlog-quota``, ``topicPolicies
set-backlog-quota``) and as the official client meets them at producer creation: over a
``producer_exception`` quota the creation fails with ProducerBlockedQuotaExceededException,
over ``producer_request_hold`` with ProducerBlockedQuotaExceededError; acknowledging the
backlog, or removing the quota, lifts the refusal. Against every Magnetar
target and, with ``make test-clients-pulsar``, Apache Pulsar 4.0.7, which answers the same
(the periodic check, eviction and disconnection: tests/integration/admin/test_backlog_quota.py).
"""

from __future__ import annotations

import uuid

import pulsar

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target
from tests.support.wait import wait_until

PAYLOAD = b"q" * 1024


def _refusal(c: pulsar.Client, topic: str) -> type[BaseException] | None:
    try:
        producer = c.create_producer(topic, batching_enabled=False)
    except Exception as err:
        return type(err)
    producer.close()
    return None


def test_namespace_quota_refuses_producers(client_target: Target) -> None:
    t = client_target
    ns = f"public/quota-{uuid.uuid4().hex[:8]}"
    made = call(t, "PUT", f"/admin/v2/namespaces/{ns}")
    assert made[0] == 204, made
    quota = {"limitSize": 4096, "limitTime": -1, "policy": "producer_exception"}
    path = f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType=destination_storage"
    assert call(t, "POST", path, quota) == (204, None)
    status, quotas = call(t, "GET", f"/admin/v2/namespaces/{ns}/backlogQuotaMap")
    # read back with the deprecated ``limit`` (= limitSize), as Pulsar answers
    assert (status, quotas) == (200, {"destination_storage": {"limit": 4096, **quota}})

    topic = f"persistent://{ns}/t"
    c = client(t)
    try:
        consumer = c.subscribe(topic, "slow")
        producer = c.create_producer(topic, batching_enabled=False)
        for i in range(8):  # 8 KiB not acknowledged: over the 4 KiB quota
            producer.send(b"%d:" % i + PAYLOAD)
        producer.close()
        wait_until(
            lambda: _refusal(c, topic) is pulsar.ProducerBlockedQuotaExceededException,
            timeout=30,
            what="producer_exception refusing a producer",
        )
        # acknowledged, the backlog is gone and so is the refusal
        for _ in range(8):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        wait_until(lambda: _refusal(c, topic) is None, timeout=30, what="producers accepted")
        consumer.close()
    finally:
        c.close()
    assert call(t, "DELETE", f"/admin/v2/persistent/{ns}/t?force=true")[0] == 204


def test_topic_quota_refuses_producers(client_target: Target) -> None:
    """A topic's own quota (set while its namespace has none: Pulsar stores topic policies
    through a system topic of the namespace, which a namespace quota already exceeded would
    block)."""
    t = client_target
    local = f"own-quota-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    assert call(t, "PUT", base)[0] == 204
    held = {"limitSize": 2048, "limitTime": -1, "policy": "producer_request_hold"}
    path = f"{base}/backlogQuota?backlogQuotaType=destination_storage"
    assert call(t, "POST", path, held) == (204, None)
    wait_until(
        lambda: (
            call(t, "GET", f"{base}/backlogQuotaMap")
            == (200, {"destination_storage": {"limit": 2048, **held}})
        ),
        timeout=30,
        what="the topic's quota read back",
    )
    status, answer = call(t, "POST", path, {**held, "policy": "drop"})
    assert status == 400, answer
    c = client(t)
    try:
        consumer = c.subscribe(topic, "slow")
        producer = c.create_producer(topic, batching_enabled=False)
        for i in range(4):  # 4 KiB not acknowledged: over the topic's 2 KiB
            producer.send(b"%d:" % i + PAYLOAD)
        producer.close()
        wait_until(
            lambda: _refusal(c, topic) is pulsar.ProducerBlockedQuotaExceededError,
            timeout=30,
            what="producer_request_hold refusing a producer",
        )
        assert call(t, "DELETE", path) == (204, None)
        wait_until(lambda: call(t, "GET", f"{base}/backlogQuotaMap") == (200, {}), timeout=30)
        wait_until(lambda: _refusal(c, topic) is None, timeout=30, what="the quota lifted")
        consumer.close()
    finally:
        c.close()
    assert call(t, "DELETE", f"{base}?force=true")[0] == 204
