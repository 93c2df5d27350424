"""Backlog quotas act on topics (magnetar.broker.backlog_quota), driven through the admin API
and observed with the official client: ``producer_exception`` and ``producer_request_hold``
refuse producers (with Pulsar's ServerErrors) and the periodic check disconnects the ones
attached; ``consumer_backlog_eviction`` moves the slowest subscription on, by size and by
age; a topic's own quota overrides its namespace's; nothing a producer had receipted before
is lost. The standalone checks every second (``backlogQuotaCheckIntervalInSeconds=1`` in its
standalone.conf) so the waits are short.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.integration.admin.conftest import Admin, running_standalone
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

PAYLOAD = b"x" * 1024


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    conf = tmp_path_factory.mktemp("quota-conf") / "standalone.conf"
    conf.write_text("backlogQuotaCheckIntervalInSeconds=1\n")
    yield from running_standalone(
        tmp_path_factory,
        "quota",
        ["--config", str(conf), "--max-entries-per-ledger", "10"],
    )


def _namespace(admin: Admin, quota: dict[str, object], kind: str = "destination_storage") -> str:
    ns = f"public/q{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/namespaces/{ns}")[0] == 204
    status, answer = admin.post(f"/namespaces/{ns}/backlogQuota?backlogQuotaType={kind}", quota)
    assert status == 204, answer
    return ns


def _stats(admin: Admin, topic: str) -> dict[str, object]:
    status, stats = admin.get(f"/persistent/{topic}/stats")
    assert status == 200, stats
    return stats


def _created(client: pulsar.Client, topic: str) -> BaseException | None:
    """The exception creating a producer raises (None: created, and closed again)."""
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
    except Exception as err:
        return err
    producer.close()
    return None


def test_producer_exception_refuses_and_disconnects(quick: StandaloneProc) -> None:
    admin = Admin(quick.http_url)
    ns = _namespace(admin, {"limitSize": 10_000, "policy": "producer_exception"})
    topic = f"{ns}/t"
    client = pulsar.Client(quick.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            f"persistent://{topic}", "slow", consumer_type=pulsar.ConsumerType.Shared
        )
        producer = client.create_producer(
            f"persistent://{topic}", batching_enabled=False, send_timeout_millis=5000
        )
        receipted: list[bytes] = []
        failure: BaseException | None = None
        deadline = time.monotonic() + 30
        i = 0
        while time.monotonic() < deadline:
            body = b"%d:" % i + PAYLOAD
            try:
                producer.send(body)
            except Exception as err:  # the check disconnected it; re-creation was refused
                failure = err
                break
            receipted.append(body)
            i += 1
            if len(receipted) > 20:  # over the limit: the next check disconnects it
                time.sleep(0.05)
        assert failure is not None, "sends went on past the quota"
        assert isinstance(failure, pulsar.ProducerBlockedQuotaExceededException), repr(failure)
        assert len(receipted) * len(PAYLOAD) >= 10_000
        # a new producer is refused with Pulsar's ServerError while the backlog is over
        refused = _created(client, f"persistent://{topic}")
        assert isinstance(refused, pulsar.ProducerBlockedQuotaExceededException), repr(refused)
        stats = _stats(admin, topic)
        assert stats["backlogQuotaLimitSize"] == 10_000
        assert stats["backlogSize"] >= 10_000
        # every receipted message is there; once acknowledged, producers are welcome again
        got = []
        for _ in receipted:
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert sorted(got) == sorted(receipted)
        wait_until(
            lambda: _created(client, f"persistent://{topic}") is None,
            timeout=30,
            what="a producer accepted once the backlog is acknowledged",
        )
    finally:
        client.close()


def test_producer_request_hold_refuses_with_the_retriable_error(quick: StandaloneProc) -> None:
    admin = Admin(quick.http_url)
    ns = _namespace(admin, {"limitSize": 4096, "policy": "producer_request_hold"})
    topic = f"persistent://{ns}/t"
    client = pulsar.Client(quick.service_url, operation_timeout_seconds=5)
    try:
        consumer = client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(8):
            producer.send(b"%d:" % i + PAYLOAD)
        producer.close()
        refused = _created(client, topic)
        # the official client fails the creation at once with the hold error
        assert isinstance(refused, pulsar.ProducerBlockedQuotaExceededError), repr(refused)
        consumer.close()
    finally:
        client.close()


def test_consumer_backlog_eviction_by_size(quick: StandaloneProc) -> None:
    admin = Admin(quick.http_url)
    ns = _namespace(admin, {"limitSize": 20_000, "policy": "consumer_backlog_eviction"})
    topic = f"{ns}/t"
    client = pulsar.Client(quick.service_url, operation_timeout_seconds=10)
    try:
        # the subscription exists, its consumer is gone (what it had prefetched would stay
        # in its receive queue, as with Pulsar)
        client.subscribe(f"persistent://{topic}", "slow").close()
        producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
        for i in range(60):  # ~60 KiB: three times the limit; the producer is never refused
            producer.send(b"%d:" % i + PAYLOAD)
        wait_until(
            lambda: int(_stats(admin, topic)["backlogSize"]) < 20_000,
            timeout=30,
            what="the slowest subscription moved on under the size limit",
        )
        backlog = _stats(admin, topic)["subscriptions"]["slow"]["msgBacklog"]
        assert 0 < backlog < 60
        producer.send(b"after")
        consumer = client.subscribe(f"persistent://{topic}", "slow")
        # the oldest messages were skipped: what is left is the newest, in order
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(backlog + 1)]
        assert got[-1] == b"after"
        assert got[-2].startswith(b"59:")
        assert got[0] != b"0:" + PAYLOAD
        with urllib.request.urlopen(f"{quick.http_url}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        full = f"persistent://{topic}"
        assert any(
            line.startswith("pulsar_storage_backlog_quota_exceeded_evictions_total{")
            and f'topic="{full}"' in line
            and 'quota_type="size"' in line
            and not line.endswith(" 0.0")
            for line in metrics.splitlines()
        ), "no size eviction counted"
        assert any(
            line.startswith("pulsar_storage_backlog_quota_limit{")
            and f'topic="{full}"' in line
            and line.endswith(" 20000.0")
            for line in metrics.splitlines()
        )
    finally:
        client.close()


def test_consumer_backlog_eviction_by_age(quick: StandaloneProc) -> None:
    admin = Admin(quick.http_url)
    ns = _namespace(
        admin, {"limitTime": 2, "policy": "consumer_backlog_eviction"}, kind="message_age"
    )
    topic = f"{ns}/t"
    client = pulsar.Client(quick.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(f"persistent://{topic}", "slow").close()
        producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
        for i in range(5):
            producer.send(b"old-%d" % i)
        assert _stats(admin, topic)["backlogQuotaLimitTime"] == 2
        wait_until(
            lambda: _stats(admin, topic)["subscriptions"]["slow"]["msgBacklog"] == 0,
            timeout=30,
            what="messages older than 2 s evicted",
        )
        producer.send(b"new")
        consumer = client.subscribe(f"persistent://{topic}", "slow")
        assert consumer.receive(timeout_millis=10_000).data() == b"new"
    finally:
        client.close()


def test_topic_quota_overrides_the_namespace(quick: StandaloneProc) -> None:
    admin = Admin(quick.http_url)
    ns = _namespace(admin, {"limitSize": 10_000_000, "policy": "producer_exception"})
    topic = f"{ns}/own"
    path = f"/persistent/{topic}"
    assert admin.put(path)[0] == 204
    client = pulsar.Client(quick.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(f"persistent://{topic}", "slow")
        producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
        producer.send(PAYLOAD)
        producer.close()
        assert admin.get(f"{path}/backlogQuotaMap") == (200, {})
        quota = {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"}
        status, answer = admin.post(
            f"{path}/backlogQuota?backlogQuotaType=destination_storage", quota
        )
        assert status == 204, answer
        own = {"limit": 100, **quota}
        assert admin.get(f"{path}/backlogQuotaMap") == (200, {"destination_storage": own})
        wait_until(
            lambda: isinstance(
                _created(client, f"persistent://{topic}"),
                pulsar.ProducerBlockedQuotaExceededException,
            ),
            timeout=30,
            what="the topic's own quota refusing producers",
        )
        applied = admin.get(f"{path}/backlogQuotaMap?applied=true")[1]
        assert applied["destination_storage"]["limitSize"] == 100
        # bad input: an unknown type, a bad policy
        status, answer = admin.post(f"{path}/backlogQuota?backlogQuotaType=nope", quota)
        assert status == 400 and "backlogQuotaType" in answer["reason"], answer
        status, answer = admin.post(f"{path}/backlogQuota", {**quota, "policy": "drop"})
        assert status == 400 and "policy" in answer["reason"], answer
        # removing the topic's quota: the namespace's (10 MB) applies again
        assert admin.delete(f"{path}/backlogQuota?backlogQuotaType=destination_storage")[0] == 204
        assert admin.get(f"{path}/backlogQuotaMap") == (200, {})
        wait_until(
            lambda: _created(client, f"persistent://{topic}") is None,
            timeout=30,
            what="producers accepted under the namespace's quota",
        )
        consumer.close()
    finally:
        client.close()
