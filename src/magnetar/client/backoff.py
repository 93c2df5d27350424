"""Delays between a client's attempts to reconnect, with jitter.

Why this module exists: every client side that comes back after losing its broker -- the
producer and consumer handles, the Spark reader subscribing again -- waits between attempts,
longer each time, and not in step with the other clients that lost the same broker (they
would all come back at the same instant, and again). One policy for all of them; no I/O.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays between attempts: doubling from ``initial_s`` up to ``max_s``, each drawn at
    random from its upper half (jitter) so that clients that lost the same broker spread."""

    def __init__(
        self, *, initial_s: float = 0.1, max_s: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.initial_s, self.max_s = initial_s, max_s
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not secrecy)
        self._next = initial_s

    def next(self) -> float:
        ceiling = self._next
        self._next = min(self._next * 2, self.max_s)
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._next = self.initial_s
