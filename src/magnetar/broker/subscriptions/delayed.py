"""Delayed delivery (Shared subscriptions): messages held back until their deliver-at time.

Why this module exists: the Shared policy (``dispatchers.SharedPolicy``) meets entries whose
``deliver_at_time`` lies ahead; it hands them here instead of to a consumer. They wait in a
heap ordered by time; a timer calls back (the subscription wakes its dispatch loop) when the
first comes due, and the loop takes the due ones out with :meth:`DelayedDelivery.release_due`
to put them in the replay set. A position acknowledged meanwhile leaves the held set at once;
its heap entry is passed over when it comes due.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from magnetar.broker.subscriptions.stats import now_ms
from magnetar.managed_ledger.api import Position


class DelayedDelivery:
    """The held positions of one subscription, and the timer of the first one due."""

    def __init__(self, on_due: Callable[[], None]) -> None:
        self._heap: list[tuple[int, Position]] = []
        self._held: set[Position] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0
        self._on_due = on_due

    def __len__(self) -> int:
        """Messages held now (the stats' ``msgDelayed``)."""
        return len(self._held)

    @property
    def waiting(self) -> bool:
        """Something may come due (the heap may still name acknowledged positions)."""
        return bool(self._heap)

    def add(self, position: Position, deliver_at: int) -> None:
        """Hold ``position`` until ``deliver_at`` (ms since the epoch)."""
        if position in self._held:
            return
        self._held.add(position)
        heapq.heappush(self._heap, (deliver_at, position))
        self._arm_timer()

    def discard(self, position: Position) -> None:
        """``position`` was acknowledged: it is no longer held."""
        if self._held:
            self._held.discard(position)

    def release_due(self) -> list[Position]:
        """Take out the held positions whose time has come, oldest first."""
        now = now_ms()
        heap = self._heap
        due: list[Position] = []
        while heap and heap[0][0] <= now:
            _, position = heapq.heappop(heap)
            if position in self._held:
                self._held.discard(position)
                due.append(position)
        self._arm_timer()
        return due

    def clear(self) -> None:
        """Forget every held position (a rewind, a seek, a change of type)."""
        self._heap.clear()
        self._held.clear()

    def cancel(self) -> None:
        """Stop the timer (the subscription closes)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None

    def _arm_timer(self) -> None:
        if not self._heap:
            return
        due = self._heap[0][0]
        if self._timer is not None and self._due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._due = due
        self._timer = loop.call_later(max(0.0, (due - now_ms()) / 1000), self._fired)

    def _fired(self) -> None:
        self._timer = None
        self._on_due()
