"""Offload metrics, with the names Pulsar's ``LedgerOffloaderStatsImpl`` exports.

Why: dashboards and alerts written for Pulsar's tiered storage read
``brk_ledgeroffloader_*{namespace, topic}``; these are the same series. Latency summaries
are in microseconds, as Pulsar's. The rates (bytes per second) are computed over windows of
``RATE_INTERVAL_S`` (Pulsar's default statistics period); Magnetar adds plain byte counters
(``magnetar_offload_*_bytes_total``), which Prometheus' ``rate()`` prefers, and the read
cache's size and hit/miss counts. Everything is in :data:`REGISTRY`, which the broker's
/metrics appends to its own output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Summary
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)
LABELS = ("namespace", "topic")
RATE_INTERVAL_S = 60.0

OFFLOAD_ERROR = Counter(
    "brk_ledgeroffloader_offload_error", "Offload attempts that failed", LABELS, registry=REGISTRY
)
WRITE_STORAGE_ERROR = Counter(
    "brk_ledgeroffloader_write_storage_error",
    "Writes to the object store that failed",
    LABELS,
    registry=REGISTRY,
)
READ_OFFLOAD_ERROR = Counter(
    "brk_ledgeroffloader_read_offload_error",
    "Reads of offloaded ledgers that failed",
    LABELS,
    registry=REGISTRY,
)
READ_LEDGER_LATENCY = Summary(
    "brk_ledgeroffloader_read_ledger_latency",
    "Reading a ledger from bookies while offloading it (microseconds per read)",
    LABELS,
    registry=REGISTRY,
)
READ_OFFLOAD_INDEX_LATENCY = Summary(
    "brk_ledgeroffloader_read_offload_index_latency",
    "Reading an offloaded ledger's index object (microseconds)",
    LABELS,
    registry=REGISTRY,
)
READ_OFFLOAD_DATA_LATENCY = Summary(
    "brk_ledgeroffloader_read_offload_data_latency",
    "Ranged GETs of offloaded data blocks (microseconds)",
    LABELS,
    registry=REGISTRY,
)
DELETE_OFFLOAD_OPS = Counter(
    "brk_ledgeroffloader_delete_offload_ops",
    "Deletions of offloaded ledgers",
    (*LABELS, "status"),
    registry=REGISTRY,
)
OFFLOAD_BYTES = Counter(
    "magnetar_offload_bytes", "Entry payload bytes offloaded", LABELS, registry=REGISTRY
)
READ_OFFLOAD_BYTES = Counter(
    "magnetar_offload_read_bytes",
    "Entry payload bytes served from offloaded ledgers",
    LABELS,
    registry=REGISTRY,
)
CACHE_BYTES = Gauge(
    "magnetar_offload_read_cache_bytes", "Bytes of offloaded blocks cached", registry=REGISTRY
)
CACHE_HITS = Counter(
    "magnetar_offload_read_cache_hits", "Block reads served by the cache", registry=REGISTRY
)
CACHE_MISSES = Counter(
    "magnetar_offload_read_cache_misses", "Block reads that went to S3", registry=REGISTRY
)


class _Rates(Collector):
    """``brk_ledgeroffloader_offload_rate`` and ``..._read_offload_rate``: bytes per second
    over the last complete window of RATE_INTERVAL_S per (namespace, topic)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (metric, labels) -> [window start, bytes in window, last rate]
        self._windows: dict[tuple[str, tuple[str, str]], list[float]] = {}

    def add(self, metric: str, labels: tuple[str, str], n: int) -> None:
        now = time.monotonic()
        with self._lock:
            w = self._windows.setdefault((metric, labels), [now, 0.0, 0.0])
            self._roll(w, now)
            w[1] += n

    @staticmethod
    def _roll(w: list[float], now: float) -> None:
        elapsed = now - w[0]
        if elapsed >= RATE_INTERVAL_S:
            # windows with no traffic at all since: the rate of the last one is 0
            w[2] = w[1] / elapsed if elapsed < 2 * RATE_INTERVAL_S else 0.0
            w[0], w[1] = now, 0.0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        families = {
            name: GaugeMetricFamily(name, help_, labels=LABELS)
            for name, help_ in (
                ("brk_ledgeroffloader_offload_rate", "Bytes offloaded per second"),
                ("brk_ledgeroffloader_read_offload_rate", "Offloaded bytes read per second"),
            )
        }
        with self._lock:
            for (metric, labels), w in self._windows.items():
                self._roll(w, now)
                families[metric].add_metric(list(labels), w[2])
        yield from families.values()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


RATES = _Rates()
REGISTRY.register(RATES)


def labels_of(topic: str) -> tuple[str, str]:
    """(namespace, topic) labels of a managed-ledger or topic name (``unknown`` when empty)."""
    if not topic:
        return ("unknown", "unknown")
    name = topic.split("://", 1)[-1]
    parts = name.split("/")
    if len(parts) >= 4 and parts[2] in ("persistent", "non-persistent"):
        # tenant/namespace/domain/topic (a managed-ledger name)
        return (
            f"{parts[0]}/{parts[1]}",
            f"{parts[2]}://{parts[0]}/{parts[1]}/{'/'.join(parts[3:])}",
        )
    if len(parts) >= 3:
        return (f"{parts[0]}/{parts[1]}", topic)
    return ("unknown", topic)


def offload_started(labels: tuple[str, str]) -> None:
    """A topic's first offload attempt creates its error counters at 0, so an alert's
    ``increase()`` sees the first failure (a counter born at 1 shows no increase)."""
    OFFLOAD_ERROR.labels(*labels)
    WRITE_STORAGE_ERROR.labels(*labels)


def offloaded(topic: str, n: int) -> None:
    labels = labels_of(topic)
    OFFLOAD_BYTES.labels(*labels).inc(n)
    RATES.add("brk_ledgeroffloader_offload_rate", labels, n)


def read_offloaded(topic: str, n: int) -> None:
    labels = labels_of(topic)
    READ_OFFLOAD_BYTES.labels(*labels).inc(n)
    RATES.add("brk_ledgeroffloader_read_offload_rate", labels, n)
