"""Topics through the admin API: create/delete (with force), list, partitions, stats and
internalStats whose numbers follow what the official client produced and consumed,
partitioned topics used by the official client, unload, terminate, topic-level policies."""

from __future__ import annotations

import pulsar
import pytest

from tests.integration.admin.conftest import Admin
from tests.support.wait import wait_until

NS = "/persistent/public/default"

STATS_FIELDS = {
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
    "bytesInCounter", "storageSize", "backlogSize", "publishers", "subscriptions",
    "replication", "deduplicationStatus",
}  # fmt: skip
INTERNAL_FIELDS = {
    "entriesAddedCounter", "numberOfEntries", "totalSize", "currentLedgerEntries",
    "currentLedgerSize", "lastLedgerCreatedTimestamp", "waitingCursorsCount",
    "pendingAddEntriesCount", "lastConfirmedEntry", "state", "ledgers", "cursors",
}  # fmt: skip
CURSOR_FIELDS = {
    "markDeletePosition", "readPosition", "individuallyDeletedMessages",
    "messagesConsumedCounter", "cursorLedger", "state",
}  # fmt: skip


def test_stats_follow_production_and_consumption(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/stats-t"
    assert admin.put(f"{NS}/stats-t") == (204, None)
    status, body = admin.put(f"{NS}/stats-t")
    assert status == 409 and "already exists" in body["reason"]
    assert topic in admin.get(NS)[1]
    assert topic in admin.get("/namespaces/public/default/topics")[1]
    consumer = client.subscribe(topic, "sub-a", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i:02}".encode()) for i in range(10)]
    for _ in range(4):  # the first four, in order: the mark-delete position moves to the 4th
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    def settled() -> bool:
        internal = admin.get(f"{NS}/stats-t/internalStats")[1]
        return bool(internal["cursors"]["sub-a"]["markDeletePosition"] == f"{ids[3].ledger_id()}:"
                    f"{ids[3].entry_id()}")  # fmt: skip

    wait_until(settled, what="mark-delete position at the 4th message")
    status, stats = admin.get(f"{NS}/stats-t/stats")
    assert status == 200 and STATS_FIELDS <= set(stats)
    assert stats["msgInCounter"] == 10
    assert stats["storageSize"] > 0
    assert [p["producerName"] for p in stats["publishers"]] == [producer.producer_name()]
    sub = stats["subscriptions"]["sub-a"]
    assert sub["msgBacklog"] == 6 and sub["type"] == "Shared" and len(sub["consumers"]) == 1
    assert "unackedMessages" in sub
    assert stats["replication"] == {} and stats["deduplicationStatus"] == "Disabled"

    status, internal = admin.get(f"{NS}/stats-t/internalStats")
    assert status == 200 and INTERNAL_FIELDS <= set(internal)
    assert internal["entriesAddedCounter"] == 10 and internal["numberOfEntries"] == 10
    assert sum(ledger["entries"] for ledger in internal["ledgers"]) == 10
    for ledger in internal["ledgers"]:
        assert {"ledgerId", "entries", "size", "offloaded", "underReplicated"} <= set(ledger)
    last = ids[-1]
    assert internal["lastConfirmedEntry"] == f"{last.ledger_id()}:{last.entry_id()}"
    assert internal["totalSize"] == stats["bytesInCounter"] == stats["storageSize"]
    cursor = internal["cursors"]["sub-a"]
    assert CURSOR_FIELDS <= set(cursor)
    assert cursor["individuallyDeletedMessages"] == "[]"
    assert cursor["messagesConsumedCounter"] == 4

    assert admin.get(f"{NS}/stats-t/subscriptions") == (200, ["sub-a"])
    status, body = admin.delete(f"{NS}/stats-t")
    assert status == 412 and "force" in body["reason"]
    assert admin.get(f"{NS}/stats-t/stats")[0] == 200  # still there
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/stats-t?force=true") == (204, None)
    assert admin.get(f"{NS}/stats-t/stats")[0] == 404
    assert topic not in admin.get(NS)[1]


def test_individual_acks_show_in_internal_stats(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/holes"
    consumer = client.subscribe(topic, "h", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    received = {m.message_id().entry_id(): m for m in
                (consumer.receive(timeout_millis=10_000) for _ in range(5))}  # fmt: skip
    consumer.acknowledge(received[ids[2].entry_id()])  # a hole: 0 and 1 are not acked

    def hole() -> str:
        cursor = admin.get("/persistent/public/default/holes/internalStats")[1]["cursors"]["h"]
        return str(cursor["individuallyDeletedMessages"])

    ledger = ids[2].ledger_id()
    wait_until(lambda: hole() == f"[({ledger}:1..{ledger}:2]]", what="individually deleted")
    assert (
        admin.get("/persistent/public/default/holes/stats")[1]["subscriptions"]["h"]["msgBacklog"]
        == 4
    )
    producer.close()
    consumer.close()


def test_partitioned_topic_used_by_the_official_client(admin: Admin, client: pulsar.Client) -> None:
    assert admin.put(f"{NS}/parts/partitions", 3) == (204, None)
    assert admin.put(f"{NS}/parts/partitions", 3)[0] == 409
    assert admin.put(f"{NS}/parts", None)[0] == 409  # a non-partitioned one of that name
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
    listed = admin.get(NS)[1]
    assert {f"{topic}-partition-{i}" for i in range(3)} <= set(listed)

    def backlog_zero() -> bool:
        pstats = admin.get(f"{NS}/parts/partitioned-stats")[1]
        return bool(pstats["subscriptions"]["all"]["msgBacklog"] == 0)

    wait_until(backlog_zero, what="all acknowledged")
    status, pstats = admin.get(f"{NS}/parts/partitioned-stats")
    assert status == 200 and pstats["msgInCounter"] == 30
    assert pstats["metadata"] == {"partitions": 3}
    assert len(pstats["partitions"]) == 3
    assert sum(p["msgInCounter"] for p in pstats["partitions"].values()) == 30
    assert "partitions" not in admin.get(f"{NS}/parts/partitioned-stats?perPartition=false")[1]
    part_stats = admin.get(f"{NS}/parts-partition-1/stats")[1]
    assert part_stats["msgInCounter"] == 10
    assert admin.post(f"{NS}/parts/partitions", 2)[0] == 400  # shrinking
    assert admin.post(f"{NS}/parts/partitions", 3)[0] == 400  # same size
    assert admin.post(f"{NS}/parts/partitions", 4) == (204, None)
    assert admin.get(f"{NS}/parts/partitions") == (200, {"partitions": 4})
    status, body = admin.delete(f"{NS}/parts/partitions")
    assert status == 412 and "force" in body["reason"]
    assert admin.put(f"{NS}/parts/unload")[0] == 204  # every partition unloaded
    producer.send(b"after unload")  # the client reconnects through lookup
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/parts/partitions?force=true") == (204, None)
    assert admin.get(f"{NS}/parts/partitions") == (200, {"partitions": 0})
    assert not any(t.startswith(topic) for t in admin.get(NS)[1])


def test_terminate_and_unload(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/term-t"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"first")
    assert admin.put(f"{NS}/term-t/unload") == (204, None)
    last = producer.send(b"after unload")  # the client reconnects through lookup
    status, end = admin.post(f"{NS}/term-t/terminate")
    assert status == 200
    # Pulsar's MessageIdImpl JSON: no partition or batch index
    assert end == {
        "ledgerId": last.ledger_id(),
        "entryId": last.entry_id(),
        "partitionIndex": -1,
        "batchSize": 0,
        "batchIndex": -1,
    }
    with pytest.raises(Exception):  # noqa: B017 - the client's TopicTerminated
        producer.send(b"after terminate")
    internal = admin.get(f"{NS}/term-t/internalStats")[1]
    assert internal["lastConfirmedEntry"] == f"{end['ledgerId']}:{end['entryId']}"


def test_unknown_domain(admin: Admin) -> None:
    status, answer = admin.get("/transient/public/default")
    assert status == 404 and "domain" in answer["reason"]


def test_topic_level_policies(admin: Admin) -> None:
    assert admin.put(f"{NS}/pol-t")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, None)
    assert admin.call("POST", f"{NS}/pol-t/messageTTL?messageTTL=30")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, 30)
    assert admin.post(f"{NS}/pol-t/messageTTL", 45)[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, 45)
    retention = {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert admin.post(f"{NS}/pol-t/retention", retention)[0] == 204
    assert admin.get(f"{NS}/pol-t/retention") == (200, retention)
    assert admin.post(f"{NS}/pol-t/deduplicationEnabled", True)[0] == 204
    assert admin.get(f"{NS}/pol-t/deduplicationEnabled") == (200, True)
    assert admin.delete(f"{NS}/pol-t/messageTTL")[0] == 204
    assert admin.get(f"{NS}/pol-t/messageTTL") == (200, None)
    assert admin.call("POST", f"{NS}/pol-t/messageTTL?messageTTL=soon")[0] == 400
    assert admin.post(f"{NS}/pol-t/retention", {"retentionSizeInMB": -7})[0] == 400
    assert admin.post(f"{NS}/pol-t/deduplicationEnabled", "on")[0] == 400
    assert admin.get(f"{NS}/no-such-topic/messageTTL")[0] == 404
    # deleting the topic deletes its policies: a new topic of that name starts clean
    assert admin.delete(f"{NS}/pol-t")[0] == 204
    assert admin.put(f"{NS}/pol-t")[0] == 204
    assert admin.get(f"{NS}/pol-t/retention") == (200, None)
