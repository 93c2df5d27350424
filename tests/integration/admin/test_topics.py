"""Topics and subscriptions through the admin API; the numbers in stats and internalStats
follow what the official client produced and consumed."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.integration.admin.conftest import Admin

NS = "/persistent/public/default"


def eventually(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_stats_follow_production_and_consumption(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/stats-t"
    assert admin.put(f"{NS}/stats-t")[0] == 204
    assert admin.put(f"{NS}/stats-t")[0] == 409
    consumer = client.subscribe(topic, "sub-a", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    for _ in range(4):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    def backlog_is_6() -> bool:
        subs = admin.get(f"{NS}/stats-t/stats")[1]["subscriptions"]
        return subs["sub-a"]["msgBacklog"] == 6

    eventually(backlog_is_6)
    status, stats = admin.get(f"{NS}/stats-t/stats")
    assert status == 200
    assert stats["msgInCounter"] == 10
    assert stats["storageSize"] > 0
    assert len(stats["publishers"]) == 1
    sub = stats["subscriptions"]["sub-a"]
    assert sub["type"] == "Shared" and len(sub["consumers"]) == 1
    for field in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut"):
        assert field in stats

    status, internal = admin.get(f"{NS}/stats-t/internalStats")
    assert status == 200
    assert internal["entriesAddedCounter"] == 10
    assert sum(ledger["entries"] for ledger in internal["ledgers"]) >= 10 or (
        internal["currentLedgerEntries"] == 10
    )
    for ledger in internal["ledgers"]:
        assert {"ledgerId", "entries", "size", "offloaded"} <= set(ledger)
    cursor = internal["cursors"]["sub-a"]
    assert {"markDeletePosition", "readPosition", "individuallyDeletedMessages"} <= set(cursor)

    assert admin.get(f"{NS}/stats-t/subscriptions") == (200, ["sub-a"])
    status, body = admin.delete(f"{NS}/stats-t")
    assert status == 412 and "force" in body["reason"]
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/stats-t?force=true")[0] == 204
    assert admin.get(f"{NS}/stats-t/stats")[0] == 404


def test_subscription_admin(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/subs-t"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
    earliest = {"ledgerId": -1, "entryId": -1}
    assert admin.put(f"{NS}/subs-t/subscription/from-start", earliest)[0] == 204
    assert admin.put(f"{NS}/subs-t/subscription/from-end")[0] == 204
    assert admin.put(f"{NS}/subs-t/subscription/from-end")[0] == 409
    subs = admin.get(f"{NS}/subs-t/stats")[1]["subscriptions"]
    assert subs["from-start"]["msgBacklog"] == 5
    assert subs["from-end"]["msgBacklog"] == 0
    assert admin.post(f"{NS}/subs-t/subscription/from-start/skip/2")[0] == 204
    subs = admin.get(f"{NS}/subs-t/stats")[1]["subscriptions"]
    assert subs["from-start"]["msgBacklog"] == 3
    assert admin.post(f"{NS}/subs-t/subscription/from-start/skip_all")[0] == 204
    subs = admin.get(f"{NS}/subs-t/stats")[1]["subscriptions"]
    assert subs["from-start"]["msgBacklog"] == 0
    assert admin.delete(f"{NS}/subs-t/subscription/from-end")[0] == 204
    assert admin.delete(f"{NS}/subs-t/subscription/from-end")[0] == 404
    assert admin.post(f"{NS}/subs-t/subscription/nope/skip_all")[0] == 404
    status, body = admin.call("PUT", f"{NS}/subs-t/subscription/bad", raw=b'{"ledgerId": "x"}')
    assert status == 400 and "message id" in body["reason"]
    producer.close()


def test_terminate_and_unload(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/term-t"
    producer = client.create_producer(topic, batching_enabled=False)
    last = producer.send(b"last")
    assert admin.put(f"{NS}/term-t/unload")[0] == 204
    producer.send(b"after unload")  # the client reconnects through lookup
    status, end = admin.post(f"{NS}/term-t/terminate")
    assert status == 200 and end["ledgerId"] >= last.ledger_id()
    with pytest.raises(Exception):  # noqa: B017 - the client's TopicTerminated
        producer.send(b"after terminate")


def test_partitioned_topic_used_by_the_official_client(admin: Admin, client: pulsar.Client) -> None:
    assert admin.put(f"{NS}/parts/partitions", 3)[0] == 204
    assert admin.put(f"{NS}/parts/partitions", 3)[0] == 409
    assert admin.get(f"{NS}/parts/partitions") == (200, {"partitions": 3})
    assert "persistent://public/default/parts" in admin.get(f"{NS}/partitioned")[1]
    topic = "persistent://public/default/parts"
    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    sent = {f"m{i}".encode() for i in range(30)}
    partitions = {producer.send(m).partition() for m in sorted(sent)}
    assert partitions == {0, 1, 2}
    got = set()
    for _ in sent:
        msg = consumer.receive(timeout_millis=10_000)
        got.add(msg.data())
        consumer.acknowledge(msg)
    assert got == sent

    status, pstats = admin.get(f"{NS}/parts/partitioned-stats")
    assert status == 200 and pstats["msgInCounter"] == 30
    assert pstats["metadata"] == {"partitions": 3}
    assert admin.post(f"{NS}/parts/partitions", 2)[0] == 400  # shrinking
    assert admin.post(f"{NS}/parts/partitions", 4)[0] == 204
    assert admin.get(f"{NS}/parts/partitions") == (200, {"partitions": 4})
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/parts/partitions?force=true")[0] == 204
    assert admin.get(f"{NS}/parts/partitions") == (200, {"partitions": 0})


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", f"{NS}/missing-topic/stats", None, 404),
        ("GET", f"{NS}/missing-topic/internalStats", None, 404),
        ("DELETE", f"{NS}/missing-topic", None, 404),
        ("PUT", f"{NS}/bad-parts/partitions", b"0", 400),
        ("PUT", f"{NS}/bad-parts/partitions", b'"three"', 400),
        ("PUT", f"{NS}/bad-parts/partitions", b"{", 400),
        ("POST", f"{NS}/never-created/partitions", b"5", 404),
        ("GET", "/persistent/public/missing-ns", None, 404),
        ("PUT", "/non-persistent/public/default/np", None, 405),
        ("GET", "/bogus/public/default", None, 404),
        ("PUT", f"{NS}/x-partition-0/partitions", b"2", 412),
    ],
)
def test_topic_bad_input(admin: Admin, client: pulsar.Client, method, path, body, status) -> None:
    got, answer = admin.call(method, path, raw=body)
    assert got == status, answer
    assert isinstance(answer, dict) and answer["reason"]
    # the broker keeps serving: a producer works right after
    producer = client.create_producer("persistent://public/default/still-alive")
    producer.send(b"ok")
    producer.close()


def test_topic_level_policies(admin: Admin) -> None:
    assert admin.put(f"{NS}/pol-t")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, None)
    assert admin.call("POST", f"{NS}/pol-t/messageTTL?messageTTL=30")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, 30)
    retention = {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert admin.post(f"{NS}/pol-t/retention", retention)[0] == 204
    assert admin.get(f"{NS}/pol-t/retention") == (200, retention)
    assert admin.post(f"{NS}/pol-t/deduplicationEnabled", True)[0] == 204
    assert admin.get(f"{NS}/pol-t/deduplicationEnabled") == (200, True)
    assert admin.delete(f"{NS}/pol-t/messageTTL")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, None)
    assert admin.call("POST", f"{NS}/pol-t/messageTTL?messageTTL=soon")[0] == 400
    assert admin.post(f"{NS}/pol-t/retention", {"retentionSizeInMB": -7})[0] == 400
    assert admin.get(f"{NS}/no-such-topic/messageTTL")[0] == 404


def test_reset_cursor_by_time_and_message_id(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/reset-t"
    consumer = client.subscribe(topic, "r", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"a{i}".encode()) for i in range(3)]
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    ids += [producer.send(f"b{i}".encode()) for i in range(2)]
    for _ in ids:
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    def backlog() -> int:
        return admin.get(f"{NS}/reset-t/stats")[1]["subscriptions"]["r"]["msgBacklog"]

    eventually(lambda: backlog() == 0)
    assert admin.post(f"{NS}/reset-t/subscription/r/resetcursor/{boundary}")[0] == 204
    eventually(lambda: backlog() == 2)
    mid = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()}
    assert admin.post(f"{NS}/reset-t/subscription/r/resetcursor", mid)[0] == 204
    eventually(lambda: backlog() == 4)
    got = []
    consumer2 = client.subscribe(topic, "r", consumer_type=pulsar.ConsumerType.Shared)
    for _ in range(4):
        msg = consumer2.receive(timeout_millis=15_000)
        got.append(msg.data().decode())
        consumer2.acknowledge(msg)
    assert sorted(got) == ["a1", "a2", "b0", "b1"]
    assert admin.post(f"{NS}/reset-t/subscription/nope/resetcursor/{boundary}")[0] == 404
    status, body = admin.call("POST", f"{NS}/reset-t/subscription/r/resetcursor", raw=b"{}")
    assert status == 400 and "message id" in body["reason"]
