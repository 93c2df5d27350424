"""Delays between attempts at something that failed for a reason that may pass, with jitter.

Why this module exists: etcd, the bookies and the brokers go away together (a restart, a
network cut), and everything that talks to them -- brokers re-opening their metadata
session, etcd watches and reads, ledger recovery asking bookies, the producer and consumer
handles, the Spark reader subscribing again -- comes back after the same outage. Waiting a
fixed delay, or a plain doubling one, brings them all back at the same instants, again and
again (a retry storm in lockstep). Every retry loop in ``src/magnetar`` takes its delays from
one :class:`Backoff`, which draws each delay at random ("decorrelated jitter": between the
first delay and three times the previous one, capped), so retriers that failed at the same
moment spread out from their first retry on. No I/O: the caller sleeps.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays between attempts: each drawn uniformly between ``initial_s`` and three times
    the previous delay, never above ``max_s`` (decorrelated jitter). They grow about
    geometrically while attempts keep failing; :meth:`reset` after a success starts again
    from ``initial_s``."""

    def __init__(
        self, *, initial_s: float = 0.1, max_s: float = 30.0, rng: random.Random | None = None
    ) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(
                f"a backoff needs 0 < initial_s <= max_s, got initial_s={initial_s} max_s={max_s}"
            )
        self.initial_s, self.max_s = initial_s, max_s
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not secrecy)
        self._previous = initial_s

    def next(self) -> float:
        """The delay to wait before the next attempt."""
        delay = min(self.max_s, self._rng.uniform(self.initial_s, self._previous * 3))
        self._previous = delay
        return delay

    def reset(self) -> None:
        """The attempt succeeded: the next failure starts again from ``initial_s``."""
        self._previous = self.initial_s
