"""The broker's ``/metrics``: Pulsar's metric names, types, labels and units.

Dashboards and alert rules written for Apache Pulsar read ``pulsar_in_messages_total{cluster,
namespace, topic}``, ``pulsar_subscription_back_log``, ``pulsar_storage_write_latency_le_*``
and friends; :class:`BrokerCollector` yields the same series, computed at scrape time from
what the topics, subscriptions, managed ledgers and the service count anyway (the hot paths
only add integers, once per entry). docs/metrics.md lists every series with its Pulsar
counterpart and what Magnetar deliberately does not export.

As in Pulsar: the topic series are gauges (even those named ``*_total``), every series
carries the ``cluster`` label, ``exposeTopicLevelMetricsInPrometheus=false`` sums the topic
series per namespace, ``exposeConsumerLevelMetricsInPrometheus=true`` adds the
``pulsar_consumer_*`` series, and the latency/size buckets count the last statistics period
(``magnetar.common.stats``). :func:`render` writes the Prometheus text format, or OpenMetrics
when the scraper's ``Accept`` header asks for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client import exposition as text_exposition
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om_exposition
from prometheus_client.openmetrics import parser as om_parser
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

import magnetar
from magnetar.broker.config import BrokerConfig
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.service import BrokerCounters
from magnetar.broker.topic import PersistentTopic, Topic
from magnetar.broker.transactions import remote
from magnetar.common import stats as buckets
from magnetar.managed_ledger.ledger import ManagedLedgerImpl

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format, as Pulsar answers it."""

OPENMETRICS = "application/openmetrics-text"
"""The ``Accept`` value for which :func:`render` answers in OpenMetrics."""

RUNTIME_COLLECTORS: tuple[Collector, ...] = (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR)
"""prometheus-client's own: ``process_*`` (CPU, memory, file descriptors, start time),
``python_info`` and ``python_gc_*`` (the Python counterparts of Pulsar's ``jvm_*``)."""


