"""The write cache (entries durable in the journal, not yet in entry logs) and the read cache.

Why this module exists: the journal is write-only in normal operation, so an entry must stay
readable from memory until a flush has put it in an entry log and the index — that is the write
cache, swapped out whole at each flush (the storage keeps the one being flushed readable too)
and handed to the flush thread sorted by ledger then entry. Entries read back from entry logs
go through a small LRU-by-bytes read cache so tailing or re-reading a ledger does not hit the
disk each time. Both are plain single-threaded structures used on the event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

Data = bytes | memoryview


class WriteCache:
    """ledger -> entry -> data. Mutated on the loop; frozen once handed to a flush."""

    __slots__ = ("bytes", "entries", "ledgers")

    def __init__(self) -> None:
        self.ledgers: dict[int, dict[int, Data]] = {}
        self.bytes = 0
        self.entries = 0

    def put_many(
        self, ledger_id: int, entry_ids: Sequence[int], datas: Sequence[Data], nbytes: int
    ) -> None:
        """Add entries of one ledger; ``nbytes`` is the total size of ``datas``."""
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = {}
        elif not entries.keys().isdisjoint(entry_ids):
            # rewritten entries (recovery): do not count them twice
            nbytes -= sum(len(entries[e]) for e in set(entry_ids) if e in entries)
        before = len(entries)
        entries.update(zip(entry_ids, datas, strict=True))
        self.entries += len(entries) - before
        self.bytes += nbytes

    def get(self, ledger_id: int, entry_id: int) -> Data | None:
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self.ledgers.pop(ledger_id, None)
        if entries:
            self.entries -= len(entries)
            self.bytes -= sum(len(d) for d in entries.values())

    def sorted_items(self, skip: frozenset[int] = frozenset()) -> Iterator[tuple[int, int, Data]]:
        """(ledger, entry, data) ordered by ledger then entry."""
        for ledger_id in sorted(self.ledgers):
            if ledger_id in skip:
                continue
            entries = self.ledgers[ledger_id]
            for entry_id in sorted(entries):
                yield ledger_id, entry_id, entries[entry_id]


class ReadCache:
    """LRU of entries read from entry logs, bounded by total data bytes."""

    __slots__ = ("_entries", "bytes", "hits", "max_bytes", "misses")

    def __init__(self, max_bytes: int) -> None:
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        data = self._entries.get(key)
        if data is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return data

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        self._entries[key] = data
        self.bytes += len(data)
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= len(evicted)

    def __len__(self) -> int:
        return len(self._entries)
