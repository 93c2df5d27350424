"""A topic's compacted view: its compacted ledger and the horizon it covers.

Why this module exists: the compactor switches a topic to a new compacted ledger while
``read_compacted`` subscriptions read the current one; both meet here. The view is what the
``__compaction`` cursor says (Pulsar's ``CompactedTopicImpl``): its mark-delete position is the
*horizon* (the last topic entry compaction has seen) and its ``CompactedTopicLedger``
property the ledger; a topic that loads finds both again there.

Reads look up an original position in the compacted ledger by binary search over its
entries (they are in the topic's order); positions seen are kept in a bounded cache, so a
reader that goes on from where it stopped costs no search.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Final

from magnetar.broker.compaction import format as fmt
from magnetar.managed_ledger.api import (
    AuxLedger,
    Entry,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.metadata import keys

log = logging.getLogger(__name__)

CURSOR: Final = keys.COMPACTION_CURSOR
LEDGER_PROPERTY: Final = "CompactedTopicLedger"
_CACHE_MAX: Final = 100_000


@dataclass(eq=False)
class CompactedLedger:
    """One compacted ledger (read handle) and the horizon it was written up to."""

    ledger: AuxLedger
    horizon: Position
    _positions: dict[int, Position] = field(default_factory=dict)

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def last_entry_id(self) -> int:
        return self.ledger.last_add_confirmed

    def _remember(self, entry_id: int, position: Position) -> None:
        cache = self._positions
        if len(cache) >= _CACHE_MAX:
            del cache[next(iter(cache))]
        cache[entry_id] = position

    async def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` as the topic's entries (original positions)."""
        out = []
        for entry_id, raw in await self.ledger.read(first, last):
            position, data = fmt.decode_raw(raw)
            self._remember(entry_id, position)
            out.append(Entry(position, data))
        return out

    async def position_of(self, entry_id: int) -> Position:
        found = self._positions.get(entry_id)
        if found is None:
            (entry,) = await self.read(entry_id, entry_id)
            found = entry.position
        return found

    async def find(self, position: Position) -> int | None:
        """The first entry id whose original position is at or after ``position``; None
        when every entry is before it (or the ledger is empty)."""
        lo, hi = 0, self.last_entry_id + 1
        if hi == 0 or await self.position_of(hi - 1) < position:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if await self.position_of(mid) < position:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def find_publish_time(self, publish_time: int) -> Position | None:
        """The first entry published at or after ``publish_time`` (ms), by binary search
        over the compacted entries; None when every one is older."""
        lo, hi = 0, self.last_entry_id + 1
        while lo < hi:
            mid = (lo + hi) // 2
            (entry,) = await self.read(mid, mid)
            if fmt.publish_time(entry.data) < publish_time:
                lo = mid + 1
            else:
                hi = mid
        if lo > self.last_entry_id:
            return None
        return await self.position_of(lo)

    async def last_entry(self) -> Entry | None:
        last = self.last_entry_id
        if last < 0:
            return None
        (entry,) = await self.read(last, last)
        return entry


class CompactedTopic:
    """A topic's current compacted ledger, None until its first compaction."""

    def __init__(self, managed_ledger: ManagedLedger) -> None:
        self.managed_ledger = managed_ledger
        self.current: CompactedLedger | None = None

    @property
    def horizon(self) -> Position | None:
        current = self.current
        return current.horizon if current is not None else None

    async def load(self) -> None:
        """Find the compacted ledger again from the ``__compaction`` cursor (topic load)."""
        cursor = self.managed_ledger.cursors.get(CURSOR)
        if cursor is None or LEDGER_PROPERTY not in cursor.properties:
            return
        ledger_id = int(cursor.properties[LEDGER_PROPERTY])
        try:
            ledger = await self.managed_ledger.open_aux_ledger(ledger_id)
        except ManagedLedgerError as err:
            log.warning(
                "%s: compacted ledger %d cannot be opened (%s); compacted reads see the "
                "topic as stored until the next compaction",
                self.managed_ledger.name,
                ledger_id,
                err,
            )
            return
        self.current = CompactedLedger(ledger, cursor.mark_delete_position)
        log.info(
            "%s: compacted ledger %d up to %s",
            self.managed_ledger.name,
            ledger_id,
            cursor.mark_delete_position,
        )

    def switch(self, ledger: AuxLedger, horizon: Position) -> CompactedLedger | None:
        """Serve ``ledger`` from now on; returns the previous one (for its owner to delete)."""
        previous = self.current
        self.current = CompactedLedger(ledger, horizon)
        return previous

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ``compactedLedger`` of internalStats (ledger -1 before any compaction)."""
        current = self.current
        if current is None:
            return {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False,
                    "underReplicated": False}  # fmt: skip
        return {
            "ledgerId": current.ledger_id,
            "entries": current.last_entry_id + 1,
            "size": current.ledger.length,
            "offloaded": False,
            "underReplicated": False,
        }
