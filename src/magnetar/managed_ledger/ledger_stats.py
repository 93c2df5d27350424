"""What a managed ledger reports about itself: its ledgers (``LedgerInfo``) and Pulsar's
``internalStats`` shape (admin ``/internalStats``).

Why this module exists: these are read-only views assembled from the managed ledger's parts
(the list, the writer, the cursors, the cache); kept apart from ``ledger.py``, which changes
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, offloading
from magnetar.managed_ledger.cache import EntryCache
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.writer import LedgerWriter


def ledger_infos(lst: LedgerList, handle: LedgerHandle | None) -> list[api.LedgerInfo]:
    """The ledgers in list order; the current one with its live length."""
    out = []
    for lid in lst.ids:
        r = lst.records[lid]
        if lid == lst.current_id and handle is not None:
            out.append(api.LedgerInfo(lid, lst.current_confirmed, handle.length, 0))
        else:
            offloaded = offloading.is_offloaded(r)
            where = offloading.location_summary(r)
            out.append(api.LedgerInfo(lid, r.entries, r.size, r.timestamp_ms, offloaded, where))
    return out


def internal_stats(
    lst: LedgerList,
    writer: LedgerWriter,
    cursors: Mapping[str, Any],
    cache: EntryCache,
    total_size: int,
) -> dict[str, Any]:
    """Pulsar's ``internalStats`` of a managed ledger (cursors as ``CursorStats``)."""
    current = lst.current_id
    return {
        "entriesAddedCounter": writer.entries_added,
        "numberOfEntries": lst.number_of_entries,
        "totalSize": total_size,
        "currentLedgerEntries": lst.current_confirmed if current is not None else 0,
        "currentLedgerSize": writer.handle.length if current and writer.handle else 0,
        "waitingCursorsCount": len(writer.waiters),
        "pendingAddEntriesCount": writer.pending,
        "lastConfirmedEntry": str(lst.lac),
        "state": writer.state.value,
        "ledgers": [i.internal_stats() for i in ledger_infos(lst, writer.handle)],
        "cursors": {n: c.stats().internal_stats() for n, c in cursors.items()},
        "cacheSize": cache.size,
    }
