"""The client layer's backoff between re-creations: doubling up to its ceiling, each delay drawn
from the upper half of its step (jitter), back to the start after a success."""

from __future__ import annotations

import random

from magnetar.client import backoff


def test_delays_double_within_jitter_and_reset() -> None:
    delays_of = backoff.Backoff(initial_s=0.1, max_s=1.0, rng=random.Random(7))
    delays = [delays_of.next() for _ in range(6)]
    for delay, ceiling in zip(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # (jittered: no two alike)
    delays_of.reset()
    assert 0.05 <= delays_of.next() <= 0.1


def test_clients_that_lost_the_same_broker_spread() -> None:
    firsts = {round(backoff.Backoff(rng=random.Random(seed)).next(), 6) for seed in range(20)}
    assert len(firsts) == 20
