"""``magnetar admin``: every verb's arguments become the request pulsar-admin would send
(checked without a server), bad arguments exit 2, and the package is an HTTP client only."""

from __future__ import annotations

import argparse
import ast
import io
import json
import pathlib
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout

import pytest

import magnetar.admin_cli
from magnetar import admin_cli
from magnetar.admin_cli import commands, convert
from magnetar.admin_cli.client import NO_BODY, Client, Request
from magnetar.client.admin import FormField
from tests.support import admin_echo

SUB = "/admin/v2/persistent/public/default/t/subscription/s1"
NSP = "/admin/v2/namespaces/public/ns"

CASES: dict[tuple[str, str], tuple[list[str], Request]] = {
    ("clusters", "list"): ([], Request("GET", "/admin/v2/clusters")),
    ("clusters", "get"): (["standalone"], Request("GET", "/admin/v2/clusters/standalone")),
    ("clusters", "create"): (
        ["east", "--url", "http://e:8080", "--broker-url", "pulsar://e:6650"],
        Request(
            "PUT",
            "/admin/v2/clusters/east",
            {"serviceUrl": "http://e:8080", "brokerServiceUrl": "pulsar://e:6650"},
        ),
    ),
    ("clusters", "update"): (
        ["east", "--url-secure", "https://e:8443", "--broker-url-secure", "pulsar+ssl://e:6651"],
        Request(
            "POST",
            "/admin/v2/clusters/east",
            {"serviceUrlTls": "https://e:8443", "brokerServiceUrlTls": "pulsar+ssl://e:6651"},
        ),
    ),
    ("clusters", "delete"): (["east"], Request("DELETE", "/admin/v2/clusters/east")),
    ("namespaces", "set-clusters"): (
        ["public/ns", "-c", "a,b"],
        Request("POST", f"{NSP}/replication", ["a", "b"]),
    ),
    ("namespaces", "get-clusters"): (["public/ns"], Request("GET", f"{NSP}/replication")),
    ("brokers", "list"): (["standalone"], Request("GET", "/admin/v2/brokers/standalone")),
    ("brokers", "healthcheck"): ([], Request("GET", "/admin/v2/brokers/health")),
    ("bookies", "list"): ([], Request("GET", "/admin/v2/bookies/all")),
    ("bookies", "list-bookies"): ([], Request("GET", "/admin/v2/bookies/all")),
    ("bookies", "racks-placement"): ([], Request("GET", "/admin/v2/bookies/racks-info")),
    ("bookies", "get-bookie-rack"): (
        ["-b", "10.0.0.7:3181"],
        Request("GET", "/admin/v2/bookies/racks-info/10.0.0.7%3A3181"),
    ),
    ("bookies", "set-bookie-rack"): (
        ["-b", "10.0.0.7:3181", "-r", "/rack-a", "-g", "zone 1", "--hostname", "b7.local"],
        Request(
            "POST",
            "/admin/v2/bookies/racks-info/10.0.0.7%3A3181?group=zone%201",
            {"rack": "/rack-a", "hostname": "b7.local"},
        ),
    ),
    ("bookies", "delete-bookie-rack"): (
        ["--bookie", "10.0.0.7:3181"],
        Request("DELETE", "/admin/v2/bookies/racks-info/10.0.0.7%3A3181"),
    ),
    ("bookies", "list-underreplicated"): ([], Request("GET", "/admin/v2/bookies/underreplicated")),
    ("bookies", "decommission"): (
        ["10.0.0.7:3181"],
        Request("POST", "/admin/v2/bookies/decommission/10.0.0.7%3A3181"),
    ),
    ("bookies", "decommission-status"): (
        ["10.0.0.7:3181"],
        Request("GET", "/admin/v2/bookies/decommission/10.0.0.7%3A3181"),
    ),
    ("broker-stats", "topics"): ([], Request("GET", "/admin/v2/broker-stats/topics")),
    ("broker-stats", "load-report"): ([], Request("GET", "/admin/v2/broker-stats/load-report")),
    ("tenants", "list"): ([], Request("GET", "/admin/v2/tenants")),
    ("tenants", "get"): (["acme"], Request("GET", "/admin/v2/tenants/acme")),
    ("tenants", "create"): (
        ["acme", "-r", "ops, dev", "-c", "standalone"],
        Request(
            "PUT",
            "/admin/v2/tenants/acme",
            {"adminRoles": ["ops", "dev"], "allowedClusters": ["standalone"]},
        ),
    ),
    ("tenants", "update"): (
        ["acme", "--admin-roles", "ops"],
        Request("POST", "/admin/v2/tenants/acme", {"adminRoles": ["ops"]}),
    ),
    ("tenants", "delete"): (["acme", "-f"], Request("DELETE", "/admin/v2/tenants/acme?force=true")),
    ("namespaces", "list"): (["public"], Request("GET", "/admin/v2/namespaces/public")),
    ("namespaces", "topics"): (["public/ns"], Request("GET", f"{NSP}/topics")),
    ("namespaces", "create"): (
        ["public/ns", "-b", "8"],
        Request("PUT", NSP, {"bundles": {"numBundles": 8}}),
    ),
    ("namespaces", "delete"): (["public/ns"], Request("DELETE", f"{NSP}?force=false")),
    ("namespaces", "policies"): (["public/ns"], Request("GET", NSP)),
    ("namespaces", "bundles"): (["public/ns"], Request("GET", f"{NSP}/bundles")),
    ("namespaces", "unload"): (["public/ns"], Request("PUT", f"{NSP}/unload")),
    ("namespaces", "split-bundle"): (
        ["public/ns", "-b", "0x00000000_0x40000000", "-u", "-san", "topic_count_equally_divide"],
        Request(
            "PUT",
            f"{NSP}/0x00000000_0x40000000/split"
            "?unload=true&splitAlgorithmName=topic_count_equally_divide",
        ),
    ),
    ("namespaces", "permissions"): (["public/ns"], Request("GET", f"{NSP}/permissions")),
    ("namespaces", "grant-permission"): (
        ["public/ns", "--role", "app one", "--actions", "produce, consume"],
        Request("POST", f"{NSP}/permissions/app%20one", ["produce", "consume"]),
    ),
    ("namespaces", "revoke-permission"): (
        ["public/ns", "--role", "app"],
        Request("DELETE", f"{NSP}/permissions/app"),
    ),
    ("namespaces", "subscription-permission"): (
        ["public/ns"],
        Request("GET", f"{NSP}/permissions/subscription"),
    ),
    ("namespaces", "grant-subscription-permission"): (
        ["public/ns", "-s", "s1", "--roles", "a,b"],
        Request("POST", f"{NSP}/permissions/subscription/s1", ["a", "b"]),
    ),
    ("namespaces", "revoke-subscription-permission"): (
        ["public/ns", "-s", "s1", "--role", "a"],
        Request("DELETE", f"{NSP}/permissions/s1/a"),
    ),
    ("topics", "permissions"): (
        ["t"],
        Request("GET", "/admin/v2/persistent/public/default/t/permissions"),
    ),
    ("topics", "grant-permission"): (
        ["t", "--role", "app", "--actions", "consume"],
        Request("POST", "/admin/v2/persistent/public/default/t/permissions/app", ["consume"]),
    ),
    ("topics", "revoke-permission"): (
        ["t", "--role", "app"],
        Request("DELETE", "/admin/v2/persistent/public/default/t/permissions/app"),
    ),
    ("namespaces", "set-retention"): (
        ["public/ns", "--time", "2h", "--size", "1G"],
        Request(
            "POST", f"{NSP}/retention", {"retentionTimeInMinutes": 120, "retentionSizeInMB": 1024}
        ),
    ),
    ("namespaces", "set-message-ttl"): (
        ["public/ns", "-ttl", "10m"],
        Request("POST", f"{NSP}/messageTTL", 600),
    ),
    ("namespaces", "set-deduplication"): (
        ["public/ns", "--disable"],
        Request("POST", f"{NSP}/deduplication", False),
    ),
    ("namespaces", "set-backlog-quota"): (
        ["public/ns", "-l", "10G", "-lt", "1d", "-p", "producer_exception"],
        Request(
            "POST",
            f"{NSP}/backlogQuota?backlogQuotaType=destination_storage",
            {"limitSize": 10 << 30, "limitTime": 86400, "policy": "producer_exception"},
        ),
    ),
    ("namespaces", "set-auto-topic-creation"): (
        ["public/ns", "-e", "-t", "partitioned", "-n", "3"],
        Request(
            "POST",
            f"{NSP}/autoTopicCreation",
            {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
        ),
    ),
    ("namespaces", "set-offload-threshold"): (
        ["public/ns", "-s", "1M"],
        Request("PUT", f"{NSP}/offloadThreshold", 1 << 20),
    ),
    ("namespaces", "set-offload-deletion-lag"): (
        ["public/ns", "-l", "1h"],
        Request("PUT", f"{NSP}/offloadDeletionLagMs", 3_600_000),
    ),
    ("namespaces", "remove-backlog-quota"): (
        ["public/ns", "-t", "message_age"],
        Request("DELETE", f"{NSP}/backlogQuota?backlogQuotaType=message_age"),
    ),
    ("namespaces", "get-retention"): (["public/ns"], Request("GET", f"{NSP}/retention")),
    ("namespaces", "get-message-ttl"): (["public/ns"], Request("GET", f"{NSP}/messageTTL")),
    ("namespaces", "get-deduplication"): (["public/ns"], Request("GET", f"{NSP}/deduplication")),
    ("namespaces", "get-backlog-quotas"): (["public/ns"], Request("GET", f"{NSP}/backlogQuotaMap")),
    ("namespaces", "get-auto-topic-creation"): (
        ["public/ns"],
        Request("GET", f"{NSP}/autoTopicCreation"),
    ),
    ("namespaces", "get-offload-threshold"): (
        ["public/ns"],
        Request("GET", f"{NSP}/offloadThreshold"),
    ),
    ("namespaces", "get-offload-deletion-lag"): (
        ["public/ns"],
        Request("GET", f"{NSP}/offloadDeletionLagMs"),
    ),
    ("namespaces", "remove-retention"): (["public/ns"], Request("DELETE", f"{NSP}/retention")),
    ("namespaces", "remove-message-ttl"): (["public/ns"], Request("DELETE", f"{NSP}/messageTTL")),
    ("namespaces", "remove-deduplication"): (
        ["public/ns"],
        Request("DELETE", f"{NSP}/deduplication"),
    ),
    ("namespaces", "remove-auto-topic-creation"): (
        ["public/ns"],
        Request("DELETE", f"{NSP}/autoTopicCreation"),
    ),
    ("namespaces", "clear-offload-deletion-lag"): (
        ["public/ns"],
        Request("DELETE", f"{NSP}/offloadDeletionLagMs"),
    ),
    ("topics", "list"): (["public/default"], Request("GET", "/admin/v2/persistent/public/default")),
    ("topics", "list-partitioned-topics"): (
        ["public/default"],
        Request("GET", "/admin/v2/persistent/public/default/partitioned"),
    ),
    ("topics", "create"): (
        ["persistent://acme/ns/a b"],
        Request("PUT", "/admin/v2/persistent/acme/ns/a%20b"),
    ),
    ("topics", "delete"): (
        ["t", "--force"],
        Request("DELETE", "/admin/v2/persistent/public/default/t?force=true"),
    ),
    ("topics", "create-partitioned-topic"): (
        ["acme/ns/p", "-p", "4"],
        Request("PUT", "/admin/v2/persistent/acme/ns/p/partitions", 4),
    ),
    ("topics", "update-partitioned-topic"): (
        ["acme/ns/p", "-p", "6"],
        Request("POST", "/admin/v2/persistent/acme/ns/p/partitions", 6),
    ),
    ("topics", "get-partitioned-topic-metadata"): (
        ["p"],
        Request("GET", "/admin/v2/persistent/public/default/p/partitions"),
    ),
    ("topics", "delete-partitioned-topic"): (
        ["p"],
        Request("DELETE", "/admin/v2/persistent/public/default/p/partitions?force=false"),
    ),
    ("topics", "stats"): (["t"], Request("GET", "/admin/v2/persistent/public/default/t/stats")),
    ("topics", "backlog"): (
        ["persistent://public/default/t"],
        Request("GET", "/admin/v2/persistent/public/default/t/backlog"),
    ),
    ("topics", "stats-internal"): (
        ["t"],
        Request("GET", "/admin/v2/persistent/public/default/t/internalStats"),
    ),
    ("topics", "partitioned-stats"): (
        ["p", "--per-partition"],
        Request("GET", "/admin/v2/persistent/public/default/p/partitioned-stats?perPartition=true"),
    ),
    ("topics", "lookup"): (["t"], Request("GET", "/lookup/v2/topic/persistent/public/default/t")),
    ("topics", "bundle-range"): (
        ["t"],
        Request("GET", "/lookup/v2/topic/persistent/public/default/t/bundle"),
    ),
    ("topics", "unload"): (["t"], Request("PUT", "/admin/v2/persistent/public/default/t/unload")),
    ("topics", "terminate"): (
        ["t"],
        Request("POST", "/admin/v2/persistent/public/default/t/terminate"),
    ),
    ("topics", "partitioned-terminate"): (
        ["t"],
        Request("POST", "/admin/v2/persistent/public/default/t/terminate/partitions"),
    ),
    ("topics", "partitioned-stats-internal"): (
        ["t"],
        Request("GET", "/admin/v2/persistent/public/default/t/partitioned-internalStats"),
    ),
    ("topics", "peek-messages"): (
        ["t", "-s", "s1", "-n", "3"],
        Request("GET", f"{SUB}/position/1", messages=3),
    ),
    ("topics", "examine-message"): (
        ["t", "-i", "earliest", "-m", "2"],
        Request(
            "GET",
            "/admin/v2/persistent/public/default/t/examinemessage"
            "?initialPosition=earliest&messagePosition=2",
            messages=1,
        ),
    ),
    ("topics", "get-message-by-id"): (
        ["t", "-l", "7", "-e", "3"],
        Request("GET", "/admin/v2/persistent/public/default/t/ledger/7/entry/3", messages=1),
    ),
    ("topics", "subscriptions"): (
        ["t"],
        Request("GET", "/admin/v2/persistent/public/default/t/subscriptions"),
    ),
    ("topics", "create-subscription"): (
        ["t", "-s", "s1", "-m", "earliest"],
        Request("PUT", SUB, {"ledgerId": -1, "entryId": -1}),
    ),
    ("topics", "unsubscribe"): (["t", "-s", "s1"], Request("DELETE", f"{SUB}?force=false")),
    ("topics", "offload"): (
        ["t", "-m", "12:3"],
        Request(
            "PUT", "/admin/v2/persistent/public/default/t/offload", {"ledgerId": 12, "entryId": 3}
        ),
    ),
    ("topics", "offload-status"): (
        ["t"],
        Request("GET", "/admin/v2/persistent/public/default/t/offload"),
    ),
    ("topics", "skip"): (["t", "-s", "s1", "-n", "5"], Request("POST", f"{SUB}/skip/5")),
    ("topics", "clear-backlog"): (["t", "-s", "s1"], Request("POST", f"{SUB}/skip_all")),
    ("topics", "get-replicated-subscription-status"): (
        ["t", "-s", "s1"],
        Request("GET", f"{SUB}/replicatedSubscriptionStatus"),
    ),
    ("topics", "set-replicated-subscription-status"): (
        ["t", "-s", "s1", "--enable"],
        Request("POST", f"{SUB}/replicatedSubscriptionStatus", True),
    ),
    ("topics", "expire-messages"): (
        ["t", "-s", "s1", "-t", "1m"],
        Request("POST", f"{SUB}/expireMessages/60"),
    ),
    ("topics", "expire-messages-all-subscriptions"): (
        ["t", "-t", "30"],
        Request("POST", "/admin/v2/persistent/public/default/t/all_subscription/expireMessages/30"),
    ),
    ("topics", "reset-cursor"): (
        ["t", "-s", "s1", "-m", "7:3"],
        Request("POST", f"{SUB}/resetcursor", {"ledgerId": 7, "entryId": 3}),
    ),
    ("topics", "set-message-ttl"): (
        ["t", "-t", "2h"],
        Request("POST", "/admin/v2/persistent/public/default/t/messageTTL", 7200),
    ),
    ("topics", "set-retention"): (
        ["t", "-t", "-1", "-s", "-1"],
        Request(
            "POST",
            "/admin/v2/persistent/public/default/t/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        ),
    ),
    ("topics", "set-deduplication"): (
        ["t", "-e"],
        Request("POST", "/admin/v2/persistent/public/default/t/deduplicationEnabled", True),
    ),
}
CASES.update(
    {
        ("topics", "compact"): (
            ["t"],
            Request("PUT", "/admin/v2/persistent/public/default/t/compaction"),
        ),
        ("topics", "compaction-status"): (
            ["t"],
            Request("GET", "/admin/v2/persistent/public/default/t/compaction"),
        ),
        ("topics", "set-compaction-threshold"): (
            ["t", "-t", "100M"],
            Request(
                "POST", "/admin/v2/persistent/public/default/t/compactionThreshold", 100 * 1024**2
            ),
        ),
        ("namespaces", "set-compaction-threshold"): (
            ["public/ns", "--threshold", "1G"],
            Request("POST", f"{NSP}/compactionThreshold", 1024**3),
        ),
        ("namespaces", "get-compaction-threshold"): (
            ["public/ns"],
            Request("GET", f"{NSP}/compactionThreshold"),
        ),
        ("namespaces", "remove-compaction-threshold"): (
            ["public/ns"],
            Request("DELETE", f"{NSP}/compactionThreshold"),
        ),
    }
)
TOP = "/admin/v2/persistent/public/default/t"
CASES.update(
    {
        ("topics", "set-max-producers"): (
            ["t", "-p", "3"],
            Request("POST", f"{TOP}/maxProducers", 3),
        ),
        ("topics", "set-max-consumers"): (
            ["t", "-c", "0"],
            Request("POST", f"{TOP}/maxConsumers", 0),
        ),
        ("topics", "set-offload-policies"): (
            ["t", "-d", "aws-s3", "-b", "bk", "-t", "10M", "-dl", "60000"],
            Request(
                "POST",
                f"{TOP}/offloadPolicies",
                {
                    "managedLedgerOffloadDriver": "aws-s3",
                    "managedLedgerOffloadBucket": "bk",
                    "managedLedgerOffloadThresholdInBytes": 10 * 1024**2,
                    "managedLedgerOffloadDeletionLagInMillis": 60000,
                },
            ),
        ),
        ("namespaces", "set-max-producers-per-topic"): (
            ["public/ns", "-p", "5"],
            Request("POST", f"{NSP}/maxProducersPerTopic", 5),
        ),
        ("namespaces", "set-max-consumers-per-topic"): (
            ["public/ns", "-c", "6"],
            Request("POST", f"{NSP}/maxConsumersPerTopic", 6),
        ),
    }
)
for _what, _tail in (("producers", "maxProducersPerTopic"), ("consumers", "maxConsumersPerTopic")):
    CASES[("namespaces", f"get-max-{_what}-per-topic")] = (
        ["public/ns"],
        Request("GET", f"{NSP}/{_tail}"),
    )
    CASES[("namespaces", f"remove-max-{_what}-per-topic")] = (
        ["public/ns"],
        Request("DELETE", f"{NSP}/{_tail}"),
    )
for _name, _tail in (("message-ttl", "messageTTL"), ("retention", "retention"),
                     ("deduplication", "deduplicationEnabled"),
                     ("compaction-threshold", "compactionThreshold"),
                     ("max-producers", "maxProducers"), ("max-consumers", "maxConsumers"),
                     ("offload-policies", "offloadPolicies")):  # fmt: skip
    for _group in ("topics", "topicPolicies"):
        CASES[(_group, f"get-{_name}")] = (["t"], Request("GET", f"{TOP}/{_tail}"))
        CASES[(_group, f"remove-{_name}")] = (["t"], Request("DELETE", f"{TOP}/{_tail}"))
for _name in (
    "set-message-ttl", "set-retention", "set-deduplication", "set-compaction-threshold",
    "set-max-producers", "set-max-consumers", "set-offload-policies",
):  # fmt: skip
    CASES[("topicPolicies", _name)] = CASES[("topics", _name)]

for _group in ("topics", "topicPolicies"):
    CASES[(_group, "set-backlog-quota")] = (
        ["t", "-l", "1M", "-lt", "1h", "-p", "consumer_backlog_eviction", "-t", "message_age"],
        Request(
            "POST",
            f"{TOP}/backlogQuota?backlogQuotaType=message_age",
            {"limitSize": 1 << 20, "limitTime": 3600, "policy": "consumer_backlog_eviction"},
        ),
    )
    CASES[(_group, "remove-backlog-quota")] = (
        ["t"],
        Request("DELETE", f"{TOP}/backlogQuota?backlogQuotaType=destination_storage"),
    )
    CASES[(_group, "get-backlog-quotas")] = (
        ["t", "--applied"],
        Request("GET", f"{TOP}/backlogQuotaMap?applied=true"),
    )

CASES[("topics", "last-message-id")] = (["t"], Request("GET", f"{TOP}/lastMessageId"))
for _verb, _tail in (
    ("get-offload-threshold-in-seconds", "offloadThresholdInSeconds"),
    ("get-schema-validation-enforce", "schemaValidationEnforced"),
    ("get-schema-autoupdate-strategy", "isAllowAutoUpdateSchema"),
):
    CASES[("namespaces", _verb)] = (["public/ns"], Request("GET", f"{NSP}/{_tail}"))
RQ = "/admin/v2/resource-quotas"
CASES.update(
    {
        ("resource-quotas", "get"): (
            ["-n", "public/ns", "-b", "0x00000000_0x40000000"],
            Request("GET", f"{RQ}/public/ns/0x00000000_0x40000000"),
        ),
        ("resource-quotas", "set"): (
            ["-mi", "1", "-mo", "2", "-bi", "3", "-bo", "4", "-mem", "5"],
            Request(
                "POST",
                RQ,
                {
                    "msgRateIn": 1.0,
                    "msgRateOut": 2.0,
                    "bandwidthIn": 3.0,
                    "bandwidthOut": 4.0,
                    "memory": 5.0,
                    "dynamic": False,
                },
            ),
        ),
        ("resource-quotas", "reset-namespace-bundle-quota"): (
            ["-n", "public/ns", "-b", "0x00000000_0x40000000"],
            Request("DELETE", f"{RQ}/public/ns/0x00000000_0x40000000"),
        ),
    }
)
TXN = "/admin/v3/transactions"
CASES.update(
    {
        ("transactions", "coordinator-stats"): (
            ["-c", "0"],
            Request("GET", f"{TXN}/coordinatorStats?coordinatorId=0"),
        ),
        ("transactions", "transaction-metadata"): (
            ["-m", "0", "-l", "7"],
            Request("GET", f"{TXN}/transactionMetadata/0/7"),
        ),
        ("transactions", "slow-transactions"): (
            ["-t", "5m"],
            Request("GET", f"{TXN}/slowTransactions/300000"),
        ),
        ("transactions", "transaction-buffer-stats"): (
            ["acme/ns/t"],
            Request("GET", f"{TXN}/transactionBufferStats/acme/ns/t"),
        ),
        ("transactions", "transaction-in-buffer-stats"): (
            ["acme/ns/t", "-m", "0", "-l", "7"],
            Request("GET", f"{TXN}/transactionInBufferStats/acme/ns/t/0/7"),
        ),
        ("transactions", "pending-ack-stats"): (
            ["acme/ns/t", "-s", "sub 1"],
            Request("GET", f"{TXN}/pendingAckStats/acme/ns/t/sub%201"),
        ),
        ("transactions", "transaction-in-pending-ack-stats"): (
            ["acme/ns/t", "--sub-name", "s", "-m", "0", "-l", "7"],
            Request("GET", f"{TXN}/transactionInPendingAckStats/acme/ns/t/s/0/7"),
        ),
        ("transactions", "abort-transaction"): (
            ["-m", "1", "-l", "2"],
            Request("POST", f"{TXN}/abortTransaction/1/2"),
        ),
    }
)

SCHEMA_FILE = str(pathlib.Path(__file__).with_name("schema-payload.json"))
SCHEMA_PAYLOAD = json.loads(pathlib.Path(SCHEMA_FILE).read_text())
SCH = "/admin/v2/schemas/public/default/t"
CASES.update(
    {
        ("schemas", "get"): (["t"], Request("GET", f"{SCH}/schema")),
        ("schemas", "upload"): (
            ["t", "-f", SCHEMA_FILE],
            Request("POST", f"{SCH}/schema", SCHEMA_PAYLOAD),
        ),
        ("schemas", "delete"): (
            ["acme/ns/t"],
            Request("DELETE", "/admin/v2/schemas/acme/ns/t/schema"),
        ),
        ("schemas", "compatibility"): (
            ["t", "-f", SCHEMA_FILE],
            Request("POST", f"{SCH}/compatibility", SCHEMA_PAYLOAD),
        ),
        ("namespaces", "set-schema-compatibility-strategy"): (
            ["public/ns", "-c", "BACKWARD"],
            Request("PUT", f"{NSP}/schemaCompatibilityStrategy", "BACKWARD"),
        ),
        ("namespaces", "get-schema-compatibility-strategy"): (
            ["public/ns"],
            Request("GET", f"{NSP}/schemaCompatibilityStrategy"),
        ),
        ("namespaces", "set-schema-autoupdate-strategy"): (
            ["public/ns", "-d"],
            Request("POST", f"{NSP}/isAllowAutoUpdateSchema", False),
        ),
        ("namespaces", "set-schema-validation-enforce"): (
            ["public/ns", "-e"],
            Request("POST", f"{NSP}/schemaValidationEnforced", True),
        ),
    }
)


FN = "/admin/v3/functions/public/default"
FN_PY = pathlib.Path(__file__).parents[2] / "integration/functions/examples/exclamation_function.py"
CASES.update(
    {
        ("functions", "create"): (
            [
                "--py",
                str(FN_PY),
                "--classname",
                "exclamation_function.ExclamationFunction",
                "--inputs",
                "a, b",
                "--output",
                "out",
                "--parallelism",
                "2",
                "--processing-guarantees",
                "EFFECTIVELY_ONCE",
                "--user-config",
                '{"k": 1}',
                "--subs-position",
                "Earliest",
                "--cpu",
                "0.5",
            ],
            Request(
                "POST",
                f"{FN}/ExclamationFunction",
                form=(
                    FormField(
                        "functionConfig",
                        json.dumps(
                            {
                                "className": "exclamation_function.ExclamationFunction",
                                "output": "out",
                                "processingGuarantees": "EFFECTIVELY_ONCE",
                                "parallelism": 2,
                                "subscriptionPosition": "Earliest",
                                "inputs": ["a", "b"],
                                "userConfig": {"k": 1},
                                "resources": {"cpu": 0.5},
                                "tenant": "public",
                                "namespace": "default",
                                "name": "ExclamationFunction",
                                "runtime": "PYTHON",
                                "py": "exclamation_function.py",
                            }
                        ).encode(),
                    ),
                    FormField(
                        "data",
                        FN_PY.read_bytes(),
                        "exclamation_function.py",
                        "application/octet-stream",
                    ),
                ),
            ),
        ),
        ("functions", "update"): (
            ["--fqfn", "t/n/f", "--parallelism", "3"],
            Request(
                "PUT",
                "/admin/v3/functions/t/n/f",
                form=(
                    FormField(
                        "functionConfig",
                        json.dumps(
                            {
                                "parallelism": 3,
                                "tenant": "t",
                                "namespace": "n",
                                "name": "f",
                                "runtime": "PYTHON",
                            }
                        ).encode(),
                    ),
                ),
            ),
        ),
        ("functions", "get"): (["--name", "f"], Request("GET", f"{FN}/f")),
        ("functions", "delete"): (
            ["--fqfn", "a/b/f"],
            Request("DELETE", "/admin/v3/functions/a/b/f"),
        ),
        ("functions", "list"): (
            ["--tenant", "acme", "--namespace", "ns"],
            Request("GET", "/admin/v3/functions/acme/ns"),
        ),
        ("functions", "start"): (["--name", "f"], Request("POST", f"{FN}/f/start")),
        ("functions", "stop"): (
            ["--name", "f", "--instance-id", "1"],
            Request("POST", f"{FN}/f/1/stop"),
        ),
        ("functions", "restart"): (["--name", "f"], Request("POST", f"{FN}/f/restart")),
        ("functions", "status"): (["--name", "f"], Request("GET", f"{FN}/f/status")),
        ("functions", "stats"): (
            ["--name", "f", "--instance-id", "0"],
            Request("GET", f"{FN}/f/0/stats"),
        ),
        ("functions", "querystate"): (
            ["--name", "f", "-k", "a b"],
            Request("GET", f"{FN}/f/state/a%20b"),
        ),
        ("functions", "trigger"): (
            ["--name", "f", "--trigger-value", "hi", "--topic", "in"],
            Request(
                "POST",
                f"{FN}/f/trigger",
                form=(
                    FormField("data", b"hi", content_type="text/plain"),
                    FormField("topic", b"in", content_type="text/plain"),
                ),
            ),
        ),
        ("functions", "putstate"): (
            ["--name", "f", "-s", '{"key": "k", "numberValue": 3}'],
            Request(
                "POST",
                f"{FN}/f/state/k",
                form=(FormField("state", b'{"key": "k", "numberValue": 3}'),),
            ),
        ),
    }
)


def test_function_names_and_packages_are_checked(tmp_path: pathlib.Path) -> None:
    for argv, message in (
        (["functions", "get"], "name is required"),
        (["functions", "get", "--fqfn", "a/b"], "tenant/namespace/name"),
        (["functions", "get", "--fqfn", "a/b/c", "--name", "c"], "not both"),
        (["functions", "create", "--name", "f", "--classname", "m.C"], "--py is required"),
        (["functions", "create", "--name", "f", "--py", str(tmp_path / "none.py")], "--py"),
        (["functions", "create", "--py", str(FN_PY), "--user-config", "[1]"], "JSON object"),
    ):
        with pytest.raises(admin_cli.client.AdminCliError, match=message):
            commands.request_for(parse(*argv))


def test_schema_get_versions_and_bad_files(tmp_path: pathlib.Path) -> None:
    assert commands.request_for(parse("schemas", "get", "t", "-v", "3")).path == f"{SCH}/schema/3"
    assert commands.request_for(parse("schemas", "get", "t", "-a")).path == f"{SCH}/schemas"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for path, message in ((str(bad), "not JSON"), (str(tmp_path / "none"), "cannot read")):
        with pytest.raises(admin_cli.client.AdminCliError, match=message):
            commands.request_for(parse("schemas", "upload", "t", "-f", path))
    with pytest.raises(admin_cli.client.AdminCliError, match="persistent topics"):
        commands.request_for(parse("schemas", "get", "non-persistent://a/b/c"))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="magnetar admin")
    commands.build_parser(parser)
    return parser.parse_args(list(argv))


def test_every_verb_has_a_case() -> None:
    assert set(CASES) == set(commands.VERBS)


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: " ".join(k))
def test_verb_builds_the_pulsar_request(key: tuple[str, str]) -> None:
    argv, expected = CASES[key]
    assert commands.request_for(parse(*key, *argv)) == expected


