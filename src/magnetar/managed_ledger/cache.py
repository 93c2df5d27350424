"""The entry caches: recently added entries kept in memory so tailing cursors never touch a
bookie (tail reads come from the broker's entry cache), under one budget for the broker.

Why a module of its own: it is on both hot paths (every add inserts, every tail read looks
up), and its bound is the broker's memory. Each managed ledger has an :class:`EntryCache`;
all of a broker's caches share one :class:`CacheBudget` (Pulsar's
``managedLedgerCacheSizeMB``), so one topic whose consumers fall behind may use what idle
topics do not. Entries are kept by reference (the caller's bytes, never copied) and dropped:

* early, when every cursor of their managed ledger has read past them, or their ledger is
  deleted;
* to make room, once the caches together exceed the budget: down to the budget's watermark
  (Pulsar's ``managedLedgerCacheEvictionWatermark``, 0.9), taken from the largest caches
  that together hold more than half of the total, each in proportion to its size, oldest
  entries first (Pulsar's default eviction policy).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Final

from magnetar.common.buffers import Payload

Key = tuple[int, int]
"""(ledger id, entry id)."""

MiB: Final = 1024 * 1024
WATERMARK: Final = 0.9
"""Eviction brings the caches down to this fraction of the budget."""
_CONSIDERED: Final = 0.5
"""Eviction takes from the largest caches that together hold more than this fraction."""


class CacheBudget:
    """The bound all entry caches of one broker process share."""

    __slots__ = ("caches", "evictions", "max_bytes", "size", "watermark")

    def __init__(self, max_bytes: int, *, watermark: float = WATERMARK) -> None:
        self.max_bytes = max_bytes
        self.watermark = watermark
        self.size = 0
        """Bytes in all the caches."""
        self.evictions = 0
        """Times entries were dropped to bring the caches under the budget."""
        self.caches: set[EntryCache] = set()

    def evict(self) -> None:
        """Bring the caches down to the watermark (the caller saw them over the budget)."""
        self.evictions += 1
        to_free = self.size - int(self.max_bytes * self.watermark)
        largest = sorted(self.caches, key=_size, reverse=True)
        chosen: list[EntryCache] = []
        held = 0
        for cache in largest:
            if cache.size <= 0:
                break
            chosen.append(cache)
            held += cache.size
            if held > self.size * _CONSIDERED:
                break
        if not held:
            return
        for cache in chosen:
            # each in proportion to its size, at least one byte (so one entry) from each
            cache.evict_bytes(max(1, to_free * cache.size // held))


def _size(cache: EntryCache) -> int:
    return cache.size


class EntryCache:
    """One managed ledger's cached entries, under ``budget``."""

    __slots__ = (
        "_entries", "_order", "budget", "evicted", "evictions", "hits", "inserted", "misses",
        "size",
    )  # fmt: skip

    def __init__(self, budget: CacheBudget) -> None:
        self.budget = budget
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.inserted = 0
        """Entries put in (Pulsar's pulsar_ml_cache_inserted_entries_total)."""
        self.evicted = 0
        """Entries dropped to make room or because every reader was past them."""
        self.evictions = 0
        """Times entries were dropped from this cache to bring the caches under the budget."""
        self._entries: dict[Key, Payload] = {}
        self._order: deque[Key] = deque()
        budget.caches.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, ledger_id: int, entry_id: int, data: Payload) -> None:
        budget = self.budget
        n = len(data)
        if n > budget.max_bytes * budget.watermark:
            return  # (also: a budget of 0 caches nothing)
        key = (ledger_id, entry_id)
        if key in self._entries:
            return
        self._entries[key] = data
        self._order.append(key)
        self.size += n
        budget.size += n
        self.inserted += 1
        if budget.size > budget.max_bytes:
            budget.evict()

    def get(self, ledger_id: int, entry_id: int) -> Payload | None:
        data = self._entries.get((ledger_id, entry_id))
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def peek(self, ledger_id: int, entry_id: int) -> Payload | None:
        """The cached entry, without counting a hit or a miss (the managed ledger's reads
        count theirs in :class:`~magnetar.managed_ledger.reader.ReadStats`)."""
        return self._entries.get((ledger_id, entry_id))

    def evict_bytes(self, amount: int) -> None:
        """Drop the oldest entries until ``amount`` bytes are gone (or none is left)."""
        self.evictions += 1
        entries, order = self._entries, self._order
        freed = 0
        while freed < amount and order:
            data = entries.pop(order.popleft(), None)
            if data is not None:
                freed += len(data)
                self.evicted += 1
        self._shrink(freed)

    def evict_before(self, ledger_id: int, entry_id: int) -> None:
        """Drop entries before (ledger_id, entry_id): every reader is past them."""
        entries, order = self._entries, self._order
        limit = (ledger_id, entry_id)
        freed = 0
        while order and order[0] < limit:
            data = entries.pop(order.popleft(), None)
            if data is not None:
                freed += len(data)
                self.evicted += 1
        self._shrink(freed)

    def drop_ledger(self, ledger_id: int) -> None:
        freed = 0
        for key in [k for k in self._entries if k[0] == ledger_id]:
            freed += len(self._entries.pop(key))
        self._shrink(freed)

    def clear(self) -> None:
        self._entries.clear()
        self._order.clear()
        self._shrink(self.size)

    def close(self) -> None:
        """The managed ledger closed: drop everything and leave the budget."""
        self.clear()
        self.budget.caches.discard(self)

    def _shrink(self, freed: int) -> None:
        self.size -= freed
        self.budget.size -= freed


def memory_limit() -> int:
    """The memory this process may use: its cgroup's limit when it has one (a container's),
    else the machine's physical memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:  # "max" or a huge number: no limit
            return int(raw)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_size_mb(*, processes: int = 1) -> int:
    """The budget when ``managedLedgerCacheSizeMB`` is not set: a fifth of the memory the
    broker may use (Pulsar: a fifth of the JVM's direct memory), at least 64 MiB, at most
    1 GiB (a Python broker has no separate direct-memory limit to bound it), shared by the
    ``processes`` of a multi-process broker."""
    fifth = memory_limit() // 5 // MiB
    return max(64, min(1024, fifth)) // max(1, processes)
