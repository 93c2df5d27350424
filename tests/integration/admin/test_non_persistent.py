"""Non-persistent topics through the admin API and ``magnetar admin``: create, list, stats
and internalStats shapes with the numbers the official client produced, partitions,
subscriptions, unload, delete, and the operations that need storage refused with 405."""

from __future__ import annotations

import json
import subprocess
import sys

import pulsar

from tests.integration.admin.conftest import Admin
from tests.support.standalone import StandaloneProc

NS = "/non-persistent/public/default"
NP_STATS_FIELDS = {
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
    "bytesInCounter", "msgOutCounter", "bytesOutCounter", "storageSize", "publishers",
    "subscriptions", "replication", "deduplicationStatus", "msgDropRate",
}  # fmt: skip
NP_SUB_FIELDS = {
    "msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter", "msgBacklog",
    "type", "consumers", "msgDropRate", "isDurable",
}  # fmt: skip


def receive_n(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    return [consumer.receive(timeout_millis=10_000) for _ in range(n)]


def test_create_list_delete(admin: Admin, client: pulsar.Client) -> None:
    assert admin.put(f"{NS}/np-crud") == (204, None)
    status, answer = admin.put(f"{NS}/np-crud")
    assert status == 409 and "already exists" in answer["reason"]
    name = "non-persistent://public/default/np-crud"
    assert name in admin.get(NS)[1]
    assert name not in admin.get("/persistent/public/default")[1]
    assert name in admin.get("/namespaces/public/default/topics?mode=NON_PERSISTENT")[1]
    assert name in admin.get("/namespaces/public/default/topics?mode=ALL")[1]
    assert name not in admin.get("/namespaces/public/default/topics")[1]  # PERSISTENT default

    producer = client.create_producer(name)
    status, answer = admin.delete(f"{NS}/np-crud")
    assert status == 412 and "force" in answer["reason"]
    assert admin.delete(f"{NS}/np-crud?force=true") == (204, None)
    assert name not in admin.get(NS)[1]
    assert admin.get(f"{NS}/np-crud/stats")[0] == 404
    producer.close()


def test_stats_and_internal_stats_follow_the_traffic(admin: Admin, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-stats"
    consumer = client.subscribe(name, "sub-a", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(name, batching_enabled=False, producer_name="np-prod")
    for i in range(12):
        producer.send(f"m{i:02}".encode())
    got = receive_n(consumer, 12)
    status, stats = admin.get(f"{NS}/np-stats/stats")
    assert status == 200 and NP_STATS_FIELDS <= set(stats)
    assert stats["msgInCounter"] == 12
    assert stats["bytesInCounter"] > sum(len(m.data()) for m in got)  # payload + metadata
    assert stats["storageSize"] == 0
    assert [p["producerName"] for p in stats["publishers"]] == ["np-prod"]
    assert all("msgDropRate" in p for p in stats["publishers"])
    sub = stats["subscriptions"]["sub-a"]
    assert NP_SUB_FIELDS <= set(sub)
    assert sub["type"] == "Shared" and sub["msgBacklog"] == 0 and sub["msgOutCounter"] == 12
    assert len(sub["consumers"]) == 1 and sub["consumers"][0]["msgOutCounter"] == 12
    assert stats["msgOutCounter"] == 12

    status, internal = admin.get(f"{NS}/np-stats/internalStats")
    assert status == 200
    assert internal["entriesAddedCounter"] == 12
    assert internal["ledgers"] == [] and internal["numberOfEntries"] == 0
    assert set(internal["cursors"]) == {"sub-a"}
    assert admin.get(f"{NS}/np-stats/subscriptions") == (200, ["sub-a"])


def test_partitioned(admin: Admin, client: pulsar.Client) -> None:
    assert admin.put(f"{NS}/np-part/partitions", 2) == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 2})
    assert admin.post(f"{NS}/np-part/partitions", 3) == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 3})
    name = "non-persistent://public/default/np-part"
    assert name in admin.get(f"{NS}/partitioned")[1]
    assert name not in admin.get("/persistent/public/default/partitioned")[1]
    consumer = client.subscribe(name, "p")
    producer = client.create_producer(
        name,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(9):
        producer.send(f"{i}".encode())
    assert len(receive_n(consumer, 9)) == 9
    status, stats = admin.get(f"{NS}/np-part/partitioned-stats")
    assert status == 200 and stats["metadata"] == {"partitions": 3}
    assert stats["msgInCounter"] == 9 and stats["subscriptions"]["p"]["msgOutCounter"] == 9
    assert {f"{name}-partition-{i}" for i in range(3)} <= set(admin.get(NS)[1])
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/np-part/partitions?force=true") == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 0})


def test_subscription_operations(admin: Admin, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-subs"
    consumer = client.subscribe(name, "live")
    base = f"{NS}/np-subs/subscription"
    assert admin.put(f"{base}/made", {"ledgerId": -1, "entryId": -1}) == (204, None)
    assert admin.get(f"{NS}/np-subs/subscriptions") == (200, ["live", "made"])
    assert admin.put(f"{base}/made")[0] == 409
    # nothing is kept, so these change nothing and succeed, as in Pulsar
    assert admin.post(f"{base}/live/skip/5") == (204, None)
    assert admin.post(f"{base}/live/skip_all") == (204, None)
    assert admin.post(f"{base}/live/resetcursor/0") == (204, None)
    assert admin.post(f"{base}/live/resetcursor", {"ledgerId": 0, "entryId": 0}) == (204, None)
    # ... on a subscription that exists
    assert admin.post(f"{base}/nope/skip_all")[0] == 404
    assert admin.post(f"{base}/nope/resetcursor/0")[0] == 404
    # what needs stored messages is refused, with the reason
    for method, path in [
        ("POST", f"{NS}/np-subs/terminate"),
        ("POST", f"{base}/live/expireMessages/10"),
        ("POST", f"{NS}/np-subs/all_subscription/expireMessages/10"),
    ]:
        status, answer = admin.call(method, path)
        assert status == 405, (path, status, answer)
        assert "non-persistent" in answer["reason"]
    status, answer = admin.delete(f"{base}/live")
    assert status == 412
    assert admin.delete(f"{base}/made") == (204, None)
    assert admin.delete(f"{base}/made")[0] == 404
    assert admin.put(f"{NS}/np-subs/unload") == (204, None)
    consumer.close()


def test_bad_input(admin: Admin) -> None:
    assert admin.get("/non-persistent/public/nope")[0] == 404
    assert admin.get("/non-persistent/nope/default/t/stats")[0] == 404
    assert admin.get(f"{NS}/never-loaded/stats")[0] == 404
    assert admin.get(f"{NS}/never-loaded/internalStats")[0] == 404
    status, answer = admin.put(f"{NS}/bad%5Cname")
    assert status == 412 and "invalid topic name" in answer["reason"]
    status, answer = admin.get("/namespaces/public/default/topics?mode=SOME")
    assert status == 400 and "mode" in answer["reason"]
    assert admin.put(f"{NS}/np-bad/partitions", 0)[0] in (400, 422)
    assert admin.call("PATCH", f"{NS}/np-bad")[0] == 405
    assert admin.get("/clusters")[0] == 200  # still serving


def test_cli(standalone: StandaloneProc, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-cli"
    consumer = client.subscribe(name, "c")
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(3):
        producer.send(f"{i}".encode())
    receive_n(consumer, 3)

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", standalone.http_url,
             *args],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return out.stdout

    listed = json.loads(cli("--output", "json", "topics", "list", "public/default", "-td",
                            "non-persistent"))  # fmt: skip
    assert name in listed
    stats = json.loads(cli("--output", "json", "topics", "stats", name))
    assert stats["msgInCounter"] == 3 and "msgDropRate" in stats
    assert "c" in cli("topics", "subscriptions", name)
