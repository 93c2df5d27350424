"""Non-persistent topics through the admin API and ``magnetar admin``: create, list (per
bundle too), stats and internalStats shapes with the numbers the official client produced
and consumed, partitions, subscriptions, unload, delete; what needs stored messages refused
with 405 and its reason, bad input with the right status, and the broker still serving."""

from __future__ import annotations

import json
import subprocess
import sys

import pulsar
import pytest

from tests.integration.admin.conftest import Admin
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

NS = "/non-persistent/public/default"
NP_STATS_FIELDS = {
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
    "bytesInCounter", "msgOutCounter", "bytesOutCounter", "averageMsgSize", "storageSize",
    "publishers", "subscriptions", "replication", "deduplicationStatus", "msgDropRate",
}  # fmt: skip
NP_SUB_FIELDS = {
    "msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter", "msgBacklog",
    "type", "consumers", "msgDropRate", "isDurable",
}  # fmt: skip
CURSOR_FIELDS = {
    "markDeletePosition", "readPosition", "messagesConsumedCounter", "cursorLedger",
    "individuallyDeletedMessages", "state", "active", "properties",
}  # fmt: skip
BUNDLES = ["0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000",
           "0xc0000000_0xffffffff"]  # fmt: skip
"""public/default's 4 bundles (the standalone's default)."""


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
    # Pulsar's per-bundle listing: the topic is in exactly one bundle
    per_bundle = [admin.get(f"{NS}/{b}") for b in BUNDLES]
    assert all(status == 200 for status, _ in per_bundle)
    assert sum(name in names for _, names in per_bundle) == 1

    producer = client.create_producer(name)
    status, answer = admin.delete(f"{NS}/np-crud")
    assert status == 412 and "force" in answer["reason"]
    assert admin.delete(f"{NS}/np-crud?force=true") == (204, None)
    assert name not in admin.get(NS)[1]
    assert admin.get(f"{NS}/np-crud/stats")[0] == 404
    assert admin.delete(f"{NS}/np-crud")[0] == 404
    producer.close()


def test_stats_and_internal_stats_follow_the_traffic(admin: Admin, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-stats"
    consumer = client.subscribe(name, "sub-a", consumer_type=pulsar.ConsumerType.Shared)
    slow = client.subscribe(name, "sub-slow", receiver_queue_size=5)
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
    assert stats["publishers"][0]["msgDropRate"] == 0.0
    sub = stats["subscriptions"]["sub-a"]
    assert NP_SUB_FIELDS <= set(sub)
    assert sub["type"] == "Shared" and sub["msgBacklog"] == 0 and sub["msgOutCounter"] == 12
    assert sub["msgDropCounter"] == 0 and sub["isDurable"] is True
    assert len(sub["consumers"]) == 1 and sub["consumers"][0]["msgOutCounter"] == 12
    slow_sub = stats["subscriptions"]["sub-slow"]
    assert slow_sub["type"] == "Exclusive"
    assert slow_sub["msgOutCounter"] == 5 and slow_sub["msgDropCounter"] == 7
    assert stats["msgOutCounter"] == 12 + 5
    wait_until(
        lambda: admin.get(f"{NS}/np-stats/stats")[1]["msgRateIn"] > 0,
        timeout=15,
        what="msgRateIn over the broker's stats interval",
    )

    status, internal = admin.get(f"{NS}/np-stats/internalStats")
    assert status == 200
    assert internal["entriesAddedCounter"] == 12
    assert internal["ledgers"] == [] and internal["numberOfEntries"] == 0
    assert internal["totalSize"] == 0 and internal["lastConfirmedEntry"] is None
    assert set(internal["cursors"]) == {"sub-a", "sub-slow"}
    assert all(CURSOR_FIELDS <= set(c) for c in internal["cursors"].values())
    assert admin.get(f"{NS}/np-stats/subscriptions") == (200, ["sub-a", "sub-slow"])
    producer.close()
    consumer.close()
    slow.close()


def test_partitioned(admin: Admin, client: pulsar.Client) -> None:
    assert admin.put(f"{NS}/np-part/partitions", 2) == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 2})
    assert admin.post(f"{NS}/np-part/partitions", 3) == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 3})
    status, answer = admin.post(f"{NS}/np-part/partitions", 2)
    assert status == 400 and "grow" in answer["reason"]
    name = "non-persistent://public/default/np-part"
    assert name in admin.get(f"{NS}/partitioned")[1]
    assert name not in admin.get("/persistent/public/default/partitioned")[1]
    assert admin.get("/persistent/public/default/np-part/partitions") == (200, {"partitions": 0})
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
    assert {p: s["msgInCounter"] for p, s in stats["partitions"].items()} == {
        f"{name}-partition-{i}": 3 for i in range(3)
    }
    assert {f"{name}-partition-{i}" for i in range(3)} <= set(admin.get(NS)[1])
    status, answer = admin.delete(f"{NS}/np-part/partitions")
    assert status == 412 and "force" in answer["reason"]
    assert admin.put(f"{NS}/np-part/unload") == (204, None)  # every partition
    producer.close()
    consumer.close()
    assert admin.delete(f"{NS}/np-part/partitions?force=true") == (204, None)
    assert admin.get(f"{NS}/np-part/partitions") == (200, {"partitions": 0})
    assert name not in admin.get(f"{NS}/partitioned")[1]


