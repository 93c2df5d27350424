"""Writes the Grafana dashboards the chart ships (helm/magnetar/files/dashboards/*.json,
one ConfigMap each with the Grafana sidecar's label: templates/grafana-dashboards-configmap.yaml).
``make dashboards`` runs it; tests/unit/test_dashboards.py fails when the files differ from
what this script writes, and tests/integration/observability evaluates every query of every
panel on a real Prometheus (docs/metrics.md, "Dashboards").

The queries read Apache Pulsar's metric names (docs/metrics.md), so these dashboards work on
a Pulsar cluster's metrics too, and Pulsar's community dashboards work on Magnetar's. Every
query variable is multi-valued with "All" selected by default: Grafana then substitutes the
regex of all its values, so a fresh dashboard shows every cluster, namespace, topic.
``namespace`` is always Pulsar's (``tenant/ns``), never the Kubernetes namespace.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "helm" / "magnetar" / "files" / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"

C = 'cluster=~"$cluster"'
NS = f'{C}, namespace=~"$namespace"'
T = f'{NS}, topic=~"$topic"'
S = f'{T}, subscription=~"$subscription"'


@dataclass
class Panel:
    title: str
    targets: list[tuple[str, str]]
    """(PromQL, legend) of each query."""
    unit: str = "short"
    description: str = ""


@dataclass
class Var:
    name: str
    query: str
    """``label_values(metric{selector}, label)``; the selector may name earlier variables."""
    label: str = ""


@dataclass
class Dashboard:
    file: str
    uid: str
    title: str
    description: str
    variables: list[Var]
    panels: list[Panel] = field(default_factory=list)


def _var(v: Var) -> dict[str, Any]:
    return {
        "name": v.name,
        "label": v.label or v.name,
        "type": "query",
        "datasource": DS,
        "query": {"query": v.query, "refId": f"{v.name}-var"},
        "definition": v.query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def _panel(p: Panel, n: int) -> dict[str, Any]:
    return {
        "id": n + 1,
        "type": "timeseries",
        "title": p.title,
        "description": p.description,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": 8 * (n // 2)},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(p.targets)
        ],
    }


def render(d: Dashboard) -> dict[str, Any]:
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["magnetar", "pulsar"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                },
                *(_var(v) for v in d.variables),
            ]
        },
        "panels": [_panel(p, n) for n, p in enumerate(d.panels)],
    }


CLUSTER = Var("cluster", "label_values(pulsar_broker_topics_count, cluster)")
NAMESPACE = Var("namespace", f"label_values(pulsar_topics_count{{{C}}}, namespace)")
TOPIC = Var("topic", f"label_values(pulsar_in_messages_total{{{NS}}}, topic)")
SUBSCRIPTION = Var(
    "subscription", f"label_values(pulsar_subscription_back_log{{{T}}}, subscription)"
)

WRITE_BUCKETS = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
SIZE_BUCKETS = ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")


def _buckets(metric: str, buckets: tuple[str, ...], sel: str, unit: str) -> list[tuple[str, str]]:
    out = []
    for b in buckets:
        name = f"{metric}_le_{b}"
        if b == "overflow" and metric != "pulsar_entry_size":
            name = f"{metric}_overflow"  # Pulsar's names: pulsar_entry_size_le_overflow
        legend = "overflow" if b == "overflow" else f"<= {b.replace('_', '.')} {unit}".strip()
        out.append((f"sum({name}{{{sel}}})", legend))
    return out


def _process(sel: str) -> list[Panel]:
    # summed per instance: a broker pod with --workers N has N processes, one series each
    # (label worker), on one scrape target
    return [
        Panel(
            "CPU (cores)",
            [
                (
                    f"sum by (instance) (rate(process_cpu_seconds_total{{{sel}}}[{RI}]))",
                    "{{instance}}",
                )
            ],
            "short",
        ),
        Panel(
            "Resident memory",
            [(f"sum by (instance) (process_resident_memory_bytes{{{sel}}})", "{{instance}}")],
            "bytes",
        ),
    ]


OVERVIEW = Dashboard(
    "magnetar-overview.json",
    "magnetar-overview",
    "Magnetar / Cluster overview",
    "Brokers, bookies, traffic, backlog and storage of each Pulsar cluster.",
    [CLUSTER],
    [
        Panel(
            "Brokers healthy",
            [(f"sum by (cluster) (pulsar_health{{{C}}})", "{{cluster}}")],
            description="Brokers holding their metadata session (pulsar_health).",
        ),
        Panel(
            "Bookies writable",
            [("sum(bookie_SERVER_STATUS)", "writable"), ("count(bookie_SERVER_STATUS)", "all")],
            description="bookie_SERVER_STATUS: 1 writable, 0 read-only.",
        ),
        Panel(
            "Topics, subscriptions, producers, consumers",
            [
                (f"sum by (cluster) (pulsar_broker_topics_count{{{C}}})", "topics {{cluster}}"),
                (
                    f"sum by (cluster) (pulsar_broker_subscriptions_count{{{C}}})",
                    "subscriptions {{cluster}}",
                ),
                (
                    f"sum by (cluster) (pulsar_broker_producers_count{{{C}}})",
                    "producers {{cluster}}",
                ),
                (
                    f"sum by (cluster) (pulsar_broker_consumers_count{{{C}}})",
                    "consumers {{cluster}}",
                ),
            ],
        ),
        Panel(
            "Messages /s",
            [
                (f"sum by (cluster) (pulsar_broker_rate_in{{{C}}})", "in {{cluster}}"),
                (f"sum by (cluster) (pulsar_broker_rate_out{{{C}}})", "out {{cluster}}"),
            ],
            "ops",
        ),
        Panel(
            "Throughput",
            [
                (f"sum by (cluster) (pulsar_broker_throughput_in{{{C}}})", "in {{cluster}}"),
                (f"sum by (cluster) (pulsar_broker_throughput_out{{{C}}})", "out {{cluster}}"),
            ],
            "Bps",
        ),
        Panel(
            "Backlog (messages)",
            [(f"sum by (cluster) (pulsar_broker_msg_backlog{{{C}}})", "{{cluster}}")],
        ),
        Panel(
            "Storage",
            [
                (f"sum by (cluster) (pulsar_broker_storage_size{{{C}}})", "stored {{cluster}}"),
                (
                    f"sum by (cluster) (pulsar_storage_offloaded_size{{{C}}})",
                    "offloaded {{cluster}}",
                ),
            ],
            "bytes",
        ),
        Panel(
            "Publish latency p99",
            [
                (
                    f'max by (cluster) (pulsar_broker_publish_latency{{{C}, quantile="0.99"}})',
                    "{{cluster}}",
                )
            ],
            "ms",
        ),
    ],
)

TOPICS = Dashboard(
    "magnetar-topic.json",
    "magnetar-topic",
    "Magnetar / Topics",
    "Traffic, storage, backlog and write latency of the selected topics (per partition).",
    [CLUSTER, NAMESPACE, TOPIC],
    [
        Panel(
            "Messages in /s",
            [(f"sum by (topic) (pulsar_rate_in{{{T}}})", "{{topic}}")],
            "ops",
        ),
        Panel(
            "Messages out /s",
            [(f"sum by (topic) (pulsar_rate_out{{{T}}})", "{{topic}}")],
            "ops",
        ),
        Panel(
            "Throughput in",
            [(f"sum by (topic) (pulsar_throughput_in{{{T}}})", "{{topic}}")],
            "Bps",
        ),
        Panel(
            "Throughput out",
            [(f"sum by (topic) (pulsar_throughput_out{{{T}}})", "{{topic}}")],
            "Bps",
        ),
        Panel(
            "Producers, consumers, subscriptions",
            [
                (f"sum(pulsar_producers_count{{{T}}})", "producers"),
                (f"sum(pulsar_consumers_count{{{T}}})", "consumers"),
                (f"sum(pulsar_subscriptions_count{{{T}}})", "subscriptions"),
            ],
        ),
        Panel(
            "Backlog (messages)",
            [(f"sum by (topic) (pulsar_msg_backlog{{{T}}})", "{{topic}}")],
        ),
        Panel(
            "Storage",
            [
                (f"sum by (topic) (pulsar_storage_size{{{T}}})", "stored {{topic}}"),
                (f"sum by (topic) (pulsar_storage_backlog_size{{{T}}})", "backlog {{topic}}"),
                (f"sum by (topic) (pulsar_storage_offloaded_size{{{T}}})", "offloaded {{topic}}"),
            ],
            "bytes",
        ),
        Panel(
            "Storage entries /s",
            [
                (f"sum by (topic) (pulsar_storage_write_rate{{{T}}})", "written {{topic}}"),
                (f"sum by (topic) (pulsar_storage_read_rate{{{T}}})", "read {{topic}}"),
            ],
            "ops",
        ),
        Panel(
            "Write latency (entries per bucket, last period)",
            _buckets("pulsar_storage_write_latency", WRITE_BUCKETS, T, "ms"),
            description="Managed-ledger add latency, from the add asked for to durable.",
        ),
        Panel(
            "Entry size (entries per bucket, last period)",
            _buckets("pulsar_entry_size", SIZE_BUCKETS, T, "bytes"),
        ),
        Panel(
            "Average write latency",
            [
                (
                    f"sum(pulsar_storage_write_latency_sum{{{T}}}) / 1000"
                    f" / sum(pulsar_storage_write_latency_count{{{T}}})",
                    "mean",
                )
            ],
            "ms",
        ),
        Panel(
            "Average message size",
            [(f"avg by (topic) (pulsar_average_msg_size{{{T}}})", "{{topic}}")],
            "bytes",
        ),
    ],
)

SUBSCRIPTIONS = Dashboard(
    "magnetar-subscriptions.json",
    "magnetar-subscriptions",
    "Magnetar / Subscriptions and consumer lag",
    "Backlog, dispatch and acknowledgement of each subscription; consumer-level series need "
    "exposeConsumerLevelMetricsInPrometheus=true.",
    [CLUSTER, NAMESPACE, TOPIC, SUBSCRIPTION],
    [
        Panel(
            "Backlog (messages)",
            [
                (
                    f"sum by (topic, subscription) (pulsar_subscription_back_log{{{S}}})",
                    "{{subscription}} {{topic}}",
                )
            ],
        ),
        Panel(
            "Backlog growth /s",
            [
                (
                    f"sum by (topic, subscription) "
                    f"(deriv(pulsar_subscription_back_log{{{S}}}[5m]))",
                    "{{subscription}} {{topic}}",
                )
            ],
            "ops",
            "Positive: the consumers fall behind.",
        ),
        Panel(
            "Dispatched and acknowledged /s",
            [
                (
                    f"sum by (subscription) (pulsar_subscription_msg_rate_out{{{S}}})",
                    "dispatched {{subscription}}",
                ),
                (
                    f"sum by (subscription) (pulsar_subscription_msg_ack_rate{{{S}}})",
                    "acknowledged {{subscription}}",
                ),
                (
                    f"sum by (subscription) (pulsar_subscription_msg_rate_redeliver{{{S}}})",
                    "redelivered {{subscription}}",
                ),
            ],
            "ops",
        ),
        Panel(
            "Throughput out",
            [
                (
                    f"sum by (subscription) (pulsar_subscription_msg_throughput_out{{{S}}})",
                    "{{subscription}}",
                )
            ],
            "Bps",
        ),
        Panel(
            "Unacknowledged and delayed",
            [
                (
                    f"sum by (subscription) (pulsar_subscription_unacked_messages{{{S}}})",
                    "unacked {{subscription}}",
                ),
                (
                    f"sum by (subscription) (pulsar_subscription_delayed{{{S}}})",
                    "delayed {{subscription}}",
                ),
                (
                    f"sum by (subscription) "
                    f"(pulsar_subscription_blocked_on_unacked_messages{{{S}}})",
                    "blocked {{subscription}}",
                ),
            ],
        ),
        Panel(
            "Consumers",
            [
                (
                    f"sum by (subscription) (pulsar_subscription_consumers_count{{{S}}})",
                    "{{subscription}}",
                )
            ],
        ),
        Panel(
            "Since the last acknowledgement",
            [
                (
                    f"time() - max by (topic, subscription) "
                    f"(pulsar_subscription_last_acked_timestamp{{{S}}}) / 1000",
                    "{{subscription}} {{topic}}",
                )
            ],
            "s",
        ),
        Panel(
            "Consumer permits and unacked",
            [
                (
                    f"sum by (subscription, consumer_name) "
                    f"(pulsar_consumer_available_permits{{{S}}})",
                    "permits {{consumer_name}}",
                ),
                (
                    f"sum by (subscription, consumer_name) "
                    f"(pulsar_consumer_unacked_messages{{{S}}})",
                    "unacked {{consumer_name}}",
                ),
            ],
        ),
    ],
)

B = f'{C}, instance=~"$broker"'
BROKERS = Dashboard(
    "magnetar-broker.json",
    "magnetar-broker",
    "Magnetar / Brokers",
    "Each broker: load, latency, connections, lookups, metadata store, entry cache, process.",
    [CLUSTER, Var("broker", f"label_values(pulsar_broker_topics_count{{{C}}}, instance)")],
    [
        Panel(
            "Topics and connections",
            [
                (f"sum by (instance) (pulsar_broker_topics_count{{{B}}})", "topics {{instance}}"),
                (
                    f"sum by (instance) (pulsar_active_connections{{{B}}})",
                    "connections {{instance}}",
                ),
            ],
        ),
        Panel(
            "Messages /s",
            [
                (f"sum by (instance) (pulsar_broker_rate_in{{{B}}})", "in {{instance}}"),
                (f"sum by (instance) (pulsar_broker_rate_out{{{B}}})", "out {{instance}}"),
            ],
            "ops",
        ),
        Panel(
            "Throughput",
            [
                (f"sum by (instance) (pulsar_broker_throughput_in{{{B}}})", "in {{instance}}"),
                (f"sum by (instance) (pulsar_broker_throughput_out{{{B}}})", "out {{instance}}"),
            ],
            "Bps",
        ),
        Panel(
            "Publish latency",
            [
                (
                    f'max by (instance) (pulsar_broker_publish_latency{{{B}, quantile="{q}"}})',
                    f"p{q[2:]} {{{{instance}}}}",
                )
                for q in ("0.5", "0.99", "0.999")
            ],
            "ms",
        ),
        Panel(
            "Lookups /s",
            [
                (
                    f"sum by (instance) (rate(pulsar_broker_lookup_{k}_total{{{B}}}[{RI}]))",
                    f"{k} {{{{instance}}}}",
                )
                for k in ("answers", "redirects", "failures")
            ],
            "ops",
        ),
        Panel(
            "Lookup and topic load latency p99",
            [
                (
                    f'max by (instance) (pulsar_broker_lookup{{{B}, quantile="0.99"}})',
                    "lookup {{instance}}",
                ),
                (
                    f'max by (instance) (pulsar_topic_load_times{{{B}, quantile="0.99"}})',
                    "topic load {{instance}}",
                ),
            ],
            "ms",
        ),
        Panel(
            "Connections opened and closed",
            [
                (
                    f"sum by (instance) (pulsar_connection_created_total_count{{{B}}})",
                    "created {{instance}}",
                ),
                (
                    f"sum by (instance) (pulsar_connection_closed_total_count{{{B}}})",
                    "closed {{instance}}",
                ),
            ],
        ),
        Panel(
            "Metadata store latency p99",
            [
                (
                    "histogram_quantile(0.99, sum by (instance, type, le) "
                    f"(rate(pulsar_metadata_store_ops_latency_ms_bucket{{{B}}}[{RI}])))",
                    "{{type}} {{instance}}",
                )
            ],
            "ms",
        ),
        Panel(
            "Entry cache",
            [
                (f"sum by (instance) (pulsar_ml_cache_used_size{{{B}}})", "size {{instance}}"),
            ],
            "bytes",
        ),
        Panel(
            "Entry cache hits and misses /s",
            [
                (f"sum by (instance) (pulsar_ml_cache_hits_rate{{{B}}})", "hits {{instance}}"),
                (
                    f"sum by (instance) (pulsar_ml_cache_misses_rate{{{B}}})",
                    "misses {{instance}}",
                ),
            ],
            "ops",
        ),
        Panel(
            "Managed-ledger adds and errors",
            [
                (
                    f"sum by (instance) (pulsar_ml_AddEntryMessagesRate{{{B}}})",
                    "adds/s {{instance}}",
                ),
                (
                    f"sum by (instance) (pulsar_ml_AddEntryErrors{{{B}}})",
                    "add errors {{instance}}",
                ),
                (
                    f"sum by (instance) (pulsar_ml_ReadEntriesErrors{{{B}}})",
                    "read errors {{instance}}",
                ),
            ],
        ),
        *_process('instance=~"$broker"'),
        Panel(
            "Python GC collections /s",
            [
                (
                    f'sum by (instance) (rate(python_gc_collections_total{{instance=~"$broker"}}'
                    f"[{RI}]))",
                    "{{instance}}",
                )
            ],
            "ops",
        ),
    ],
)

K = 'instance=~"$bookie"'


def _p99(metric: str, sel: str) -> str:
    return f"histogram_quantile(0.99, sum by (instance, le) (rate({metric}_bucket{{{sel}}}[{RI}])))"


BOOKIES = Dashboard(
    "magnetar-bookies.json",
    "magnetar-bookies",
    "Magnetar / Bookies",
    "Each bookie: state, disk, request latency, journal, caches; autorecovery.",
    [Var("bookie", "label_values(bookie_SERVER_STATUS, instance)")],
    [
        Panel(
            "Writable (1) or read-only (0)",
            [(f"bookie_SERVER_STATUS{{{K}}}", "{{instance}}")],
        ),
        Panel(
            "Ledger disk usage",
            [(f"bookie_ledger_dir_usage_ratio{{{K}}}", "{{instance}}")],
            "percentunit",
        ),
        Panel("Add request p99", [(_p99("bookie_ADD_ENTRY", K), "{{instance}}")], "s"),
        Panel("Read request p99", [(_p99("bookie_READ_ENTRY", K), "{{instance}}")], "s"),
        Panel(
            "Journal sync p99",
            [(_p99("bookie_journal_JOURNAL_SYNC", K), "{{instance}}")],
            "s",
            "One group commit: a write and an fdatasync.",
        ),
        Panel(
            "Entries added and read /s",
            [
                (f"rate(bookie_add_entries_total{{{K}}}[{RI}])", "added {{instance}}"),
                (f"rate(bookie_read_entries_total{{{K}}}[{RI}])", "read {{instance}}"),
                (f"rate(bookie_add_failures_total{{{K}}}[{RI}])", "refused {{instance}}"),
            ],
            "ops",
        ),
        Panel(
            "Bytes added /s",
            [(f"rate(bookie_add_bytes_total{{{K}}}[{RI}])", "{{instance}}")],
            "Bps",
        ),
        Panel(
            "Journal queue",
            [
                (f"bookie_journal_queue_size{{{K}}}", "entries {{instance}}"),
                (f"rate(bookie_journal_fsyncs_total{{{K}}}[{RI}])", "fsyncs/s {{instance}}"),
            ],
        ),
        Panel(
            "Write and read caches",
            [
                (f"bookie_write_cache_size{{{K}}}", "write cache {{instance}}"),
                (f"bookie_read_cache_size{{{K}}}", "read cache {{instance}}"),
            ],
            "bytes",
        ),
        Panel(
            "Read cache hit ratio",
            [
                (
                    f"rate(bookie_read_cache_hits_total{{{K}}}[{RI}]) / "
                    f"(rate(bookie_read_cache_hits_total{{{K}}}[{RI}]) + "
                    f"rate(bookie_read_cache_misses_total{{{K}}}[{RI}]))",
                    "{{instance}}",
                )
            ],
            "percentunit",
        ),
        Panel(
            "Ledgers and entry logs",
            [
                (f"bookie_ledgers_count{{{K}}}", "ledgers {{instance}}"),
                (f"bookie_entry_log_count{{{K}}}", "entry logs {{instance}}"),
            ],
        ),
        Panel(
            "Under-replicated ledgers",
            [
                ("max(autorecovery_under_replicated_ledgers)", "under-replicated"),
                ("sum(autorecovery_auditor_elected)", "auditors elected"),
            ],
            description="From bookies running autorecovery (or `magnetar autorecovery`).",
        ),
        *_process(K),
    ],
)

E = 'instance=~"$etcd"'
ETCD = Dashboard(
    "magnetar-etcd.json",
    "magnetar-etcd",
    "Magnetar / etcd",
    "The metadata store: etcd's own metrics and the brokers' view of it.",
    [CLUSTER, Var("etcd", "label_values(etcd_server_has_leader, instance)")],
    [
        Panel("Has a leader", [(f"etcd_server_has_leader{{{E}}}", "{{instance}}")]),
        Panel(
            "Leader changes (1h)",
            [(f"increase(etcd_server_leader_changes_seen_total{{{E}}}[1h])", "{{instance}}")],
        ),
        Panel(
            "Database size",
            [
                (f"etcd_mvcc_db_total_size_in_bytes{{{E}}}", "allocated {{instance}}"),
                (f"etcd_mvcc_db_total_size_in_use_in_bytes{{{E}}}", "in use {{instance}}"),
            ],
            "bytes",
        ),
        Panel(
            "WAL fsync and backend commit p99",
            [
                (_p99("etcd_disk_wal_fsync_duration_seconds", E), "WAL fsync {{instance}}"),
                (_p99("etcd_disk_backend_commit_duration_seconds", E), "commit {{instance}}"),
            ],
            "s",
        ),
        Panel(
            "Proposals",
            [
                (
                    f"rate(etcd_server_proposals_committed_total{{{E}}}[{RI}])",
                    "committed/s {{instance}}",
                ),
                (
                    f"rate(etcd_server_proposals_failed_total{{{E}}}[{RI}])",
                    "failed/s {{instance}}",
                ),
                (f"etcd_server_proposals_pending{{{E}}}", "pending {{instance}}"),
            ],
        ),
        Panel(
            "gRPC requests /s",
            [
                (
                    f"sum by (grpc_method) (rate(grpc_server_handled_total{{{E}}}[{RI}]))",
                    "{{grpc_method}}",
                )
            ],
            "ops",
        ),
        Panel(
            "Brokers' metadata operations p99",
            [
                (
                    "histogram_quantile(0.99, sum by (type, status, le) "
                    f"(rate(pulsar_metadata_store_ops_latency_ms_bucket{{{C}}}[{RI}])))",
                    "{{type}} {{status}}",
                )
            ],
            "ms",
        ),
        Panel(
            "Brokers' metadata writes",
            [
                (
                    f"sum by (instance) (rate(pulsar_metadata_store_put_bytes_total{{{C}}}[{RI}]))",
                    "{{instance}}",
                )
            ],
            "Bps",
        ),
    ],
)

P = 'instance=~"$proxy"'
PROXY = Dashboard(
    "magnetar-proxy.json",
    "magnetar-proxy",
    "Magnetar / Proxy",
    "Client connections and relayed traffic of each proxy (Pulsar's pulsar_proxy_* series).",
    [Var("proxy", "label_values(pulsar_proxy_active_connections, instance)")],
    [
        Panel(
            "Active connections",
            [(f"pulsar_proxy_active_connections{{{P}}}", "{{instance}}")],
        ),
        Panel(
            "Connections accepted and rejected /s",
            [
                (
                    f"rate(pulsar_proxy_new_connections_total{{{P}}}[{RI}])",
                    "accepted {{instance}}",
                ),
                (
                    f"rate(pulsar_proxy_rejected_connections_total{{{P}}}[{RI}])",
                    "rejected {{instance}}",
                ),
            ],
            "ops",
        ),
        Panel(
            "Relayed reads /s",
            [(f"rate(pulsar_proxy_binary_ops_total{{{P}}}[{RI}])", "{{instance}}")],
            "ops",
        ),
        Panel(
            "Relayed bytes /s",
            [(f"rate(pulsar_proxy_binary_bytes_total{{{P}}}[{RI}])", "{{instance}}")],
            "Bps",
        ),
        *_process(P),
    ],
)

OFF = 'namespace=~"$namespace", topic=~"$topic"'
OFFLOAD = Dashboard(
    "magnetar-offload.json",
    "magnetar-offload",
    "Magnetar / Offload",
    "Tiered storage: what is offloaded, how fast, what fails, reads from the object store.",
    [
        Var("namespace", "label_values(brk_ledgeroffloader_offload_error_total, namespace)"),
        Var(
            "topic",
            'label_values(brk_ledgeroffloader_offload_error_total{namespace=~"$namespace"}, topic)',
        ),
    ],
    [
        Panel(
            "Offloaded size",
            [(f"sum by (topic) (pulsar_storage_offloaded_size{{{OFF}}})", "{{topic}}")],
            "bytes",
        ),
        Panel(
            "Offload rate",
            [
                (
                    f"sum by (topic) (rate(magnetar_offload_bytes_total{{{OFF}}}[{RI}]))",
                    "{{topic}}",
                ),
                (
                    f"sum by (topic) (brk_ledgeroffloader_offload_rate{{{OFF}}})",
                    "last minute {{topic}}",
                ),
            ],
            "Bps",
        ),
        Panel(
            "Offload failures (1h)",
            [
                (
                    "sum by (topic) "
                    f"(increase(brk_ledgeroffloader_offload_error_total{{{OFF}}}[1h]))",
                    "attempts {{topic}}",
                ),
                (
                    "sum by (topic) "
                    f"(increase(brk_ledgeroffloader_write_storage_error_total{{{OFF}}}[1h]))",
                    "object store writes {{topic}}",
                ),
            ],
        ),
        Panel(
            "Reading ledgers to offload (mean)",
            [
                (
                    f"sum by (topic) (brk_ledgeroffloader_read_ledger_latency_sum{{{OFF}}}) / "
                    f"sum by (topic) (brk_ledgeroffloader_read_ledger_latency_count{{{OFF}}})",
                    "{{topic}}",
                )
            ],
            "µs",
        ),
        Panel(
            "Read from the object store",
            [
                (
                    f"sum by (topic) (rate(magnetar_offload_read_bytes_total{{{OFF}}}[{RI}]))",
                    "{{topic}}",
                )
            ],
            "Bps",
        ),
        Panel(
            "Object store read latency (mean)",
            [
                (
                    f"sum by (topic) (brk_ledgeroffloader_read_offload_data_latency_sum{{{OFF}}})"
                    " / sum by (topic) "
                    f"(brk_ledgeroffloader_read_offload_data_latency_count{{{OFF}}})",
                    "data {{topic}}",
                ),
                (
                    f"sum by (topic) (brk_ledgeroffloader_read_offload_index_latency_sum{{{OFF}}})"
                    " / sum by (topic) "
                    f"(brk_ledgeroffloader_read_offload_index_latency_count{{{OFF}}})",
                    "index {{topic}}",
                ),
            ],
            "µs",
        ),
        Panel(
            "Read cache",
            [
                ("sum by (instance) (magnetar_offload_read_cache_bytes)", "size {{instance}}"),
            ],
            "bytes",
        ),
        Panel(
            "Read cache hits and misses /s",
            [
                (
                    f"sum by (instance) (rate(magnetar_offload_read_cache_hits_total[{RI}]))",
                    "hits {{instance}}",
                ),
                (
                    f"sum by (instance) (rate(magnetar_offload_read_cache_misses_total[{RI}]))",
                    "misses {{instance}}",
                ),
            ],
            "ops",
        ),
    ],
)

TRANSACTIONS = Dashboard(
    "magnetar-transactions.json",
    "magnetar-transactions",
    "Magnetar / Transactions",
    "The transaction buffers of the selected topics (transactionCoordinatorEnabled=true).",
    [CLUSTER, NAMESPACE, TOPIC],
    [
        Panel(
            "Open transactions",
            [(f"sum by (topic) (pulsar_txn_tb_active_total{{{T}}})", "{{topic}}")],
        ),
        Panel(
            "Committed and aborted /s",
            [
                (
                    f"sum by (topic) (rate(pulsar_txn_tb_committed_total{{{T}}}[{RI}]))",
                    "committed {{topic}}",
                ),
                (
                    f"sum by (topic) (rate(pulsar_txn_tb_aborted_total{{{T}}}[{RI}]))",
                    "aborted {{topic}}",
                ),
            ],
            "ops",
        ),
        Panel(
            "Committed and aborted since the topic was loaded",
            [
                (f"sum(pulsar_txn_tb_committed_total{{{T}}})", "committed"),
                (f"sum(pulsar_txn_tb_aborted_total{{{T}}})", "aborted"),
            ],
        ),
        Panel(
            "END_TXN requests to other brokers pending",
            [
                (
                    f"sum by (instance) (pulsar_txn_tb_client_pending_requests{{{C}}})",
                    "{{instance}}",
                )
            ],
        ),
    ],
)

OP = 'instance=~"$operator"'
OPERATOR = Dashboard(
    "magnetar-operator.json",
    "magnetar-operator",
    "Magnetar / Operator",
    "The Kubernetes operator: reconcile passes, their duration, resources by phase, events.",
    [Var("operator", "label_values(magnetar_operator_reconciles_total, instance)")],
    [
        Panel(
            "Reconcile passes /s",
            [
                (
                    "sum by (kind, result) "
                    f"(rate(magnetar_operator_reconciles_total{{{OP}}}[{RI}]))",
                    "{{kind}} {{result}}",
                )
            ],
            "ops",
        ),
        Panel(
            "Reconcile duration p99",
            [
                (
                    "histogram_quantile(0.99, sum by (kind, le) "
                    f"(rate(magnetar_operator_reconcile_duration_seconds_bucket{{{OP}}}[{RI}])))",
                    "{{kind}}",
                )
            ],
            "s",
        ),
        Panel(
            "Resources by phase",
            [(f"sum by (kind, phase) (magnetar_operator_resources{{{OP}}})", "{{kind}} {{phase}}")],
        ),
        Panel(
            "Events posted (1h)",
            [
                (
                    "sum by (kind, type, reason) "
                    f"(increase(magnetar_operator_events_total{{{OP}}}[1h]))",
                    "{{kind}} {{type}} {{reason}}",
                )
            ],
        ),
        *_process(OP),
    ],
)

DASHBOARDS = (
    OVERVIEW,
    TOPICS,
    SUBSCRIPTIONS,
    BROKERS,
    BOOKIES,
    ETCD,
    PROXY,
    OFFLOAD,
    TRANSACTIONS,
    OPERATOR,
)


def text(d: Dashboard) -> str:
    return json.dumps(render(d), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    keep = {d.file for d in DASHBOARDS}
    for old in OUT.glob("*.json"):
        if old.name not in keep:
            old.unlink()
    for d in DASHBOARDS:
        (OUT / d.file).write_text(text(d))
    print(f"wrote {len(DASHBOARDS)} dashboards to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
