"""Reads of a managed ledger by position across its ledgers.

Why this module exists: reads go to the entry cache first and then to the bookies -- the
writer's handle for the current ledger, one read handle per closed ledger, opened on first
use and dropped when the ledger is trimmed. A ledger trimmed while it is read ends the read
at what was got (positions in deleted ledgers move to the first position that still
exists, :meth:`LedgerList.normalize`).

A ledger whose record says it is offloaded (complete) is read from its S3 objects instead,
through ``offloaded`` (the managed ledger's
:class:`~magnetar.managed_ledger.offloading.OffloadRunner`): the caller sees the same
entries. An S3 failure surfaces as the same retriable
:class:`~magnetar.managed_ledger.api.StorageUnavailableError` a bookie failure does, never
as wrong data (every entry read back is checked against the index and its CRC32C).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from magnetar.common.buffers import Payload
from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.api import Entry, Position
from magnetar.managed_ledger.cache import EntryCache
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.storage import storage_error
from magnetar.offload.errors import OffloadError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReadStats:
    cache_hits: int = 0
    bookie_entries: int = 0
    """Entries read from bookies (cache misses)."""
    offloaded_entries: int = 0
    """Entries read from offloaded ledgers (S3)."""
    cache_hit_bytes: int = 0
    miss_bytes: int = 0
    """Bytes of the entries read from bookies or S3."""
    errors: int = 0
    """Reads that failed (from bookies or S3)."""


class _Readable(Protocol):
    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]: ...


OffloadedOpener = Callable[[records.LedgerRecord], Awaitable[_Readable] | None]
"""Given a ledger's record: a reader of its offloaded copy (awaitable), or None when the
ledger is read from bookies."""


class EntryReader:
    """Reads of one managed ledger; ``current`` gives the writer's handle (or None)."""

    def __init__(
        self,
        name: str,
        ledgers: LedgerClient,
        positions: LedgerList,
        cache: EntryCache,
        current: Callable[[], LedgerHandle | None],
        offloaded: OffloadedOpener | None = None,
    ) -> None:
        self._name = name
        self._ledgers = ledgers
        self._list = positions
        self._cache = cache
        self._current = current
        self._offloaded = offloaded
        self.handles: dict[int, LedgerHandle] = {}
        """Read handles of closed ledgers (and the recovered last ledger of a previous owner)."""
        self.stats = ReadStats()

    async def recover_last(self, last: records.LedgerRecord) -> records.LedgerRecord:
        """Fence and close the previous owner's last ledger (kept open for reads); its record
        with the final end (no entries when its metadata is gone). A ledger offloaded
        completely is closed already and may have no bookie copy left (the previous owner
        closed an empty current ledger after it): its record stands as it is."""
        if last.offloaded and last.offloaded.get("complete"):
            return last
        handle = self.handles.get(last.ledger_id)
        if handle is None or not handle.closed:
            try:
                handle = await self._ledgers.open(last.ledger_id, recovery=True)
            except ledger_errors.NoSuchLedgerError:
                log.warning("%s: ledger %d has no metadata; dropped", self._name, last.ledger_id)
                return records.LedgerRecord(last.ledger_id)
            self.handles[last.ledger_id] = handle
        return records.LedgerRecord(
            last.ledger_id,
            entries=handle.last_add_confirmed + 1,
            size=handle.length,
            timestamp_ms=last.timestamp_ms or int(time.time() * 1000),
            offloaded=last.offloaded,
        )

    def forget(self, ledger_ids: Iterable[int]) -> None:
        """The ledgers are deleted: drop their cached entries and read handles."""
        for lid in ledger_ids:
            self._cache.drop_ledger(lid)
            self.handles.pop(lid, None)

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        lst = self._list
        out: list[Entry] = []
        pos = lst.normalize(start)
        size = 0
        while pos is not None and len(out) < max_entries:
            lid = pos.ledger_id
            n = lst.entries_in(lid)
            if pos.entry_id >= n:
                break
            last = min(n - 1, pos.entry_id + max_entries - len(out) - 1)
            budget = max_bytes - size if max_bytes > 0 else 0
            got = await self._read_range(lid, pos.entry_id, last, budget)
            if not got and lid not in lst.records:  # trimmed meanwhile: move on
                pos = lst.normalize(pos)
                continue
            out.extend(got)
            size += sum(len(e.data) for e in got)
            if not got or got[-1].position.entry_id < last or (max_bytes > 0 and size >= max_bytes):
                break
            pos = lst.normalize(Position(lid, last + 1))
        return out

    async def read_entry(self, position: Position) -> Entry:
        if not self._list.contains(position):
            raise api.InvalidPositionError(f"{self._name}: no entry at {position}")
        got = await self._read_range(position.ledger_id, position.entry_id, position.entry_id, 0)
        if not got:
            raise api.InvalidPositionError(f"{self._name}: no entry at {position}")
        return got[0]

    async def read_positions(self, positions: Iterable[Position]) -> list[Entry]:
        """The entries at ``positions`` that exist, in position order, read in runs."""
        wanted = sorted({p for p in positions if self._list.contains(p)})
        out: list[Entry] = []
        i = 0
        while i < len(wanted):
            j = i
            while (
                j + 1 < len(wanted)
                and wanted[j + 1].ledger_id == wanted[i].ledger_id
                and wanted[j + 1].entry_id == wanted[j].entry_id + 1
            ):
                j += 1
            out.extend(
                await self._read_range(
                    wanted[i].ledger_id, wanted[i].entry_id, wanted[j].entry_id, 0
                )
            )
            i = j + 1
        return out

    async def _read_range(self, lid: int, first: int, last: int, max_bytes: int) -> list[Entry]:
        """Entries first..last of ledger ``lid`` (all exist), cache first; stops after
        ``max_bytes`` (when > 0), returning at least one entry."""
        out: list[Entry] = []
        cached = self._cache.peek
        size = 0
        e = first
        while e <= last:
            data = cached(lid, e)
            if data is not None:
                out.append(Entry(Position(lid, e), data))
                self.stats.cache_hits += 1
                self.stats.cache_hit_bytes += len(data)
                e += 1
                size += len(data)
                if 0 < max_bytes <= size:
                    break
                continue
            end = e
            while end < last and cached(lid, end + 1) is None:
                end += 1
            try:
                handle, from_s3 = await self._handle(lid)
                got = await handle.read(e, end)
            except (ledger_errors.LedgerError, OffloadError) as err:
                if lid not in self._list.records:
                    return out  # the ledger was trimmed while it was read
                self.stats.errors += 1
                raise storage_error(err) from err
            if from_s3:
                self.stats.offloaded_entries += len(got)
            else:
                self.stats.bookie_entries += len(got)
            before = size
            for eid, payload in got:
                out.append(Entry(Position(lid, eid), payload))
                size += len(payload)
                if 0 < max_bytes <= size:
                    break
            self.stats.miss_bytes += size - before
            if 0 < max_bytes <= size:
                return out
            e = end + 1
        return out

    async def _handle(self, lid: int) -> tuple[_Readable, bool]:
        """What to read ledger ``lid`` from, and whether that is its offloaded copy."""
        current = self._current()
        if current is not None and lid == self._list.current_id:
            return current, False
        record = self._list.records.get(lid)
        if record is not None and self._offloaded is not None:
            opening = self._offloaded(record)
            if opening is not None:
                return await opening, True
        handle = self.handles.get(lid)
        if handle is None:
            handle = await self._ledgers.open(lid)
            self.handles[lid] = handle
        return handle, False