def test_subscription_operations(admin: Admin, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-subs"
    live = client.subscribe(name, "live")
    idle = client.subscribe(name, "idle")
    idle.close()  # a subscription stays after its consumer, as in Pulsar
    base = f"{NS}/np-subs/subscription"
    assert admin.get(f"{NS}/np-subs/subscriptions") == (200, ["idle", "live"])
    status, answer = admin.put(f"{base}/made", {"ledgerId": -1, "entryId": -1})
    assert status == 400 and "only be done through client" in answer["reason"]
    # what needs stored messages is refused, naming the operation
    for method, path, body, operation in [
        ("POST", f"{NS}/np-subs/terminate", None, "Termination of"),
        ("POST", f"{base}/live/skip/5", None, "Skip messages on"),
        ("POST", f"{base}/live/skip_all", None, "Clear backlog on"),
        ("POST", f"{base}/live/resetcursor/0", None, "Reset cursor on"),
        ("POST", f"{base}/live/resetcursor", {"ledgerId": 0, "entryId": 0}, "Reset cursor on"),
        ("POST", f"{base}/live/expireMessages/10", None, "Expire messages on"),
        ("POST", f"{NS}/np-subs/all_subscription/expireMessages/10", None, "Expire messages on"),
    ]:
        status, answer = admin.call(method, path, body)
        assert status == 405, (path, status, answer)
        assert answer["reason"] == f"{operation} a non-persistent topic is not allowed"
    status, answer = admin.delete(f"{base}/live")
    assert status == 412 and "consumers" in answer["reason"]
    assert admin.delete(f"{base}/idle") == (204, None)
    assert admin.delete(f"{base}/idle")[0] == 404
    assert admin.delete(f"{base}/live?force=true") == (204, None)
    assert admin.get(f"{NS}/np-subs/subscriptions") == (200, [])
    live.close()


def test_unload_reconnects_the_clients(admin: Admin, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-unload"
    consumer = client.subscribe(name, "u")
    producer = client.create_producer(name, batching_enabled=False)
    assert admin.put(f"{NS}/np-unload/unload") == (204, None)

    def back() -> bool:
        status, stats = admin.get(f"{NS}/np-unload/stats")
        if status != 200 or not stats["publishers"]:
            return False
        consumers = stats["subscriptions"].get("u", {}).get("consumers", [])
        return bool(consumers) and consumers[0]["availablePermits"] > 0

    # both reconnect; the consumer's permits come again with its FLOW (until then a
    # message would be dropped for it, as any message to a consumer without permits)
    wait_until(back, timeout=30, what="producer and consumer back after the unload")
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    producer.close()
    consumer.close()
    assert admin.put(f"{NS}/never-loaded/unload")[0] == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("GET", "/non-persistent/public/nope", None, 404, "does not exist"),
        ("GET", "/non-persistent/nope/default/t/stats", None, 404, "does not exist"),
        ("POST", "/non-persistent/public/nope/t/terminate", None, 404, "does not exist"),
        ("GET", f"{NS}/never-loaded/stats", None, 404, "does not exist"),
        ("GET", f"{NS}/never-loaded/internalStats", None, 404, "does not exist"),
        ("GET", f"{NS}/never-loaded/subscriptions", None, 404, "does not exist"),
        ("DELETE", f"{NS}/never-loaded/subscription/s", None, 404, "does not exist"),
        ("PUT", f"{NS}/bad%5Cname", None, 412, "invalid topic name"),
        ("GET", f"{NS}/0x00000000_0x00000001", None, 412, "not a bundle"),
        ("GET", "/namespaces/public/default/topics?mode=SOME", None, 400, "mode"),
        ("PUT", f"{NS}/np-bad/partitions", 0, 400, "partitions"),
        ("PUT", f"{NS}/np-bad/partitions", None, 400, "body"),
        ("POST", f"{NS}/np-bad/partitions", 4, 404, "does not exist"),
        ("PATCH", f"{NS}/np-bad", None, 405, ""),
        ("POST", f"{NS}/np-bad/stats", None, 405, ""),
    ],
)
def test_bad_input(
    admin: Admin, method: str, path: str, body: object, status: int, reason: str
) -> None:
    got, answer = admin.call(method, path, body)
    assert got == status, answer
    assert reason in answer["reason"]
    assert admin.get("/tenants")[0] == 200  # still serving


def test_cli(standalone: StandaloneProc, client: pulsar.Client) -> None:
    name = "non-persistent://public/default/np-cli"
    consumer = client.subscribe(name, "c")
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(3):
        producer.send(f"{i}".encode())
    receive_n(consumer, 3)

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", standalone.http_url,
             *args],
            capture_output=True, text=True, timeout=60, check=check,
        )  # fmt: skip

    listed = json.loads(
        cli("--output", "json", "topics", "list", "public/default", "-td", "non-persistent").stdout
    )
    assert name in listed
    stats = json.loads(cli("--output", "json", "topics", "stats", name).stdout)
    assert stats["msgInCounter"] == 3 and stats["subscriptions"]["c"]["msgOutCounter"] == 3
    assert "c" in cli("topics", "subscriptions", name).stdout
    cli("topics", "create-partitioned-topic", "non-persistent://public/default/np-cli-p", "-p", "2")
    partitioned = cli(
        "--output", "json", "topics", "list-partitioned-topics", "public/default",
        "-td", "non-persistent",
    ).stdout  # fmt: skip
    assert json.loads(partitioned) == ["non-persistent://public/default/np-cli-p"]
    refused = cli("topics", "terminate", name, check=False)
    assert refused.returncode == 1 and "405" in refused.stderr
    assert "Termination of a non-persistent topic is not allowed" in refused.stderr
    producer.close()
    consumer.close()
