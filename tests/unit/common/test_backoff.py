"""The shared backoff between retries: every delay within [initial, max], growing while
attempts fail, back to the start after a success; retriers that failed together do not come
back together (the attempt times are computed on a virtual clock: no wall-clock timing)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator

import pytest

from magnetar.common import backoff


def test_delays_stay_between_the_first_and_the_cap_and_grow() -> None:
    delays_of = backoff.Backoff(initial_s=0.1, max_s=2.0, rng=random.Random(7))
    delays = [delays_of.next() for _ in range(40)]
    assert all(0.1 <= d <= 2.0 for d in delays)
    assert max(delays) == 2.0  # reaches the cap after a run of failures...
    assert delays[0] <= 0.3  # ...from at most three times the first delay
    assert len(set(delays[:5])) == 5  # (jittered: no two alike)
    delays_of.reset()
    assert 0.1 <= delays_of.next() <= 0.3


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="initial_s"):
        backoff.Backoff(initial_s=0.0)
    with pytest.raises(ValueError, match=r"max_s=0\.5"):
        backoff.Backoff(initial_s=1.0, max_s=0.5)


def _attempts(next_delay: Callable[[], float], outage_s: float) -> list[float]:
    """When one retrier tries (virtual seconds since the outage began): at once, then after
    each delay, until the first attempt at or after the end of the outage (it succeeds)."""
    times, now = [0.0], 0.0
    while now < outage_s:
        now += next_delay()
        times.append(now)
    return times


def _most_within(times: list[float], window_s: float) -> int:
    """The largest number of attempts that fall within one window of ``window_s``."""
    ordered = sorted(times)
    return max(
        sum(1 for t in ordered[i:] if t - start <= window_s) for i, start in enumerate(ordered)
    )


def _lockstep(retriers: list[list[float]], *, window_s: float) -> bool:
    """Whether the retriers come back together: at some retry (the k-th of each), or at the
    first attempt after the outage, more than a quarter of them within ``window_s``."""
    n = len(retriers)
    per_retry: Iterator[tuple[float | None, ...]] = itertools.zip_longest(*retriers)
    for k, times in enumerate(per_retry):
        present = [t for t in times if t is not None]
        if k > 0 and len(present) == n and _most_within(present, window_s) > n // 4:
            return True
    return _most_within([r[-1] for r in retriers], window_s) > n // 4


def test_retriers_after_an_outage_do_not_retry_in_lockstep() -> None:
    n, outage_s = 40, 20.0
    retriers = [
        _attempts(backoff.Backoff(initial_s=0.1, max_s=5.0, rng=random.Random(seed)).next, outage_s)
        for seed in range(n)
    ]
    assert not _lockstep(retriers, window_s=0.01)
    assert all(r[-1] >= outage_s for r in retriers)
    assert max(r[-1] for r in retriers) - outage_s <= 5.0  # none waits more than the cap


def test_the_lockstep_measure_sees_fixed_and_doubling_delays() -> None:
    """What every retry loop did before the shared backoff: a fixed delay, or a doubling one
    without jitter. Their retriers all come back at the same instants."""

    def doubling() -> Callable[[], float]:
        steps = iter([min(0.1 * 2**i, 5.0) for i in range(100)])
        return lambda: next(steps)

    fixed = [_attempts(lambda: 0.2, 20.0) for _ in range(40)]
    doubled = [_attempts(doubling(), 20.0) for _ in range(40)]
    assert _lockstep(fixed, window_s=0.01)
    assert _lockstep(doubled, window_s=0.01)
