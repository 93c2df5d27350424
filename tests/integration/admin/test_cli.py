"""``magnetar admin`` as a subprocess against a running standalone, for every verb group."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pulsar

from tests.support.standalone import StandaloneProc


def admin(
    standalone: StandaloneProc, *args: str, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", standalone.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def as_json(standalone: StandaloneProc, *args: str):
    return json.loads(admin(standalone, "--output", "json", *args).stdout)


def test_clusters_brokers_tenants(standalone: StandaloneProc) -> None:
    assert admin(standalone, "clusters", "list").stdout.split() == ["standalone"]
    assert "brokerServiceUrl" in admin(standalone, "clusters", "get", "standalone").stdout
    assert len(as_json(standalone, "brokers", "list", "standalone")) == 1
    assert admin(standalone, "brokers", "healthcheck").stdout.strip() == "ok"
    admin(standalone, "tenants", "create", "cli-t", "--admin-roles", "ops,dev")
    assert as_json(standalone, "tenants", "get", "cli-t")["adminRoles"] == ["ops", "dev"]
    admin(standalone, "tenants", "update", "cli-t", "--admin-roles", "ops")
    assert "cli-t" in admin(standalone, "tenants", "list").stdout.split()
    failed = admin(standalone, "tenants", "create", "cli-t", ok=False)
    assert failed.returncode == 1
    assert failed.stderr.startswith("magnetar admin: 409 ")
    admin(standalone, "tenants", "delete", "cli-t")
    missing = admin(standalone, "tenants", "get", "cli-t", ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_namespaces(standalone: StandaloneProc) -> None:
    admin(standalone, "namespaces", "create", "public/cli-ns")
    assert "public/cli-ns" in admin(standalone, "namespaces", "list", "public").stdout.split()
    admin(
        standalone, "namespaces", "set-retention", "public/cli-ns", "--time", "2h", "--size", "1G"
    )
    assert as_json(standalone, "namespaces", "get-retention", "public/cli-ns") == {
        "retentionTimeInMinutes": 120,
        "retentionSizeInMB": 1024,
    }
    admin(standalone, "namespaces", "set-message-ttl", "public/cli-ns", "--messageTTL", "10m")
    assert as_json(standalone, "namespaces", "get-message-ttl", "public/cli-ns") == 600
    admin(standalone, "namespaces", "set-deduplication", "public/cli-ns", "--enable")
    admin(
        standalone, "namespaces", "set-backlog-quota", "public/cli-ns",
        "--limit", "10G", "--policy", "producer_exception",
    )  # fmt: skip
    quotas = as_json(standalone, "namespaces", "get-backlog-quotas", "public/cli-ns")
    assert quotas["destination_storage"]["limitSize"] == 10 << 30
    admin(
        standalone, "namespaces", "set-auto-topic-creation", "public/cli-ns",
        "--enable", "--type", "partitioned", "--num-partitions", "2",
    )  # fmt: skip
    policies = as_json(standalone, "namespaces", "policies", "public/cli-ns")
    assert policies["deduplicationEnabled"] is True
    assert policies["autoTopicCreationOverride"]["defaultNumPartitions"] == 2
    assert (
        "retention_policies.retentionTimeInMinutes"
        in admin(standalone, "namespaces", "policies", "public/cli-ns").stdout
    )  # the table view flattens nested fields
    bad = admin(standalone, "namespaces", "set-retention", "public/cli-ns", "--time", "soon",
                "--size", "1G", ok=False)  # fmt: skip
    assert bad.returncode == 2 and "not a time" in bad.stderr
    assert as_json(standalone, "namespaces", "get-deduplication", "public/cli-ns") is True
    admin(standalone, "namespaces", "set-offload-threshold", "public/cli-ns", "--size", "1G")
    assert as_json(standalone, "namespaces", "get-offload-threshold", "public/cli-ns") == 1 << 30
    admin(standalone, "namespaces", "set-offload-deletion-lag", "public/cli-ns", "--lag", "1h")
    assert (
        as_json(standalone, "namespaces", "get-offload-deletion-lag", "public/cli-ns") == 3600_000
    )
    for policy in ("retention", "message-ttl", "deduplication", "auto-topic-creation"):
        admin(standalone, "namespaces", f"remove-{policy}", "public/cli-ns")
        assert as_json(standalone, "namespaces", f"get-{policy}", "public/cli-ns") is None
    admin(standalone, "namespaces", "remove-backlog-quota", "public/cli-ns")
    assert as_json(standalone, "namespaces", "get-backlog-quotas", "public/cli-ns") == {}
    illegal = admin(standalone, "namespaces", "set-message-ttl", "public/cli-ns", "-ttl", "-5",
                    ok=False)  # fmt: skip
    assert illegal.returncode == 1
    assert illegal.stderr.startswith("magnetar admin: 400 message TTL")
    admin(standalone, "topics", "create", "persistent://public/cli-ns/inside")
    refused = admin(standalone, "namespaces", "delete", "public/cli-ns", ok=False)
    assert refused.returncode == 1 and "409" in refused.stderr
    assert admin(standalone, "namespaces", "topics", "public/cli-ns").stdout.split() == [
        "persistent://public/cli-ns/inside"
    ]
    admin(standalone, "namespaces", "delete", "public/cli-ns", "--force")


def test_topics_and_subscriptions(standalone: StandaloneProc) -> None:
    admin(standalone, "topics", "create", "persistent://public/default/cli-topic")
    assert (
        "persistent://public/default/cli-topic"
        in admin(standalone, "topics", "list", "public/default").stdout.split()
    )
    client = pulsar.Client(standalone.service_url)
    try:
        producer = client.create_producer("persistent://public/default/cli-topic")
        admin(
            standalone, "topics", "create-subscription", "cli-topic", "-s", "s1", "-m", "earliest"
        )
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        stats = as_json(standalone, "topics", "stats", "cli-topic")
        assert stats["msgInCounter"] == 6 and stats["subscriptions"]["s1"]["msgBacklog"] == 6
        table = admin(standalone, "topics", "stats", "cli-topic").stdout
        assert "msgInCounter" in table and "\nsubscriptions:\n" in table and "publishers:" in table
        internal = admin(standalone, "topics", "stats-internal", "cli-topic").stdout
        assert "ledgers:\n  LEDGERID" in internal and "cursors:" in internal
        lookup = as_json(standalone, "topics", "lookup", "cli-topic")
        assert lookup["brokerUrl"] == standalone.service_url
        assert (
            as_json(standalone, "topics", "stats-internal", "cli-topic")["entriesAddedCounter"] == 6
        )
        assert as_json(standalone, "topics", "subscriptions", "cli-topic") == ["s1"]
        admin(standalone, "topics", "skip", "cli-topic", "-s", "s1", "-n", "2")
        assert (
            as_json(standalone, "topics", "stats", "cli-topic")["subscriptions"]["s1"]["msgBacklog"]
            == 4
        )
        admin(standalone, "topics", "expire-messages", "cli-topic", "-s", "s1", "-t", "0")
        admin(standalone, "topics", "expire-messages-all-subscriptions", "cli-topic", "-t", "0")
        admin(standalone, "topics", "clear-backlog", "cli-topic", "-s", "s1")
        mid = f"{ids[3].ledger_id()}:{ids[3].entry_id()}"
        admin(standalone, "topics", "reset-cursor", "cli-topic", "-s", "s1", "--messageId", mid)
        admin(standalone, "topics", "reset-cursor", "cli-topic", "-s", "s1", "--time", "1h")
        admin(standalone, "topics", "unload", "cli-topic")
        admin(standalone, "topics", "unsubscribe", "cli-topic", "-s", "s1")
        producer.send(b"after unload")
        assert "ledgerId" in admin(standalone, "topics", "terminate", "cli-topic").stdout
        # terminating closes the topic's producers (as Pulsar does): the client may have
        # closed this one already when the broker's CLOSE_PRODUCER arrived
        with contextlib.suppress(pulsar.AlreadyClosed):
            producer.close()
    finally:
        client.close()
    admin(standalone, "topics", "delete", "cli-topic", "--force")
    gone = admin(standalone, "topics", "stats", "cli-topic", ok=False)
    assert gone.returncode == 1 and gone.stderr.startswith("magnetar admin: 404 ")

    admin(standalone, "topics", "create-partitioned-topic", "cli-parts", "-p", "2")
    assert as_json(standalone, "topics", "get-partitioned-topic-metadata", "cli-parts") == {
        "partitions": 2
    }
    admin(standalone, "topics", "update-partitioned-topic", "cli-parts", "-p", "3")
    assert as_json(standalone, "topics", "partitioned-stats", "cli-parts")["metadata"] == {
        "partitions": 3
    }
    shrink = admin(standalone, "topics", "update-partitioned-topic", "cli-parts", "-p", "1",
                   ok=False)  # fmt: skip
    assert shrink.returncode == 1 and "400" in shrink.stderr
    admin(standalone, "topics", "delete-partitioned-topic", "cli-parts")
    bad = admin(standalone, "topics", "stats", "a/b/c/d", ok=False)
    assert bad.returncode == 2 and "invalid topic name" in bad.stderr


def test_topic_policies_and_tenant_force(standalone: StandaloneProc) -> None:
    admin(standalone, "tenants", "create", "cli-force")
    admin(standalone, "namespaces", "create", "cli-force/ns", "--bundles", "2")
    assert (
        as_json(standalone, "namespaces", "policies", "cli-force/ns")["bundles"]["numBundles"] == 2
    )
    topic = "persistent://cli-force/ns/t"
    admin(standalone, "topics", "create", topic)
    admin(standalone, "topics", "set-message-ttl", topic, "-t", "2m")
    assert as_json(standalone, "topics", "get-message-ttl", topic) == 120
    admin(standalone, "topics", "set-retention", topic, "-t", "1h", "-s", "-1")
    assert as_json(standalone, "topics", "get-retention", topic) == {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": -1,
    }
    admin(standalone, "topics", "set-deduplication", topic, "--enable")
    assert as_json(standalone, "topics", "get-deduplication", topic) is True
    for policy in ("message-ttl", "retention", "deduplication"):
        admin(standalone, "topics", f"remove-{policy}", topic)
        assert as_json(standalone, "topics", f"get-{policy}", topic) is None
    assert as_json(standalone, "topics", "list", "cli-force/ns", "-td", "non-persistent") == []
    refused = admin(standalone, "tenants", "delete", "cli-force", ok=False)
    assert refused.returncode == 1 and "409" in refused.stderr
    admin(standalone, "tenants", "delete", "cli-force", "--force")
    assert "cli-force" not in admin(standalone, "tenants", "list").stdout.split()


def test_schemas(standalone: StandaloneProc, tmp_path: Path) -> None:
    definition = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    payload = tmp_path / "schema.json"
    payload.write_text(json.dumps({"type": "AVRO", "schema": json.dumps(definition)}))
    assert as_json(standalone, "schemas", "upload", "cli-schema", "-f", str(payload)) == {
        "version": {"version": 0}
    }
    got = as_json(standalone, "schemas", "get", "cli-schema")
    assert (got["type"], json.loads(got["data"])) == ("AVRO", definition)
    ns = "public/cli-schemas"
    admin(standalone, "namespaces", "create", ns)
    admin(standalone, "namespaces", "set-schema-compatibility-strategy", ns, "-c", "BACKWARD")
    assert as_json(standalone, "namespaces", "get-schema-compatibility-strategy", ns) == "BACKWARD"
    admin(standalone, "schemas", "delete", "cli-schema")
    result = admin(standalone, "schemas", "get", "cli-schema", ok=False)
    assert result.returncode != 0 and "404" in result.stderr


def test_peek_examine_and_get_message_by_id(standalone: StandaloneProc) -> None:
    """The stored-message verbs print pulsar-admin's layout (id, metadata, hex dump) or,
    with ``--output json``, the metadata and the base64 payload."""
    topic = "persistent://public/default/cli-peek"
    client = pulsar.Client(standalone.service_url)
    try:
        admin(standalone, "topics", "create", topic)
        admin(standalone, "topics", "create-subscription", topic, "-s", "s", "-m", "earliest")
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode(), properties={"k": str(i)}) for i in range(3)]
    finally:
        client.close()
    peeked = as_json(standalone, "topics", "peek-messages", topic, "-s", "s", "-n", "5")
    assert [base64.b64decode(m["payload"]) for m in peeked] == [b"m0", b"m1", b"m2"]
    assert [m["messageId"] for m in peeked] == [f"{i.ledger_id()}:{i.entry_id()}" for i in ids]
    assert json.loads(peeked[1]["metadata"]["PROPERTY"]) == {"k": "1"}
    text = admin(standalone, "topics", "peek-messages", topic, "-s", "s").stdout
    assert text.startswith(f"Message ID: {ids[0].ledger_id()}:{ids[0].entry_id()}\n")
    assert "6d 30" in text and "|m0|" in text and "sequence-id" in text

    last = as_json(standalone, "topics", "last-message-id", topic)
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    newest = as_json(standalone, "topics", "examine-message", topic)
    assert base64.b64decode(newest[0]["payload"]) == b"m2"
    second = as_json(standalone, "topics", "examine-message", topic, "-i", "earliest", "-m", "2")
    assert base64.b64decode(second[0]["payload"]) == b"m1"
    ledger, entry = str(ids[0].ledger_id()), str(ids[0].entry_id())
    first = as_json(standalone, "topics", "get-message-by-id", topic, "-l", ledger, "-e", entry)
    assert base64.b64decode(first[0]["payload"]) == b"m0"
    missing = admin(
        standalone, "topics", "get-message-by-id", topic, "-l", ledger, "-e", "99", ok=False
    )
    assert missing.returncode == 1 and "404 Message id not found" in missing.stderr


def test_topic_policies_group(standalone: StandaloneProc) -> None:
    """``topicPolicies``: pulsar-admin's group for a topic's own policies."""
    topic = "persistent://public/default/cli-policies"
    admin(standalone, "topics", "create", topic)
    admin(standalone, "topicPolicies", "set-max-producers", topic, "-p", "2")
    admin(standalone, "topicPolicies", "set-retention", topic, "-t", "1h", "-s", "-1")
    assert as_json(standalone, "topicPolicies", "get-max-producers", topic) == 2
    assert as_json(standalone, "topics", "get-retention", topic) == {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": -1,
    }
    refused = admin(
        standalone, "topicPolicies", "set-offload-policies", topic, "-d", "tape", ok=False
    )
    assert refused.returncode == 1 and "412 The driver is not supported" in refused.stderr
    admin(standalone, "topicPolicies", "remove-max-producers", topic)
    assert as_json(standalone, "topicPolicies", "get-max-producers", topic) is None
    # backlog quotas by type, in both groups; --applied: the broker's default when none is set
    admin(
        standalone, "topicPolicies", "set-backlog-quota", topic,
        "-l", "1M", "-p", "consumer_backlog_eviction",
    )  # fmt: skip
    admin(
        standalone, "topics", "set-backlog-quota", topic,
        "-lt", "1h", "-p", "producer_exception", "-t", "message_age",
    )  # fmt: skip
    quotas = as_json(standalone, "topics", "get-backlog-quotas", topic)
    assert quotas["destination_storage"]["limitSize"] == 1 << 20
    assert quotas["message_age"] == {
        "limit": -1, "limitSize": -1, "limitTime": 3600, "policy": "producer_exception"
    }  # fmt: skip
    admin(standalone, "topicPolicies", "remove-backlog-quota", topic)
    admin(standalone, "topics", "remove-backlog-quota", topic, "-t", "message_age")
    assert as_json(standalone, "topicPolicies", "get-backlog-quotas", topic) == {}
    default = {"limit": -1, "limitSize": -1, "limitTime": -1, "policy": "producer_request_hold"}
    assert as_json(standalone, "topics", "get-backlog-quotas", topic, "--applied") == {
        "destination_storage": default, "message_age": default
    }  # fmt: skip
