"""The entry cache: recently added entries kept in memory so tailing cursors never touch a
bookie (tail reads come from the broker's entry cache).

Why a module of its own: it is on both hot paths (every add inserts, every tail read looks
up) and its bound is the broker's memory budget per topic. Entries are kept by reference
(the caller's bytes, never copied), evicted oldest-first once ``max_bytes`` is exceeded,
and dropped early when every cursor has read past them or their ledger is deleted.
"""

from __future__ import annotations

from collections import deque

Key = tuple[int, int]
"""(ledger id, entry id)."""


class EntryCache:
    __slots__ = (
        "_entries", "_order", "evicted", "evictions", "hits", "inserted", "max_bytes", "misses",
        "size",
    )  # fmt: skip

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.inserted = 0
        """Entries put in (Pulsar's pulsar_ml_cache_inserted_entries_total)."""
        self.evicted = 0
        """Entries dropped to make room or because every reader was past them."""
        self.evictions = 0
        """Times entries were dropped to stay under ``max_bytes``."""
        self._entries: dict[Key, bytes] = {}
        self._order: deque[Key] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        if self.max_bytes <= 0 or len(data) > self.max_bytes:
            return
        key = (ledger_id, entry_id)
        if key in self._entries:
            return
        self._entries[key] = data
        self._order.append(key)
        self.size += len(data)
        self.inserted += 1
        if self.size > self.max_bytes:
            self.evictions += 1
            self._evict(self.max_bytes)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        data = self._entries.get((ledger_id, entry_id))
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def peek(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The cached entry, without counting a hit or a miss (the managed ledger's reads
        count theirs in :class:`~magnetar.managed_ledger.reader.ReadStats`)."""
        return self._entries.get((ledger_id, entry_id))

    def _evict(self, target: int) -> None:
        entries, order = self._entries, self._order
        while self.size > target and order:
            data = entries.pop(order.popleft(), None)
            if data is not None:
                self.size -= len(data)
                self.evicted += 1

    def evict_before(self, ledger_id: int, entry_id: int) -> None:
        """Drop entries before (ledger_id, entry_id): every reader is past them."""
        entries, order = self._entries, self._order
        limit = (ledger_id, entry_id)
        while order and order[0] < limit:
            data = entries.pop(order.popleft(), None)
            if data is not None:
                self.size -= len(data)
                self.evicted += 1

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size -= len(self._entries.pop(key))

    def clear(self) -> None:
        self._entries.clear()
        self._order.clear()
        self.size = 0
