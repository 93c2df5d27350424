"""Pulsar's bucket layouts and rolling summaries (magnetar.common.stats)."""

from __future__ import annotations

from magnetar.common import stats


def test_buckets_count_their_own_range_over_the_last_period() -> None:
    b = stats.StatsBuckets(stats.LATENCY_BOUNDS_US)
    for us in (100, 500, 501, 1000, 4000, 2_000_000):
        b.add(us)
    assert b.count == 0 and sum(b.counts) == 0  # nothing exported before a refresh
    b.refresh()
    # (0, 0.5 ms], (0.5, 1], (1, 5], ... overflow: a bound belongs to the range it closes
    assert b.counts == (2, 2, 1, 0, 0, 0, 0, 0, 0, 1)
    assert b.count == 6 and b.sum == 100 + 500 + 501 + 1000 + 4000 + 2_000_000
    b.add(7000)
    b.refresh()  # the next period stands alone
    assert b.counts == (0, 0, 0, 1, 0, 0, 0, 0, 0, 0) and b.count == 1
    assert len(stats.LATENCY_SUFFIXES) == len(b.counts)


def test_entry_size_layout_is_pulsars() -> None:
    b = stats.StatsBuckets(stats.ENTRY_SIZE_BOUNDS)
    for size in (128, 129, 1024, 16 * 1024 + 1, 2 * 1024 * 1024):
        b.add(size)
    b.refresh()
    named = dict(zip(stats.ENTRY_SIZE_SUFFIXES, b.counts, strict=True))
    assert named == {
        "le_128": 1, "le_512": 1, "le_1_kb": 1, "le_2_kb": 0, "le_4_kb": 0, "le_16_kb": 0,
        "le_100_kb": 1, "le_1_mb": 0, "le_overflow": 1,
    }  # fmt: skip


def test_latency_window_quantiles_per_period() -> None:
    w = stats.LatencyWindow(keep=True)
    for v in range(1, 101):
        w.add(float(v))
    assert w.quantiles == ()
    w.refresh()
    q = dict(zip(stats.SUMMARY_QUANTILES, w.quantiles, strict=True))
    assert q[0.0] == 1 and q[1.0] == 100 and q[0.5] in (50, 51) and q[0.99] == 99
    assert w.count == 100 and w.sum == 5050  # running, across periods
    assert w.percentile(0.75) in (75, 76)
    w.refresh()  # an empty period: no quantiles, the totals stay
    assert w.quantiles == () and w.percentile(0.5) == 0.0 and w.count == 100


def test_latency_window_caps_what_it_keeps() -> None:
    w = stats.LatencyWindow(cap=10)
    for v in range(100):
        w.add(float(v))
    w.refresh()
    assert w.count == 100 and w.quantiles[-1] == 9  # quantiles of the first 10 only
