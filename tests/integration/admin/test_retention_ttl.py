"""Retention and message TTL set through the admin API act on data: acknowledged messages are
kept by a retention policy and trimmed without one; unacknowledged messages expire after the
TTL."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from tests.integration.admin.conftest import Admin, running_standalone
from tests.support.standalone import StandaloneProc
from tests.support.wait import holds_for, wait_until


@pytest.fixture(scope="module")
def small_ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    yield from running_standalone(tmp_path_factory, "retention", ["--max-entries-per-ledger", "5"])


def produce_and_ack(client: pulsar.Client, topic: str, n: int) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"m{i}".encode())
    for _ in range(n):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    producer.close()
    consumer.close()


def read_all(client: pulsar.Client, topic: str) -> list[str]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data().decode())
    reader.close()
    return out


def stored_entries(admin: Admin, path: str) -> int:
    internal = admin.get(f"{path}/internalStats")[1]
    return sum(ledger["entries"] for ledger in internal["ledgers"])


def test_retention_keeps_acknowledged_messages(small_ledgers: StandaloneProc) -> None:
    admin = Admin(small_ledgers.http_url)
    client = pulsar.Client(small_ledgers.service_url, operation_timeout_seconds=15)
    try:
        assert admin.put("/namespaces/public/kept")[0] == 204
        retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
        assert admin.post("/namespaces/public/kept/retention", retention)[0] == 204
        assert admin.put("/namespaces/public/dropped")[0] == 204

        produce_and_ack(client, "persistent://public/kept/t", 20)
        produce_and_ack(client, "persistent://public/dropped/t", 20)

        # without retention the fully acknowledged ledgers go (the current one stays) ...
        wait_until(
            lambda: stored_entries(admin, "/persistent/public/dropped/t") < 20,
            what="acknowledged ledgers trimmed without retention",
        )
        assert len(read_all(client, "persistent://public/dropped/t")) < 20
        # ... with it they stay, and a reader from earliest reads every message
        holds_for(
            lambda: stored_entries(admin, "/persistent/public/kept/t") == 20,
            2,
            interval=0.2,
            what="retained ledgers kept",
        )
        assert read_all(client, "persistent://public/kept/t") == [f"m{i}" for i in range(20)]
    finally:
        client.close()


def test_unacknowledged_messages_expire_after_the_ttl(small_ledgers: StandaloneProc) -> None:
    admin = Admin(small_ledgers.http_url)
    client = pulsar.Client(small_ledgers.service_url, operation_timeout_seconds=15)
    try:
        assert admin.put("/namespaces/public/ttl")[0] == 204
        assert admin.post("/namespaces/public/ttl/messageTTL", 2)[0] == 204
        topic = "persistent://public/ttl/t"
        consumer = client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(8):
            producer.send(f"m{i}".encode())

        def backlog() -> int:
            stats = admin.get("/persistent/public/ttl/t/stats")[1]
            return int(stats["subscriptions"]["slow"]["msgBacklog"])

        assert backlog() > 0
        wait_until(lambda: backlog() == 0, timeout=20, what="messages expired by the TTL")
        # counted as Pulsar counts them: the admin stats and /metrics (docs/metrics.md)
        sub = admin.get("/persistent/public/ttl/t/stats")[1]["subscriptions"]["slow"]
        assert sub["totalMsgExpired"] == 8 and sub["lastExpireTimestamp"] > 0
        labels = f'cluster="standalone",namespace="public/ttl",subscription="slow",topic="{topic}"'
        assert f"pulsar_subscription_total_msg_expired{{{labels}}} 8.0" in small_ledgers.metrics()
        fresh = producer.send(b"fresh")  # newer than the TTL: not expired
        assert fresh is not None
        holds_for(lambda: backlog() == 1, 0.5, what="the fresh message not expired")
        consumer.close()
        producer.close()
    finally:
        client.close()


def test_retention_set_on_an_open_topic_applies_at_once(small_ledgers: StandaloneProc) -> None:
    """The topic's managed ledger opened without retention; the policy set afterwards
    reaches it (no unload needed) and acknowledged ledgers stay."""
    admin = Admin(small_ledgers.http_url)
    client = pulsar.Client(small_ledgers.service_url, operation_timeout_seconds=15)
    try:
        assert admin.put("/namespaces/public/later")[0] == 204
        topic = "persistent://public/later/t"
        assert admin.put("/persistent/public/later/t")[0] == 204  # loaded, no retention
        retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        assert admin.post("/namespaces/public/later/retention", retention)[0] == 204
        wait_until(
            lambda: "later/t: retention now -1" in small_ledgers.log(),
            what="the retention policy applied to the open topic",
        )
        produce_and_ack(client, topic, 20)
        holds_for(
            lambda: stored_entries(admin, "/persistent/public/later/t") == 20,
            2,
            interval=0.2,
            what="retained ledgers kept",
        )
        assert read_all(client, topic) == [f"m{i}" for i in range(20)]
        # and removing it lets the acknowledged ledgers go
        assert admin.delete("/namespaces/public/later/retention")[0] == 204
        wait_until(
            lambda: stored_entries(admin, "/persistent/public/later/t") < 20,
            what="trimmed once retention was removed",
        )
    finally:
        client.close()


def test_topic_ttl_overrides_the_namespace(small_ledgers: StandaloneProc) -> None:
    admin = Admin(small_ledgers.http_url)
    client = pulsar.Client(small_ledgers.service_url, operation_timeout_seconds=15)
    try:
        assert admin.put("/namespaces/public/ttl-topic")[0] == 204
        assert admin.post("/namespaces/public/ttl-topic/messageTTL", 3600)[0] == 204
        path = "/persistent/public/ttl-topic"
        assert admin.put(f"{path}/short")[0] == 204
        assert admin.put(f"{path}/long")[0] == 204
        assert admin.post(f"{path}/short/messageTTL", 1)[0] == 204
        for name in ("short", "long"):
            topic = f"persistent://public/ttl-topic/{name}"
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(3):
                producer.send(f"m{i}".encode())
            producer.close()

        def backlog(name: str) -> int:
            return int(admin.get(f"{path}/{name}/stats")[1]["subscriptions"]["s"]["msgBacklog"])

        wait_until(lambda: backlog("short") == 0, timeout=15, what="expired by the topic TTL")
        assert backlog("long") == 3  # the namespace's hour applies there
    finally:
        client.close()
