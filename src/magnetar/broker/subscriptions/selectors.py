"""Which consumer gets an entry: pure policies, no I/O, unit-tested on their own.

* :func:`pick_active` -- Exclusive/Failover: the single active consumer (priority level, then
  consumer name; for a partition, the partition index modulo the top-priority consumers, so
  the partitions of one topic spread over the consumers as Pulsar does).
* :class:`RoundRobin` -- Shared: the next consumer with permits, highest priority level first.
* :class:`AutoSplitSelector` -- Key_Shared AUTO_SPLIT: the 65,536 hash slots split in half
  for every consumer that joins (the biggest range is split), merged back on leave --
  Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector, so keys land where Pulsar puts them.
* :class:`StickySelector` -- Key_Shared STICKY: consumers declare their ranges; overlaps are
  refused.
* :class:`KeyHashOwners` -- Key_Shared in either mode: the one the subscription asks.

Policies are generic over the consumer type: anything with the attributes they read.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from magnetar.broker.subscriptions.hashing import RANGE_SIZE


class Candidate(Protocol):
    @property
    def consumer_name(self) -> str: ...

    @property
    def priority_level(self) -> int: ...


C = TypeVar("C", bound=Candidate)


class AssignError(ValueError):
    """A consumer cannot be given a hash range (maps to ServerError ConsumerAssignError)."""


def pick_active(consumers: Sequence[C], *, partition_index: int = -1) -> C | None:
    """The active consumer of a single-active (Exclusive/Failover) subscription.

    Lower priority_level wins, then the lexically smallest name; ties keep join order. On a
    partition of a partitioned topic the index picks among the top-priority consumers.
    """
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.consumer_name))
    if partition_index < 0:
        return ordered[0]
    top = ordered[0].priority_level
    same = [c for c in ordered if c.priority_level == top]
    return same[partition_index % len(same)]


class RoundRobin(Generic[C]):
    """Round-robin over consumers that can take a message, best priority level first."""

    def __init__(self) -> None:
        self._next = 0

    def pick(self, consumers: Sequence[C], can_take: Callable[[C], bool]) -> C | None:
        n = len(consumers)
        if n == 0:
            return None
        best: C | None = None
        best_level = 0
        start = self._next % n
        chosen = -1
        for step in range(n):
            i = (start + step) % n
            c = consumers[i]
            if not can_take(c):
                continue
            if best is None or c.priority_level < best_level:
                best, best_level, chosen = c, c.priority_level, i
        if best is not None:
            self._next = chosen + 1
        return best


class AutoSplitSelector(Generic[C]):
    """Key_Shared AUTO_SPLIT: ranges keyed by their (inclusive) upper slot bound."""

    def __init__(self, *, range_size: int = RANGE_SIZE, min_split_size: int = 2) -> None:
        self.range_size = range_size
        self.min_split_size = min_split_size
        self._ends: list[int] = []
        self._owners: list[C] = []

    def add(self, consumer: C) -> None:
        if not self._ends:
            self._ends.append(self.range_size)
            self._owners.append(consumer)
            return
        # the biggest range (the first one when several are as big), split in half: the
        # newcomer takes the lower half
        best_i, best_slots, lower = 0, -1, 0
        prev = 0
        for i, end in enumerate(self._ends):
            slots = end - prev
            if slots > best_slots:
                best_i, best_slots, lower = i, slots, prev
            prev = end
        if best_slots <= self.min_split_size:
            raise AssignError(f"no hash range left to assign ({len(self._ends)} consumers)")
        middle = lower + best_slots // 2
        self._ends.insert(best_i, middle)
        self._owners.insert(best_i, consumer)

    def remove(self, consumer: C) -> None:
        i = next((k for k, owner in enumerate(self._owners) if owner is consumer), -1)
        if i < 0:
            return
        if i == len(self._ends) - 1 and i > 0:
            # the top range is removed: the range below it grows to the top
            del self._ends[i - 1]
            del self._owners[i]
        else:
            # the range above absorbs it
            del self._ends[i]
            del self._owners[i]

    def select(self, key_hash: int) -> C | None:
        if not self._ends:
            return None
        slot = key_hash % self.range_size
        return self._owners[bisect.bisect_left(self._ends, slot)]

    def ranges(self) -> list[tuple[int, int, C]]:
        """``(first slot, last slot, consumer)`` in slot order (stats, tests)."""
        out = []
        lower = 0
        for end, owner in zip(self._ends, self._owners, strict=True):
            out.append((lower, end, owner))
            lower = end + 1
        return out


class StickySelector(Generic[C]):
    """Key_Shared STICKY: each consumer brings its own inclusive slot ranges."""

    def __init__(self, *, range_size: int = RANGE_SIZE) -> None:
        self.range_size = range_size
        self._ranges: list[tuple[int, int, C]] = []  # sorted by start

    def add(self, consumer: C, ranges: Sequence[tuple[int, int]]) -> None:
        if not ranges:
            raise AssignError("a sticky Key_Shared consumer must declare hash ranges")
        new = sorted(ranges)
        for start, end in new:
            if not 0 <= start <= end < self.range_size:
                raise AssignError(f"hash range [{start}, {end}] is outside [0, {self.range_size})")
        for (s1, e1), (s2, _) in itertools.pairwise(new):
            if s2 <= e1:
                raise AssignError(f"hash ranges [{s1}, {e1}] and [{s2}, ...] overlap")
        for start, end in new:
            for s, e, owner in self._ranges:
                if start <= e and s <= end:
                    raise AssignError(
                        f"hash range [{start}, {end}] overlaps [{s}, {e}] "
                        f"of consumer {owner.consumer_name}"
                    )
        self._ranges.extend((s, e, consumer) for s, e in new)
        self._ranges.sort(key=lambda r: r[0])

    def remove(self, consumer: C) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, key_hash: int) -> C | None:
        slot = key_hash % self.range_size
        i = bisect.bisect_right(self._ranges, slot, key=lambda r: r[0]) - 1
        if i >= 0:
            start, end, owner = self._ranges[i]
            if start <= slot <= end:
                return owner
        return None

    def ranges(self) -> list[tuple[int, int, C]]:
        return list(self._ranges)


class KeyHashOwners(Generic[C]):
    """Key_Shared: which consumer owns a key's hash slot, in the subscription's mode --
    AUTO_SPLIT (:class:`AutoSplitSelector`) or STICKY (:class:`StickySelector`)."""

    def __init__(self, *, sticky: bool) -> None:
        self.sticky = sticky
        self._auto: AutoSplitSelector[C] = AutoSplitSelector()
        self._declared: StickySelector[C] = StickySelector()

    def add(self, consumer: C, declared: Sequence[tuple[int, int]]) -> None:
        """Place a consumer (``declared``: its own ranges, STICKY only); AssignError when it
        cannot be placed."""
        if self.sticky:
            self._declared.add(consumer, declared)
        else:
            self._auto.add(consumer)

    def remove(self, consumer: C) -> None:
        if self.sticky:
            self._declared.remove(consumer)
        else:
            self._auto.remove(consumer)

    def select(self, key_hash: int) -> C | None:
        return self._declared.select(key_hash) if self.sticky else self._auto.select(key_hash)

    def ranges_of(self, consumer: C) -> list[str]:
        """Its ranges as Pulsar's stats print them: ``["[0, 32767]", ...]``."""
        sel = self._declared if self.sticky else self._auto
        return [f"[{s}, {e}]" for s, e, c in sel.ranges() if c is consumer]
