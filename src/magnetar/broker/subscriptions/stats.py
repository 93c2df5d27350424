"""Counters and rates for Pulsar's subscription and consumer stats.

Rates are computed from monotonically growing counters when stats are read (admin stats,
/metrics scrapes): the rate over the interval since the previous read, refreshed at most once
a second, so the hot path only increments integers.
"""

from __future__ import annotations

import time


class Rate:
    """Per-second rate of a counter over the interval between two reads."""

    __slots__ = ("_last_count", "_last_t", "_value")

    def __init__(self) -> None:
        self._last_t = time.monotonic()
        self._last_count = 0
        self._value = 0.0

    def value(self, count: int) -> float:
        now = time.monotonic()
        dt = now - self._last_t
        if dt >= 1.0:
            self._value = (count - self._last_count) / dt
            self._last_t = now
            self._last_count = count
        return self._value


class Meter:
    """Messages and bytes out (or redelivered), with their rates."""

    __slots__ = ("_byte_rate", "_msg_rate", "bytes", "msgs")

    def __init__(self) -> None:
        self.msgs = 0
        self.bytes = 0
        self._msg_rate = Rate()
        self._byte_rate = Rate()

    def add(self, msgs: int, nbytes: int = 0) -> None:
        self.msgs += msgs
        self.bytes += nbytes

    def msg_rate(self) -> float:
        return self._msg_rate.value(self.msgs)

    def byte_rate(self) -> float:
        return self._byte_rate.value(self.bytes)


def now_ms() -> int:
    return int(time.time() * 1000)
