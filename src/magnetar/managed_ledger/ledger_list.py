"""A managed ledger's list of ledgers as this owner last wrote it, and the position arithmetic
over it.

Why this module exists: which positions exist, what follows a position, how many entries lie
after it and which ledgers trimming may delete are pure questions about the ordered ledger
list (plus the current ledger's confirmed count and the last confirmed position). Keeping
them here, free of I/O, lets them be unit tested without bookies; the writer, the reader,
the trimmer and the cursors of :mod:`magnetar.managed_ledger.ledger` all ask this one object.

A *closed* ledger's entry count is in its record; the *current* ledger (the one being
written) counts the adds confirmed so far. Positions in deleted (trimmed) ledgers move to
the first position that still exists.
"""

from __future__ import annotations

import bisect

from magnetar.managed_ledger import records
from magnetar.managed_ledger.api import Position


def retained(
    record: records.LedgerRecord,
    remaining_bytes: int,
    now_ms: int,
    *,
    retention_time_s: float,
    retention_bytes: int,
) -> bool:
    """Retention: keep an acknowledged ledger while it is within the time window and the size
    budget (a limit of -1 is unlimited; 0 is "no retention" only when both are 0, otherwise
    "this dimension does not limit")."""
    t, b = retention_time_s, retention_bytes
    if t == 0 and b == 0:
        return False
    expired = t > 0 and (now_ms - record.timestamp_ms) > t * 1000
    over = b > 0 and remaining_bytes > b
    return not (expired or over)


class LedgerList:
    """The ledger list, the current ledger and the last confirmed position (no I/O)."""

    __slots__ = ("current_confirmed", "current_id", "ids", "info", "lac", "records")

    def __init__(self) -> None:
        self.info = records.ManagedLedgerInfo()
        self.ids: list[int] = []
        self.records: dict[int, records.LedgerRecord] = {}
        self.current_id: int | None = None
        """The ledger adds go to (None when there is none: terminated, closed, rolling)."""
        self.current_confirmed = 0
        """Entries of the current ledger confirmed so far."""
        self.lac = Position(-1, -1)
        """The last confirmed entry."""

    def apply(self, info: records.ManagedLedgerInfo) -> None:
        """Take ``info`` as the list now written."""
        self.info = info
        self.records = {r.ledger_id: r for r in info.ledgers}
        self.ids = [r.ledger_id for r in info.ledgers]

    def set_current(self, ledger_id: int | None) -> None:
        self.current_id = ledger_id
        self.current_confirmed = 0

    # --- questions about positions ---------------------------------------------------------

    def entries_in(self, ledger_id: int) -> int:
        """Entries readable in ``ledger_id`` (0 for unknown or deleted ledgers)."""
        if ledger_id == self.current_id:
            return self.current_confirmed
        r = self.records.get(ledger_id)
        return r.entries if r is not None else 0

    def contains(self, p: Position) -> bool:
        return 0 <= p.entry_id < self.entries_in(p.ledger_id)

    def normalize(self, p: Position) -> Position | None:
        """The first position at or after ``p`` that exists or will (in the current ledger);
        None when nothing can be at or after ``p``."""
        ids = self.ids
        i = bisect.bisect_left(ids, p.ledger_id)
        if i < len(ids) and ids[i] == p.ledger_id:
            lid = ids[i]
            e = p.entry_id if p.entry_id > 0 else 0
            if lid == self.current_id or e < self.entries_in(lid):
                return Position(lid, e)
            i += 1
        while i < len(ids):
            lid = ids[i]
            if lid == self.current_id or self.entries_in(lid) > 0:
                return Position(lid, 0)
            i += 1
        return None

    def next_position(self, p: Position) -> Position:
        """The position after ``p``, crossing into the next ledger at a closed ledger's end."""
        lid = p.ledger_id
        if lid == self.current_id or p.entry_id + 1 < self.entries_in(lid):
            return Position(lid, p.entry_id + 1)
        i = bisect.bisect_right(self.ids, lid)
        if i < len(self.ids):
            return Position(self.ids[i], 0)
        return Position(lid, p.entry_id + 1)

    def entries_after(self, p: Position) -> int:
        """Entries in (p, last confirmed]."""
        total = 0
        for lid in reversed(self.ids):
            if lid < p.ledger_id:
                break
            n = self.entries_in(lid)
            total += n if lid > p.ledger_id else max(0, n - p.entry_id - 1)
        return total

    def position_after(self, p: Position, n: int) -> Position:
        """The ``n``-th entry after ``p`` (counting every entry), at most the last confirmed."""
        pos = p
        remaining = n
        while remaining > 0:
            nxt = self.normalize(self.next_position(pos))
            if nxt is None or nxt > self.lac:
                break
            room = self.entries_in(nxt.ledger_id) - nxt.entry_id
            step = min(room, remaining)
            pos = Position(nxt.ledger_id, nxt.entry_id + step - 1)
            remaining -= step
        return pos

    @property
    def first_position(self) -> Position:
        """The first stored entry; with none, the position the next add will get."""
        for lid in self.ids:
            if self.entries_in(lid) > 0:
                return Position(lid, 0)
        return self.next_position(self.lac)

    @property
    def number_of_entries(self) -> int:
        return sum(self.entries_in(lid) for lid in self.ids)

    def closed_size(self) -> int:
        """Bytes in the listed ledgers other than the current one."""
        return sum(r.size for lid, r in self.records.items() if lid != self.current_id)

    # --- trimming --------------------------------------------------------------------------

    def trimmable(
        self,
        slowest: Position,
        *,
        total_size: int,
        now_ms: int,
        retention_time_s: float,
        retention_bytes: int,
    ) -> list[records.LedgerRecord]:
        """The leading ledgers that may be deleted: entirely at or before ``slowest`` (the
        slowest durable cursor's mark-delete position), outside retention, never the last
        ledger nor the current one."""
        remaining = total_size
        doomed: list[records.LedgerRecord] = []
        for r in self.info.ledgers[:-1]:
            if r.ledger_id == self.current_id:
                break
            if r.entries > 0 and Position(r.ledger_id, r.entries - 1) > slowest:
                break
            if retained(
                r,
                remaining,
                now_ms,
                retention_time_s=retention_time_s,
                retention_bytes=retention_bytes,
            ):
                break
            doomed.append(r)
            remaining -= r.size
        return doomed


class ListedPositions:
    """What a managed ledger answers straight from its ledger list (``_list``): shared by
    the managed ledger over bookies and the in-memory one."""

    _list: LedgerList

    @property
    def positions(self) -> LedgerList:
        """The ledger list: what exists, what follows what (read only)."""
        return self._list

    @property
    def last_confirmed_entry(self) -> Position:
        return self._list.lac

    @property
    def first_position(self) -> Position:
        return self._list.first_position

    @property
    def number_of_entries(self) -> int:
        return self._list.number_of_entries

    def next_position(self, p: Position) -> Position:
        return self._list.next_position(p)
