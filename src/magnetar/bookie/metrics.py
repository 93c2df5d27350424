"""The bookie's Prometheus metrics, with BookKeeper's names where one exists.

Request metrics are observed by the gRPC service; storage gauges are read from
``LedgerStorage.stats()`` at scrape time by a collector, so the hot path pays nothing.
Journal sync latency is observed by the journal itself through ``observe_journal_sync``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from magnetar.bookie.storage import api as storage

REGISTRY = CollectorRegistry(auto_describe=True)

RUNTIME = CollectorRegistry(auto_describe=True)
"""prometheus-client's ``process_*``, ``python_info`` and ``python_gc_*``, on a bookie
process's own /metrics (a standalone's /metrics has them once, from the broker)."""
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    RUNTIME.register(_collector)

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)

JOURNAL_SYNC = Histogram(
    "bookie_journal_JOURNAL_SYNC",
    "Journal sync: one fdatasync, covering every group written before it began, seconds",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
JOURNAL_QUEUE_LATENCY = Histogram(
    "bookie_journal_JOURNAL_QUEUE_LATENCY",
    "An add batch's wait in the journal's queue until its group is written, seconds",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
ADD_ENTRY = Histogram(
    "bookie_ADD_ENTRY",
    "Add request (a batch of entries) until durable, seconds",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
READ_ENTRY = Histogram(
    "bookie_READ_ENTRY",
    "Read request, seconds",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
ADD_ENTRIES = Counter("bookie_add_entries", "Entries added", registry=REGISTRY)
ADD_BYTES = Counter("bookie_add_bytes", "Entry bytes added", registry=REGISTRY)
ADD_FAILURES = Counter("bookie_add_failures", "Entries refused", registry=REGISTRY)
READ_ENTRIES = Counter("bookie_read_entries", "Entries read", registry=REGISTRY)


def observe_journal_sync(seconds: float) -> None:
    JOURNAL_SYNC.observe(seconds)


def observe_journal_queue(seconds: float) -> None:
    JOURNAL_QUEUE_LATENCY.observe(seconds)


class StorageCollector(Collector):
    """Gauges and counters read from the storage engine at scrape time."""

    def __init__(self, stats: Callable[[], storage.StorageStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self._stats()
        gauges = {
            "bookie_SERVER_STATUS": ("1 writable, 0 read-only", 0 if s.read_only else 1),
            "bookie_ledgers_count": ("Ledgers stored", s.ledgers),
            "bookie_ledger_dir_usage_ratio": ("Highest disk usage fraction", s.disk_usage_fraction),
            "bookie_journal_queue_size": (
                "Entries waiting for the journal",
                s.journal_queue_entries,
            ),
            "bookie_journal_queue_bytes": ("Bytes waiting for the journal", s.journal_queue_bytes),
            "bookie_journal_files": ("Journal files on disk", s.journal_files),
            "bookie_write_cache_size": ("Write cache bytes", s.write_cache_bytes),
            "bookie_write_cache_count": ("Write cache entries", s.write_cache_entries),
            "bookie_read_cache_size": ("Read cache bytes", s.read_cache_bytes),
            "bookie_entry_log_count": ("Entry log files", s.entry_logs),
            "bookie_entry_log_bytes": ("Entry log bytes", s.entry_log_bytes),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)
        counters = {
            "bookie_journal_writes": ("Journal group writes", s.journal_writes),
            "bookie_journal_fsyncs": ("Journal fdatasync calls", s.journal_fsyncs),
            "bookie_journal_entries": ("Entries made durable by the journal", s.journal_entries),
            "bookie_journal_bytes": ("Bytes written to the journal", s.journal_bytes),
            "bookie_read_cache_hits": ("Read cache hits", s.read_cache_hits),
            "bookie_read_cache_misses": ("Read cache misses", s.read_cache_misses),
            "bookie_flushes": ("Write cache flushes", s.flushes),
            "bookie_compactions": ("Compaction runs", s.compactions),
            "bookie_compacted_logs": ("Entry logs reclaimed", s.compacted_logs),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)


def render() -> bytes:
    """A bookie process's /metrics: its series and the runtime's."""
    return generate_latest(REGISTRY) + generate_latest(RUNTIME)
