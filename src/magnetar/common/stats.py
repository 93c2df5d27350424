"""Pulsar's ``StatsBuckets``: the fixed bucket layouts of its latency and size metrics.

Why: dashboards built for Pulsar read ``pulsar_storage_write_latency_le_1``,
``pulsar_entry_size_le_4_kb`` ... as Pulsar writes them: each bucket counts the values of
its own range (not cumulative, unlike a Prometheus histogram), over the last statistics
period (the counts are moved to the exported snapshot by :meth:`StatsBuckets.refresh`, which
the broker calls once a period), with ``_count`` and ``_sum`` beside. Adding a value costs one
``bisect`` and three integer additions, so it is done once per entry on the add path.
"""

from __future__ import annotations

from bisect import bisect_left

LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
"""Pulsar's ``ENTRY_LATENCY_BUCKETS_USEC``, in milliseconds (the names of the buckets)."""
LATENCY_BOUNDS_US: tuple[float, ...] = tuple(b * 1000 for b in LATENCY_BOUNDS_MS)
LATENCY_SUFFIXES: tuple[str, ...] = (
    "le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow",
)  # fmt: skip

ENTRY_SIZE_BOUNDS: tuple[float, ...] = (128, 512, 1024, 2048, 4096, 16384, 102400, 1048576)
"""Pulsar's ``ENTRY_SIZE_BUCKETS_BYTES``."""
ENTRY_SIZE_SUFFIXES: tuple[str, ...] = (
    "le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb",
    "le_overflow",
)  # fmt: skip


class StatsBuckets:
    """Counts per range (``len(bounds) + 1`` ranges, the last one unbounded), their total and
    the sum of the values, accumulated until :meth:`refresh` publishes them."""

    __slots__ = ("_bounds", "_count", "_counts", "_sum", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._count = 0
        self.counts: tuple[int, ...] = tuple(self._counts)
        """Per range, over the last refreshed period."""
        self.sum = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value
        self._count += 1

    def refresh(self) -> None:
        """What was added since the previous refresh becomes the exported period."""
        self.counts = tuple(self._counts)
        self.sum = self._sum
        self.count = self._count
        self._counts = [0] * len(self._counts)
        self._sum = 0.0
        self._count = 0

    def pending(self) -> tuple[tuple[int, ...], float, int]:
        """What was added since the last refresh (counts, sum, count), not yet exported."""
        return tuple(self._counts), self._sum, self._count


SUMMARY_QUANTILES: tuple[float, ...] = (0.0, 0.5, 0.95, 0.99, 0.999, 0.9999, 1.0)
"""The quantiles of Pulsar's Prometheus summaries (``pulsar_broker_publish_latency``)."""


class LatencyWindow:
    """Pulsar's rolling summaries: the values of one statistics period, their quantiles
    computed (exactly, from the sorted values) when the period ends, plus a running count
    and sum. At most ``cap`` values are kept per period (the count and sum still take every
    one; the quantiles then describe the period's first ``cap`` values)."""

    __slots__ = ("_values", "cap", "count", "keep", "last_period", "quantiles", "sum")

    def __init__(self, cap: int = 100_000, *, keep: bool = False) -> None:
        self._values: list[float] = []
        self.cap = cap
        self.keep = keep
        self.last_period: list[float] = []
        """With ``keep``: the last refreshed period's values, sorted."""
        self.count = 0
        self.sum = 0.0
        self.quantiles: tuple[float, ...] = ()
        """Per SUMMARY_QUANTILES over the last refreshed period; empty before one had values."""

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        if len(self._values) < self.cap:
            self._values.append(value)

    def refresh(self) -> None:
        values, self._values = self._values, []
        if not values:
            self.quantiles = ()
            self.last_period = []
            return
        values.sort()
        last = len(values) - 1
        self.quantiles = tuple(values[round(q * last)] for q in SUMMARY_QUANTILES)
        if self.keep:
            self.last_period = values

    def percentile(self, q: float) -> float:
        """The ``q`` quantile of the last period's values (``keep``); 0 without any."""
        values = self.last_period
        return values[round(q * (len(values) - 1))] if values else 0.0