def test_reset_cursor_by_time_is_now_minus_the_duration() -> None:
    import time

    request = commands.request_for(parse("topics", "reset-cursor", "t", "-s", "s1", "-t", "1h"))
    ts = int(request.path.rsplit("/", 1)[1])
    assert abs(ts - (time.time() - 3600) * 1000) < 5000
    assert request.body is NO_BODY


def test_create_subscription_defaults_to_latest() -> None:
    request = commands.request_for(parse("topics", "create-subscription", "t", "-s", "x"))
    assert request.body == {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["topics", "stats", "non-persistent://acme/ns/t"],
            Request("GET", "/admin/v2/non-persistent/acme/ns/t/stats"),
        ),
        (
            ["topics", "list", "acme/ns", "-td", "non-persistent"],
            Request("GET", "/admin/v2/non-persistent/acme/ns"),
        ),
        (
            ["topics", "list-partitioned-topics", "acme/ns", "--topic-domain", "non-persistent"],
            Request("GET", "/admin/v2/non-persistent/acme/ns/partitioned"),
        ),
        (
            ["topics", "create-partitioned-topic", "non-persistent://acme/ns/p", "-p", "3"],
            Request("PUT", "/admin/v2/non-persistent/acme/ns/p/partitions", 3),
        ),
        (
            ["topics", "unload", "non-persistent://acme/ns/t"],
            Request("PUT", "/admin/v2/non-persistent/acme/ns/t/unload"),
        ),
    ],
)
def test_non_persistent_names_reach_the_non_persistent_paths(
    argv: list[str], expected: Request
) -> None:
    assert commands.request_for(parse(*argv)) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["namespaces", "set-retention", "public/ns", "--time", "soon", "--size", "1G"],
        ["namespaces", "set-retention", "public/ns", "--time", "1h"],
        ["namespaces", "set-deduplication", "public/ns"],
        ["topics", "create-partitioned-topic", "t", "-p", "0"],
        ["topics", "skip", "t", "-s", "s", "-n", "-1"],
        ["topics", "reset-cursor", "t", "-s", "s"],
        ["topics", "reset-cursor", "t", "-s", "s", "-m", "x:y"],
        ["topics", "fly"],
        ["galaxies", "list"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topics", "stats", "a/b/c/d"], "invalid topic name"),
        (["topics", "stats", "kafka://a/b/c"], "invalid topic name"),
        (["namespaces", "policies", "justone"], "invalid namespace"),
        (["tenants", "get", "a/b"], "invalid tenant name"),
        (
            ["topics", "set-replicated-subscription-status", "t", "-s", "s"],
            "one of --enable and --disable is required",
        ),
    ],
)
def test_bad_names_exit_2_before_any_request(argv: list[str], message: str) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        status = admin_cli.run(parse("--admin-url", "http://127.0.0.1:9", *argv))
    assert status == 2 and message in err.getvalue()


