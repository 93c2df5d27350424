"""Prometheus text for /metrics with Pulsar's topic metric names and labels.

Dashboards built for Pulsar read ``pulsar_in_messages_total{cluster, namespace, topic}``
and friends; this module renders the same series from the topics this broker serves.
Rendering walks the topics once per scrape; nothing is kept per message beyond the counters
the topics maintain anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from magnetar.broker.topic import Topic

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name, type, help
_TOPIC_SERIES: tuple[tuple[str, str, str], ...] = (
    ("pulsar_subscriptions_count", "gauge", "Subscriptions of the topic"),
    ("pulsar_producers_count", "gauge", "Producers of the topic"),
    ("pulsar_consumers_count", "gauge", "Consumers of the topic"),
    ("pulsar_rate_in", "gauge", "Messages published per second"),
    ("pulsar_rate_out", "gauge", "Messages dispatched per second"),
    ("pulsar_throughput_in", "gauge", "Bytes published per second"),
    ("pulsar_throughput_out", "gauge", "Bytes dispatched per second"),
    ("pulsar_in_messages_total", "counter", "Messages published"),
    ("pulsar_in_bytes_total", "counter", "Bytes published"),
    ("pulsar_out_messages_total", "counter", "Messages dispatched"),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched"),
    ("pulsar_storage_size", "gauge", "Bytes stored for the topic"),
    ("pulsar_storage_offloaded_size", "gauge", "Bytes of the topic offloaded to S3"),
    ("pulsar_msg_backlog", "gauge", "Messages not yet acknowledged, all subscriptions"),
)


_REPLICATION_SERIES: tuple[tuple[str, str, str], ...] = (
    ("pulsar_replication_rate_in", "msgRateIn", "Messages/s the remote's replicator publishes"),
    ("pulsar_replication_rate_out", "msgRateOut", "Messages/s replicated to the remote"),
    ("pulsar_replication_throughput_in", "msgThroughputIn", "Bytes/s from the remote's replicator"),
    ("pulsar_replication_throughput_out", "msgThroughputOut", "Bytes/s replicated to the remote"),
    ("pulsar_replication_backlog", "replicationBacklog", "Entries not yet replicated"),
    ("pulsar_replication_connected_count", "connected", "1 while connected to the remote"),
    ("pulsar_replication_delay_in_seconds", "replicationDelayInSeconds", "Oldest entry in flight"),
)
"""Pulsar's per-remote-cluster replication gauges (label ``remote_cluster``), from the topic
stats' ``replication`` section (docs/geo-replication.md)."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _f(stats: dict[str, Any], field: str) -> float:
    try:
        return float(stats.get(field, 0) or 0)
    except (TypeError, ValueError):
        return 0.0


def render(cluster: str, topics: Iterable[Topic]) -> str:
    series: dict[str, list[str]] = {name: [] for name, _, _ in _TOPIC_SERIES}
    sub_backlog: list[str] = []
    replication: dict[str, list[str]] = {name: [] for name, _, _ in _REPLICATION_SERIES}
    ns_topics: dict[str, int] = {}
    cl = _escape(cluster)
    for topic in topics:
        ns = topic.name.namespace_name
        ns_topics[ns] = ns_topics.get(ns, 0) + 1
        labels = f'cluster="{cl}",namespace="{_escape(ns)}",topic="{_escape(topic.full_name)}"'
        subs = topic.subscription_stats()
        consumers = 0
        out_rate = out_tp = out_msgs = out_bytes = backlog = 0.0
        for sub_name, st in subs.items():
            s = dict(st)
            c = s.get("consumers")
            consumers += len(c) if isinstance(c, list | tuple) else 0
            out_rate += _f(s, "msgRateOut")
            out_tp += _f(s, "msgThroughputOut")
            out_msgs += _f(s, "msgOutCounter")
            out_bytes += _f(s, "bytesOutCounter")
            b = _f(s, "msgBacklog")
            backlog += b
            sub_backlog.append(
                f'pulsar_subscription_back_log{{{labels},subscription="{_escape(sub_name)}"}} '
                f"{_num(int(b))}"
            )
        values: dict[str, float] = {
            "pulsar_subscriptions_count": len(subs),
            "pulsar_producers_count": len(topic.producers),
            "pulsar_consumers_count": consumers,
            "pulsar_rate_in": topic.rate_in,
            "pulsar_rate_out": out_rate,
            "pulsar_throughput_in": topic.throughput_in,
            "pulsar_throughput_out": out_tp,
            "pulsar_in_messages_total": topic.msg_in,
            "pulsar_in_bytes_total": topic.bytes_in,
            "pulsar_out_messages_total": int(out_msgs),
            "pulsar_out_bytes_total": int(out_bytes),
            "pulsar_storage_size": topic.storage_size,
            "pulsar_storage_offloaded_size": topic.offloaded_size,
            "pulsar_msg_backlog": int(backlog),
        }
        for name, value in values.items():
            series[name].append(f"{name}{{{labels}}} {_num(value)}")
        for remote, repl in topic.replication_stats().items():
            remote_labels = f'{labels},remote_cluster="{_escape(remote)}"'
            for name, field, _ in _REPLICATION_SERIES:
                value = repl.get(field)
                number = int(value) if isinstance(value, bool) else _f(repl, field)
                replication[name].append(f"{name}{{{remote_labels}}} {_num(number)}")
    lines: list[str] = []
    lines.append("# HELP pulsar_topics_count Topics served by this broker")
    lines.append("# TYPE pulsar_topics_count gauge")
    for ns, count in sorted(ns_topics.items()):
        lines.append(f'pulsar_topics_count{{cluster="{cl}",namespace="{_escape(ns)}"}} {count}')
    for name, kind, help_text in _TOPIC_SERIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(series[name])
    lines.append("# HELP pulsar_subscription_back_log Messages not yet acknowledged")
    lines.append("# TYPE pulsar_subscription_back_log gauge")
    lines.extend(sub_backlog)
    for name, _, help_text in _REPLICATION_SERIES:
        if replication[name]:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(replication[name])
    return "\n".join(lines) + "\n"