class _Families:
    """Metric families by name, created on first use, in the order first used."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {}

    def add(
        self,
        name: str,
        kind: str,
        help_text: str,
        labels: Mapping[str, str],
        value: float,
        *,
        sample: str | None = None,
    ) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = Metric(name, help_text, kind)
        family.add_sample(sample or name, dict(labels), float(value))


def _f(stats: Mapping[str, Any], field: str) -> float:
    try:
        return float(stats.get(field, 0) or 0)
    except (TypeError, ValueError):
        return 0.0


# name, help -- every one a gauge per topic (or per namespace), as Pulsar types them
_TOPIC_GAUGES: tuple[tuple[str, str], ...] = (
    ("pulsar_subscriptions_count", "Subscriptions of the topic"),
    ("pulsar_producers_count", "Producers of the topic"),
    ("pulsar_consumers_count", "Consumers of the topic"),
    ("pulsar_rate_in", "Messages published per second"),
    ("pulsar_rate_out", "Messages dispatched per second"),
    ("pulsar_throughput_in", "Bytes published per second"),
    ("pulsar_throughput_out", "Bytes dispatched per second"),
    ("pulsar_in_messages_total", "Messages published"),
    ("pulsar_in_bytes_total", "Bytes published"),
    ("pulsar_average_msg_size", "Average size of the messages published, bytes"),
    ("pulsar_msg_backlog", "Messages not yet acknowledged, all subscriptions"),
    ("pulsar_storage_size", "Bytes stored for the topic"),
    ("pulsar_storage_logical_size", "Bytes stored for the topic, one copy"),
    ("pulsar_storage_offloaded_size", "Bytes of the topic offloaded to object storage"),
    ("pulsar_storage_backlog_size", "Bytes not yet acknowledged by the slowest subscription"),
    ("pulsar_storage_write_rate", "Entries written to storage per second"),
    ("pulsar_storage_read_rate", "Entries read from storage per second"),
    ("pulsar_storage_read_cache_misses_rate", "Entries read per second not in the cache"),
)

_SUBSCRIPTION_GAUGES: tuple[tuple[str, str, Callable[[Mapping[str, Any]], float]], ...] = (
    ("pulsar_subscription_back_log", "Messages not yet acknowledged",
     lambda s: _f(s, "msgBacklog")),
    ("pulsar_subscription_back_log_no_delayed", "Backlog without delayed messages",
     lambda s: _f(s, "msgBacklogNoDelayed")),
    ("pulsar_subscription_delayed", "Messages delayed for later delivery",
     lambda s: _f(s, "msgDelayed")),
    ("pulsar_subscription_msg_rate_out", "Messages dispatched per second",
     lambda s: _f(s, "msgRateOut")),
    ("pulsar_subscription_msg_throughput_out", "Bytes dispatched per second",
     lambda s: _f(s, "msgThroughputOut")),
    ("pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second",
     lambda s: _f(s, "msgRateRedeliver")),
    ("pulsar_subscription_unacked_messages", "Messages delivered and not acknowledged",
     lambda s: _f(s, "unackedMessages")),
    ("pulsar_subscription_blocked_on_unacked_messages",
     "1 when dispatch stopped on too many unacknowledged messages",
     lambda s: 1.0 if s.get("blockedSubscriptionOnUnackedMsgs") else 0.0),
    ("pulsar_subscription_consumers_count", "Consumers of the subscription",
     lambda s: float(len(s.get("consumers") or ()))),
    ("pulsar_subscription_last_acked_timestamp", "Last acknowledgement, epoch milliseconds",
     lambda s: _f(s, "lastAckedTimestamp")),
    ("pulsar_subscription_last_consumed_timestamp", "Last dispatch, epoch milliseconds",
     lambda s: max((_f(c, "lastConsumedTimestamp") for c in s.get("consumers") or ()),
                   default=0.0)),
    ("pulsar_subscription_last_expire_timestamp", "Last message expiry, epoch milliseconds",
     lambda s: _f(s, "lastExpireTimestamp")),
    ("pulsar_subscription_last_consumed_flow_timestamp",
     "Last permits granted by a consumer, epoch milliseconds",
     lambda s: _f(s, "lastConsumedFlowTimestamp")),
    ("pulsar_subscription_last_mark_delete_advanced_timestamp",
     "Last move of the mark-delete position by an acknowledgement, epoch milliseconds",
     lambda s: _f(s, "lastMarkDeleteAdvancedTimestamp")),
    ("pulsar_subscription_msg_ack_rate", "Messages acknowledged per second",
     lambda s: _f(s, "msgAckRate")),
    ("pulsar_subscription_msg_rate_expired", "Entries expired by the message TTL per second",
     lambda s: _f(s, "msgRateExpired")),
    ("pulsar_subscription_total_msg_expired", "Entries expired by the message TTL",
     lambda s: _f(s, "totalMsgExpired")),
    ("pulsar_subscription_msg_drop_rate",
     "Messages dropped per second (non-persistent subscriptions whose consumer lagged)",
     lambda s: _f(s, "msgDropRate")),
    ("pulsar_out_messages_total", "Messages dispatched", lambda s: _f(s, "msgOutCounter")),
    ("pulsar_out_bytes_total", "Bytes dispatched", lambda s: _f(s, "bytesOutCounter")),
)  # fmt: skip

_CONSUMER_GAUGES: tuple[tuple[str, str, Callable[[Mapping[str, Any]], float]], ...] = (
    ("pulsar_consumer_available_permits", "Permits the consumer's client granted",
     lambda c: _f(c, "availablePermits")),
    ("pulsar_consumer_unacked_messages", "Messages delivered and not acknowledged",
     lambda c: _f(c, "unackedMessages")),
    ("pulsar_consumer_blocked_on_unacked_messages",
     "1 when dispatch to it stopped on too many unacknowledged messages",
     lambda c: 1.0 if c.get("blockedConsumerOnUnackedMsgs") else 0.0),
    ("pulsar_consumer_msg_rate_out", "Messages dispatched per second",
     lambda c: _f(c, "msgRateOut")),
    ("pulsar_consumer_msg_throughput_out", "Bytes dispatched per second",
     lambda c: _f(c, "msgThroughputOut")),
    ("pulsar_consumer_msg_rate_redeliver", "Messages redelivered per second",
     lambda c: _f(c, "msgRateRedeliver")),
    ("pulsar_consumer_msg_ack_rate", "Messages acknowledged per second",
     lambda c: _f(c, "msgAckRate")),
    ("pulsar_out_messages_total", "Messages dispatched", lambda c: _f(c, "msgOutCounter")),
    ("pulsar_out_bytes_total", "Bytes dispatched", lambda c: _f(c, "bytesOutCounter")),
)  # fmt: skip

_BUCKETED: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # prefix, help, bucket suffixes, which AddStats field
    ("pulsar_storage_write_latency", "Entries stored, by add latency (ms; sum in us), last period",
     buckets.LATENCY_SUFFIXES, "add_latency_us"),
    ("pulsar_storage_ledger_write_latency",
     "Entries stored, by the ledger's add latency (ms; sum in us), last period",
     buckets.LATENCY_SUFFIXES, "ledger_add_latency_us"),
    ("pulsar_entry_size", "Entries stored, by size (bytes), last period",
     buckets.ENTRY_SIZE_SUFFIXES, "entry_sizes"),
)  # fmt: skip

_BROKER_SUMS: tuple[tuple[str, str, str], ...] = (
    # broker series, help, the topic series summed
    ("pulsar_broker_topics_count", "Topics served by this broker", ""),
    ("pulsar_broker_subscriptions_count", "Subscriptions", "pulsar_subscriptions_count"),
    ("pulsar_broker_producers_count", "Producers", "pulsar_producers_count"),
    ("pulsar_broker_consumers_count", "Consumers", "pulsar_consumers_count"),
    ("pulsar_broker_rate_in", "Messages published per second", "pulsar_rate_in"),
    ("pulsar_broker_rate_out", "Messages dispatched per second", "pulsar_rate_out"),
    ("pulsar_broker_throughput_in", "Bytes published per second", "pulsar_throughput_in"),
    ("pulsar_broker_throughput_out", "Bytes dispatched per second", "pulsar_throughput_out"),
    ("pulsar_broker_storage_size", "Bytes stored", "pulsar_storage_size"),
    ("pulsar_broker_storage_logical_size", "Bytes stored, one copy", "pulsar_storage_logical_size"),
    ("pulsar_broker_msg_backlog", "Messages not yet acknowledged", "pulsar_msg_backlog"),
    ("pulsar_broker_storage_write_rate", "Entries written per second", "pulsar_storage_write_rate"),
    ("pulsar_broker_storage_read_rate", "Entries read per second", "pulsar_storage_read_rate"),
    ("pulsar_broker_storage_read_cache_misses_rate", "Entries read per second not in the cache",
     "pulsar_storage_read_cache_misses_rate"),
)  # fmt: skip


class MetricsSource(Protocol):
    """What the collector reads (:class:`magnetar.broker.service.BrokerService`)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    @property
    def counters(self) -> BrokerCounters: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def schemas(self) -> SchemaRegistry: ...