def test_conversions() -> None:
    assert convert.seconds("90") == 90 and convert.seconds("2w") == 1_209_600
    assert convert.seconds("-1") == -1
    assert convert.size_bytes("512k") == 512 << 10 and convert.size_bytes("3") == 3
    assert convert.size_bytes("10GB") == 10 << 30
    assert convert.topic_path("non-persistent://t/n/x") == "non-persistent/t/n/x"
    assert convert.message_id("1:2:3") == {"ledgerId": 1, "entryId": 2, "partitionIndex": 3}


# --- the HTTP client, against a tiny local server ----------------------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    with admin_echo.brokers(1) as urls:
        yield urls[0]


def test_client_follows_redirects_with_method_and_body(server: str) -> None:
    client = Client.of(server)
    answer = client.call(Request("POST", "/moved", 5))
    assert (answer["method"], answer["body"]) == ("POST", "5")


def test_http_errors_print_status_and_reason(server: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = admin_cli.run(parse("--admin-url", server, "topics", "stats", "t"))
    assert status == 0  # /admin/v2/persistent/... answered by the echo
    with redirect_stdout(out), redirect_stderr(err):
        status = admin_cli.main(["--admin-url", server + "/admin/v2/missing", "clusters", "list"])
    assert status == 1
    assert err.getvalue().strip() == "magnetar admin: 404 Topic not found"


def test_unreachable_broker_is_a_clean_error() -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        status = admin_cli.main(["--admin-url", "http://127.0.0.1:9", "clusters", "list"])
    assert status == 1 and "cannot reach" in err.getvalue()


def test_the_cli_imports_nothing_of_the_broker() -> None:
    package = pathlib.Path(magnetar.admin_cli.__file__).parent
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("magnetar"):
                    # the client layer's admin client and the client side of security (TLS
                    # contexts, credentials) are allowed
                    assert name.startswith("magnetar.admin_cli") or name in (
                        "magnetar",
                        "magnetar.client",
                        "magnetar.client.admin",
                        "magnetar.security",
                        "magnetar.security.tls",
                        "magnetar.security.client_auth",
                    ), f"{source.name} imports {name}"