@dataclass(frozen=True)
class Options:
    cluster: str
    topic_level: bool = True
    consumer_level: bool = False


def _is_system_topic(topic: Topic) -> bool:
    """Pulsar's system topics: the ``pulsar/system`` namespace and ``__*`` names (topic
    policies' ``__change_events``, transaction buffers' snapshots ...)."""
    name = topic.name
    return name.namespace_name == "pulsar/system" or name.local_name.startswith("__")


def _topic_values(topic: Topic, subs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    consumers = sum(len(s.get("consumers") or ()) for s in subs.values())
    storage = topic.storage_size
    values: dict[str, float] = {
        "pulsar_subscriptions_count": len(subs),
        "pulsar_producers_count": len(topic.producers),
        "pulsar_consumers_count": consumers,
        "pulsar_rate_in": topic.rate_in,
        "pulsar_rate_out": sum(_f(s, "msgRateOut") for s in subs.values()),
        "pulsar_throughput_in": topic.throughput_in,
        "pulsar_throughput_out": sum(_f(s, "msgThroughputOut") for s in subs.values()),
        "pulsar_in_messages_total": topic.msg_in,
        "pulsar_in_bytes_total": topic.bytes_in,
        "pulsar_average_msg_size": topic.throughput_in / topic.rate_in if topic.rate_in else 0.0,
        "pulsar_msg_backlog": sum(_f(s, "msgBacklog") for s in subs.values()),
        "pulsar_storage_size": storage,
        "pulsar_storage_logical_size": storage,
        "pulsar_storage_offloaded_size": topic.offloaded_size,
    }
    if isinstance(topic, PersistentTopic):
        values["pulsar_storage_write_rate"] = topic.storage_write_rate
        values["pulsar_storage_read_rate"] = topic.storage_read_rate
        values["pulsar_storage_read_cache_misses_rate"] = topic.storage_read_cache_misses_rate
        values["pulsar_storage_backlog_size"] = topic.backlog_size()
    return values


def _backlog_quota(out: _Families, labels: Mapping[str, str], topic: Topic) -> None:
    """A persistent topic's backlog quota limits (-1: none) and evictions (Pulsar's
    series; magnetar.broker.backlog_quota)."""
    if not isinstance(topic, PersistentTopic):
        return
    quotas = topic.backlog_quotas
    out.add(
        "pulsar_storage_backlog_quota_limit",
        "gauge",
        "The topic's backlog size limit, bytes (-1: none)",
        labels,
        quotas.size.limit if quotas.size is not None else -1,
    )
    out.add(
        "pulsar_storage_backlog_quota_limit_time",
        "gauge",
        "The topic's backlog age limit, seconds (-1: none)",
        labels,
        quotas.time.limit if quotas.time is not None else -1,
    )
    if topic.oldest_backlog is not None:
        publish_ms = topic.oldest_backlog[0]
        out.add(
            "pulsar_storage_backlog_age_seconds",
            "gauge",
            "Age of the oldest unacknowledged message, seconds, as of the last backlog quota check",
            labels,
            -1 if publish_ms is None else max(0.0, time.time() - publish_ms / 1000),
        )
    for kind, n in topic.quota_evictions.items():
        out.add(
            "pulsar_storage_backlog_quota_exceeded_evictions_total",
            "gauge",
            "Backlog evictions by the topic's consumer_backlog_eviction quotas",
            {**labels, "quota_type": kind},
            n,
        )


class BrokerCollector(Collector):
    """Every series of the broker's /metrics except those of other registries (offload,
    security, the bookie of a standalone), computed when collected."""

    def __init__(self, service: MetricsSource) -> None:
        self.service = service

    def options(self) -> Options:
        cfg = self.service.config
        return Options(
            cluster=cfg.cluster_name,
            topic_level=cfg.expose_topic_level_metrics,
            consumer_level=cfg.expose_consumer_level_metrics,
        )

    def collect(self) -> Iterator[Metric]:
        opts = self.options()
        out = _Families()
        cluster = {"cluster": opts.cluster}
        topics = list(self.service.topics.values())
        sums = self._topics(out, opts, topics)
        self._broker(out, cluster, sums)
        _managed_ledgers(out, opts.cluster, topics)
        yield from out.by_name.values()

    # --- topics, subscriptions, consumers -------------------------------------------------

    def _topics(self, out: _Families, opts: Options, topics: Sequence[Topic]) -> dict[str, float]:
        """The topic (or namespace) series; returns the sums the broker series show."""
        per_namespace: dict[str, dict[str, float]] = {}
        ns_topics: dict[str, int] = {}
        broker_sums: dict[str, float] = {}
        ns_buckets: dict[str, dict[str, list[float]]] = {}
        for topic in topics:
            ns = topic.name.namespace_name
            ns_topics[ns] = ns_topics.get(ns, 0) + 1
            subs = topic.subscription_stats()
            values = _topic_values(topic, subs)
            for name, v in values.items():
                broker_sums[name] = broker_sums.get(name, 0.0) + v
            if isinstance(topic, PersistentTopic):
                for kind, n in topic.quota_evictions.items():
                    broker_sums[f"evictions:{kind}"] = broker_sums.get(f"evictions:{kind}", 0) + n
            key = f"in_bytes:{_is_system_topic(topic)}"
            broker_sums[key] = broker_sums.get(key, 0.0) + topic.bytes_in
            for sub_name, st in subs.items():
                key = f"out_bytes:{sub_name.startswith('__')}"
                broker_sums[key] = broker_sums.get(key, 0.0) + _f(st, "bytesOutCounter")
            bucketed = self._bucket_values(topic)
            if opts.topic_level:
                labels = {"cluster": opts.cluster, "namespace": ns, "topic": topic.full_name}
                for name, help_text in _TOPIC_GAUGES:
                    if name in values:
                        out.add(name, "gauge", help_text, labels, values[name])
                self._emit_buckets(out, labels, bucketed)
                _backlog_quota(out, labels, topic)
                self._subscriptions(out, opts, labels, subs)
                _transaction_buffer(out, labels, topic)
                _replication(out, labels, topic)
            else:
                acc = per_namespace.setdefault(ns, {})
                for name, v in values.items():
                    acc[name] = acc.get(name, 0.0) + v
                nsb = ns_buckets.setdefault(ns, {})
                for name, vs in bucketed.items():
                    have = nsb.setdefault(name, [0.0] * len(vs))
                    for i, v in enumerate(vs):
                        have[i] += v
        for ns, count in sorted(ns_topics.items()):
            labels = {"cluster": opts.cluster, "namespace": ns}
            out.add("pulsar_topics_count", "gauge", "Topics served by this broker", labels, count)
        if not opts.topic_level:
            for ns, acc in sorted(per_namespace.items()):
                labels = {"cluster": opts.cluster, "namespace": ns}
                rate, tp = acc.get("pulsar_rate_in", 0.0), acc.get("pulsar_throughput_in", 0.0)
                acc["pulsar_average_msg_size"] = tp / rate if rate else 0.0
                for name, help_text in _TOPIC_GAUGES:
                    if name in acc:
                        out.add(name, "gauge", help_text, labels, acc[name])
                self._emit_buckets(out, labels, ns_buckets.get(ns, {}))
        broker_sums["pulsar_broker_topics_count"] = len(topics)
        return broker_sums

    @staticmethod
    def _bucket_values(topic: Topic) -> dict[str, list[float]]:
        """Bucket counts, then count and sum, per bucketed series (persistent topics)."""
        if not isinstance(topic, PersistentTopic):
            return {}
        found = topic.storage_stats
        if found is None:
            return {}
        add, _ = found
        got: dict[str, list[float]] = {}
        for prefix, _, _, field in _BUCKETED:
            b: buckets.StatsBuckets = getattr(add, field)
            got[prefix] = [*map(float, b.counts), float(b.count), b.sum]
        return got

    @staticmethod
    def _emit_buckets(
        out: _Families, labels: Mapping[str, str], values: Mapping[str, list[float]]
    ) -> None:
        for prefix, help_text, suffixes, _ in _BUCKETED:
            vs = values.get(prefix)
            if vs is None:
                continue
            for suffix, v in zip((*suffixes, "count", "sum"), vs, strict=True):
                out.add(f"{prefix}_{suffix}", "gauge", help_text, labels, v)

    @staticmethod
    def _subscriptions(
        out: _Families,
        opts: Options,
        topic_labels: Mapping[str, str],
        subs: Mapping[str, Mapping[str, Any]],
    ) -> None:
        for sub_name, s in subs.items():
            labels = {**topic_labels, "subscription": sub_name}
            for name, help_text, get in _SUBSCRIPTION_GAUGES:
                out.add(name, "gauge", help_text, labels, get(s))
            if not opts.consumer_level:
                continue
            for c in s.get("consumers") or ():
                c_labels = {
                    **labels,
                    "consumer_name": str(c.get("consumerName", "")),
                    "consumer_id": str(c.get("consumerId", "")),
                }
                for name, help_text, get in _CONSUMER_GAUGES:
                    out.add(name, "gauge", help_text, c_labels, get(c))

    # --- the broker as a whole ------------------------------------------------------------

    def _broker(
        self, out: _Families, cluster: Mapping[str, str], sums: Mapping[str, float]
    ) -> None:
        for name, help_text, source in _BROKER_SUMS:
            out.add(name, "gauge", help_text, cluster, sums.get(source or name, 0.0))
        for system in (False, True):
            flag = "true" if system else "false"
            out.add(
                "pulsar_broker_in_bytes_total",
                "gauge",
                "Bytes published to the broker's topics (system_topic: Pulsar's system topics)",
                {**cluster, "system_topic": flag},
                sums.get(f"in_bytes:{system}", 0.0),
            )
            out.add(
                "pulsar_broker_out_bytes_total",
                "gauge",
                "Bytes dispatched (system_subscription: subscriptions named __*, as compaction's)",
                {**cluster, "system_subscription": flag},
                sums.get(f"out_bytes:{system}", 0.0),
            )
        for kind in ("size", "time"):
            out.add(
                "pulsar_broker_storage_backlog_quota_exceeded_evictions_total",
                "gauge",
                "Backlog evictions by consumer_backlog_eviction quotas, by quota type",
                {**cluster, "quota_type": kind},
                sums.get(f"evictions:{kind}", 0.0),
            )
        c = self.service.counters
        out.add(
            "pulsar_version_info",
            "gauge",
            "Magnetar's version (Pulsar's series, with this software's version)",
            {**cluster, "version": magnetar.__version__, "commit": "unknown"},
            1,
        )
        broker = {**cluster, "broker": self.service.config.advertised_address}
        for name, help_text, value in (
            ("pulsar_active_connections", "Client connections open", c.active_connections),
            ("pulsar_connection_created_total_count", "Connections accepted",
             c.connections_created),
            ("pulsar_connection_create_success_count", "Connections that completed CONNECT",
             c.connections_established),
            ("pulsar_connection_create_fail_count", "Connections closed before CONNECTED",
             c.connections_failed),
            ("pulsar_connection_closed_total_count", "Connections closed", c.connections_closed),
        ):  # fmt: skip
            out.add(name, "gauge", help_text, {**broker, "metric": "broker.connection"}, value)
        out.add(
            "pulsar_health",
            "gauge",
            "1 while the broker holds its metadata session (what /admin/v2/brokers/health checks)",
            {**broker, "metric": "broker.health"},
            1 if self.service.healthy else 0,
        )
        for name, help_text, value in (
            ("pulsar_broker_lookup_answers", "Lookups answered with this broker", c.lookup_answers),
            ("pulsar_broker_lookup_redirects", "Lookups answered with a redirect",
             c.lookup_redirects),
            ("pulsar_broker_lookup_failures", "Lookups that failed", c.lookup_failures),
        ):  # fmt: skip
            out.add(name, "counter", help_text, cluster, value, sample=f"{name}_total")
        out.add(
            "pulsar_broker_lookup_pending_requests",
            "gauge",
            "Lookups in progress",
            cluster,
            c.lookup_pending,
        )
        if self.service.config.transaction_coordinator_enabled:
            out.add(
                "pulsar_txn_tb_client_pending_requests",
                "gauge",
                "END_TXN requests to other brokers' topics not answered yet",
                cluster,
                remote.pending_requests(),
            )
        out.add(
            "pulsar_broker_topic_load_pending_requests",
            "gauge",
            "Topic loads in progress",
            cluster,
            c.topic_load_pending,
        )
        out.add(
            "topic_load_failed",
            "counter",
            "Topic loads that failed",
            cluster,
            c.topic_load_failed,
            sample="topic_load_failed_total",
        )
        _summary(out, "pulsar_broker_lookup", "Lookup latency, ms", cluster, c.lookup_latency_ms)
        schemas = self.service.schemas
        for name, help_text, windows in (
            ("pulsar_schema_get_ops_latency", "Schema reads, ms", schemas.get_latency_ms),
            ("pulsar_schema_put_ops_latency", "Schema get-or-create, ms", schemas.put_latency_ms),
        ):
            for ns, window in sorted(windows.items()):
                _summary(out, name, help_text, {**cluster, "namespace": ns}, window)
        _summary(out, "pulsar_topic_load_times", "Topic load time, ms", cluster, c.topic_load_ms)
        # Pulsar's older per-period series of the same loads
        loads = c.topic_load_ms.last_period
        period = self.service.config.stats_interval_s
        topic_load = {**broker, "metric": "topic_load"}
        for name, figure in (
            ("pulsar_topic_load_time_mean_ms", sum(loads) / len(loads) if loads else 0.0),
            ("pulsar_topic_load_time_median_ms", c.topic_load_ms.percentile(0.5)),
            ("pulsar_topic_load_time_75percentile_ms", c.topic_load_ms.percentile(0.75)),
            ("pulsar_topic_load_time_95percentile_ms", c.topic_load_ms.percentile(0.95)),
            ("pulsar_topic_load_time_99_percentile_ms", c.topic_load_ms.percentile(0.99)),
            ("pulsar_topic_load_time_99_9_percentile_ms", c.topic_load_ms.percentile(0.999)),
            ("pulsar_topic_load_time_99_99_percentile_ms", c.topic_load_ms.percentile(0.9999)),
            ("pulsar_topic_load_rate_s", len(loads) / period if period > 0 else 0.0),
            ("pulsar_topic_load_failed_count", c.topic_load_failed_in_period),
        ):
            out.add(name, "gauge", "Topic loads of the last statistics period", topic_load, figure)
        _summary(
            out,
            "pulsar_broker_publish_latency",
            "From a SEND taken to its receipt, ms",
            cluster,
            c.publish_latency_ms,
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


def _replication(out: _Families, labels: Mapping[str, str], topic: Topic) -> None:
    for remote_cluster, repl in topic.replication_stats().items():
        remote_labels = {**labels, "remote_cluster": remote_cluster}
        for name, field, help_text in _REPLICATION_SERIES:
            value = repl.get(field)
            number = float(value) if isinstance(value, bool) else _f(repl, field)
            out.add(name, "gauge", help_text, remote_labels, number)


def _transaction_buffer(out: _Families, labels: Mapping[str, str], topic: Topic) -> None:
    """pulsar_txn_tb_* of a topic with a transaction buffer (transactions enabled)."""
    tb = topic.txn_buffer
    if tb is None:
        return
    for name, help_text, value in (
        ("pulsar_txn_tb_active_total", "Transactions open on the topic", tb.ongoing_count),
        ("pulsar_txn_tb_committed_total", "Transactions committed on the topic",
         tb.committed_count),
        ("pulsar_txn_tb_aborted_total", "Transactions aborted on the topic", tb.aborted_count),
    ):  # fmt: skip
        out.add(name, "gauge", help_text, labels, value)


def _range_labels(bounds: tuple[float, ...]) -> list[str]:
    """Pulsar's ``quantile`` labels of its pulsar_ml_*Buckets series: ``0.0_0.5`` ..."""
    lows = (0.0, *bounds[:-1])
    return [f"{float(lo):.1f}_{float(hi):.1f}" for lo, hi in zip(lows, bounds, strict=True)]


_ML_BUCKETS: tuple[tuple[str, str, str, list[str]], ...] = (
    ("pulsar_ml_AddEntryLatencyBuckets", "Adds by latency (ms range), last period",
     "add_latency_us", _range_labels(buckets.LATENCY_BOUNDS_MS)),
    ("pulsar_ml_LedgerAddEntryLatencyBuckets",
     "Adds by the ledger's latency (ms range), last period",
     "ledger_add_latency_us", _range_labels(buckets.LATENCY_BOUNDS_MS)),
    ("pulsar_ml_EntrySizeBuckets", "Entries added by size (bytes range), last period",
     "entry_sizes", _range_labels(buckets.ENTRY_SIZE_BOUNDS)),
    ("pulsar_ml_LedgerSwitchLatencyBuckets", "Ledger roll-overs by latency (ms range), last period",
     "ledger_switch_latency_us", _range_labels(buckets.LATENCY_BOUNDS_MS)),
)  # fmt: skip

_ML_GAUGES: tuple[tuple[str, str], ...] = (
    ("pulsar_ml_AddEntryBytesRate", "Bytes added per second"),
    ("pulsar_ml_AddEntryWithReplicasBytesRate", "Bytes added per second, every copy"),
    ("pulsar_ml_AddEntryMessagesRate", "Entries added per second"),
    ("pulsar_ml_AddEntrySucceed", "Adds that succeeded, last period"),
    ("pulsar_ml_AddEntryErrors", "Adds that failed, last period"),
    ("pulsar_ml_ReadEntriesRate", "Entries read per second"),
    ("pulsar_ml_ReadEntriesBytesRate", "Bytes read per second"),
    ("pulsar_ml_ReadEntriesSucceeded", "Entries read, last period"),
    ("pulsar_ml_ReadEntriesErrors", "Reads that failed, last period"),
    ("pulsar_ml_ReadEntriesOpsCacheMissesRate", "Entries read per second not in the cache"),
    ("pulsar_ml_MarkDeleteRate", "Moves of the cursors' mark-delete positions per second"),
    ("pulsar_ml_NumberOfMessagesInBacklog", "Messages not yet acknowledged, all cursors"),
    ("pulsar_ml_StoredMessagesSize", "Bytes stored, every copy"),
)


def _managed_ledgers(out: _Families, cluster: str, topics: Sequence[Topic]) -> None:
    """Pulsar's pulsar_ml_* per namespace (``tenant/ns/persistent``) and the entry caches'
    pulsar_ml_cache_* for the broker."""
    per_ns: dict[str, dict[str, float]] = {}
    ns_buckets: dict[str, dict[str, list[float]]] = {}
    cache = {"entries": 0.0, "size": 0.0, "inserted": 0.0, "evicted": 0.0, "evictions": 0.0}
    rates = {"hits": 0.0, "misses": 0.0, "hit_bytes": 0.0, "miss_bytes": 0.0}
    count = 0
    for topic in topics:
        if not isinstance(topic, PersistentTopic):
            continue
        found = topic.storage_stats
        ml = topic.managed_ledger
        if found is None or not isinstance(ml, ManagedLedgerImpl):
            continue
        count += 1
        add, _ = found
        p = topic.storage_period
        ns = f"{topic.name.namespace_name}/persistent"
        acc = per_ns.setdefault(ns, {})
        backlog = sum(_f(s, "msgBacklog") for s in topic.subscription_stats().values())
        for name, value in (
            ("pulsar_ml_AddEntryBytesRate", p.write_bytes_rate),
            ("pulsar_ml_AddEntryWithReplicasBytesRate", p.write_bytes_rate * topic.write_quorum),
            ("pulsar_ml_AddEntryMessagesRate", p.write_rate),
            ("pulsar_ml_AddEntrySucceed", p.adds),
            ("pulsar_ml_AddEntryErrors", p.add_errors),
            ("pulsar_ml_ReadEntriesRate", p.read_rate),
            ("pulsar_ml_ReadEntriesBytesRate", p.read_bytes_rate),
            ("pulsar_ml_ReadEntriesSucceeded", p.reads),
            ("pulsar_ml_ReadEntriesErrors", p.read_errors),
            ("pulsar_ml_ReadEntriesOpsCacheMissesRate", p.read_miss_rate),
            ("pulsar_ml_MarkDeleteRate", p.mark_delete_rate),
            ("pulsar_ml_NumberOfMessagesInBacklog", backlog),
            ("pulsar_ml_StoredMessagesSize", topic.storage_size * topic.write_quorum),
        ):
            acc[name] = acc.get(name, 0.0) + value
        nsb = ns_buckets.setdefault(ns, {})
        for name, _, field, _ in _ML_BUCKETS:
            b: buckets.StatsBuckets = getattr(add, field)
            have = nsb.setdefault(name, [0.0] * len(b.counts))
            for i, n in enumerate(b.counts):
                have[i] += n
        c = ml.cache
        cache["entries"] += len(c)
        cache["size"] += c.size
        cache["inserted"] += c.inserted
        cache["evicted"] += c.evicted
        cache["evictions"] += c.evictions
        rates["hits"] += p.read_rate - p.read_miss_rate
        rates["misses"] += p.read_miss_rate
        rates["hit_bytes"] += p.hit_bytes_rate
        rates["miss_bytes"] += p.miss_bytes_rate
    for ns, acc in sorted(per_ns.items()):
        labels = {"cluster": cluster, "namespace": ns}
        for name, help_text in _ML_GAUGES:
            out.add(name, "gauge", help_text, labels, acc.get(name, 0.0))
        for name, help_text, _, ranges in _ML_BUCKETS:
            counts = ns_buckets[ns][name]
            for label, v in zip(ranges, counts, strict=False):
                out.add(name, "gauge", help_text, {**labels, "quantile": label}, v)
            overflow = f"{name}_OVERFLOW"
            out.add(overflow, "gauge", f"{help_text}: beyond the last range", labels, counts[-1])
    cl = {"cluster": cluster}
    out.add("pulsar_ml_count", "gauge", "Managed ledgers open", cl, count)
    for name, help_text, value in (
        ("pulsar_ml_cache_entries", "Entries in the entry caches", cache["entries"]),
        ("pulsar_ml_cache_used_size", "Bytes in the entry caches", cache["size"]),
        ("pulsar_ml_cache_inserted_entries_total", "Entries put in the caches", cache["inserted"]),
        ("pulsar_ml_cache_evicted_entries_total", "Entries dropped from the caches",
         cache["evicted"]),
        ("pulsar_ml_cache_evictions", "Times entries were dropped to make room",
         cache["evictions"]),
        ("pulsar_ml_cache_hits_rate", "Reads per second served by the caches", rates["hits"]),
        ("pulsar_ml_cache_misses_rate", "Reads per second the caches missed", rates["misses"]),
        ("pulsar_ml_cache_hits_throughput", "Bytes per second served by the caches",
         rates["hit_bytes"]),
        ("pulsar_ml_cache_misses_throughput", "Bytes per second read past the caches",
         rates["miss_bytes"]),
    ):  # fmt: skip
        out.add(name, "gauge", help_text, cl, value)


def _summary(
    out: _Families,
    name: str,
    help_text: str,
    labels: Mapping[str, str],
    window: buckets.LatencyWindow,
) -> None:
    # a period without values has NaN quantiles, as Pulsar's summaries show them: the series
    # stay (a dashboard or an alert still finds them), with no value to read
    quantiles = window.quantiles or (math.nan,) * len(buckets.SUMMARY_QUANTILES)
    for q, v in zip(buckets.SUMMARY_QUANTILES, quantiles, strict=True):
        out.add(name, "summary", help_text, {**labels, "quantile": repr(q)}, v)
    out.add(name, "summary", help_text, labels, window.count, sample=f"{name}_count")
    out.add(name, "summary", help_text, labels, window.sum, sample=f"{name}_sum")


class _Labelled(Collector):
    """Another registry's (or collector's) series with ``labels`` added where missing, as
    Pulsar puts ``cluster`` on every series of a broker's /metrics."""

    def __init__(self, source: Collector | CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._source = source
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                labels = {**self._labels, **s.labels}
                copy.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
            yield copy


def registry(
    collector: BrokerCollector, others: Iterable[Collector | CollectorRegistry]
) -> CollectorRegistry:
    """What /metrics renders: the broker's series, then ``others`` (the offload and
    security registries, the standalone's bookie, prometheus-client's runtime collectors),
    each with the cluster label."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    cluster = {"cluster": collector.service.config.cluster_name}
    for other in others:
        reg.register(_Labelled(other, cluster))
    return reg


class _WithText(Collector):
    """A registry's series, then those of Prometheus text rendered elsewhere."""

    def __init__(self, reg: CollectorRegistry, text: str) -> None:
        self._reg = reg
        self._text = text

    def collect(self) -> Iterator[Metric]:
        yield from self._reg.collect()
        yield from text_string_to_metric_families(self._text)


def render(reg: CollectorRegistry, accept: str | None, extra_text: str = "") -> tuple[bytes, str]:
    """The body and content type for a scraper whose Accept header is ``accept``:
    OpenMetrics when it asks for ``application/openmetrics-text``, else the text format.
    ``extra_text``: more series in the Prometheus text format (parsed, so that either format
    carries them)."""
    if extra_text:
        combined = CollectorRegistry(auto_describe=False)
        combined.register(_WithText(reg, extra_text))
        reg = combined
    if accept and OPENMETRICS in accept:
        body: bytes = om_exposition.generate_latest(reg)  # type: ignore[no-untyped-call]
        return body, om_exposition.CONTENT_TYPE_LATEST
    return text_exposition.generate_latest(reg), CONTENT_TYPE


WORKER_LABEL = "worker"
"""The label a pod-level scrape of ``magnetar broker --workers N`` puts on each worker's
series (its index, 0 .. N-1, stable across the worker's restarts)."""


_parse_openmetrics: Callable[[str], Iterator[Metric]] = om_parser.text_string_to_metric_families


class _WorkerFamilies(Collector):
    """The families of several workers' expositions merged by name (a name appears once, as
    the text format requires), each sample labelled with its worker; then
    ``magnetar_broker_worker_up``: 1 for a worker whose series are there, 0 for one that did
    not answer."""

    def __init__(self, parts: Sequence[tuple[int, bytes | None]], cluster: str) -> None:
        # each part in OpenMetrics (a counter's _created stays in its family)
        self._parts = parts
        self._cluster = cluster

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for index, text in self._parts:
            if text is None:
                continue
            worker = {WORKER_LABEL: str(index)}
            for family in _parse_openmetrics(text.decode()):
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                elif into.type != family.type:  # workers of one pod run the same code
                    continue
                for s in family.samples:
                    into.add_sample(s.name, {**s.labels, **worker}, s.value, s.timestamp)
        yield from merged.values()
        up = Metric(
            "magnetar_broker_worker_up",
            "1 when the worker's series are in this scrape, 0 when it did not answer",
            "gauge",
        )
        for index, text in self._parts:
            labels = {"cluster": self._cluster, WORKER_LABEL: str(index)}
            up.add_sample("magnetar_broker_worker_up", labels, 0.0 if text is None else 1.0)
        yield up


def render_workers(
    parts: Sequence[tuple[int, bytes | None]], accept: str | None, *, cluster: str
) -> tuple[bytes, str]:
    """:func:`render` for a pod of broker workers: ``parts`` are (worker index, its own
    exposition in OpenMetrics, None when it did not answer)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_WorkerFamilies(parts, cluster))
    return render(reg, accept)
