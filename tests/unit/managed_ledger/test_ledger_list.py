"""Position arithmetic over a ledger list, without bookies: which positions exist, what
follows a position, counts after a position, and which ledgers trimming may delete."""

from __future__ import annotations

from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.ledger_list import LedgerList, retained
from magnetar.managed_ledger.records import LedgerRecord, ManagedLedgerInfo

P = Position


def make(*closed: tuple[int, int], current: int | None = None, confirmed: int = 0) -> LedgerList:
    """Closed ledgers (id, entries) of 100 bytes an entry, then the current ledger."""
    recs = [LedgerRecord(lid, entries=n, size=100 * n, timestamp_ms=1_000) for lid, n in closed]
    if current is not None:
        recs.append(LedgerRecord(current))
    lst = LedgerList()
    lst.apply(ManagedLedgerInfo().with_ledgers(tuple(recs)))
    lst.set_current(current)
    lst.current_confirmed = confirmed
    last = next(
        (P(lid, lst.entries_in(lid) - 1) for lid in reversed(lst.ids) if lst.entries_in(lid)),
        P(-1, -1),
    )
    lst.lac = last
    return lst


def test_entries_and_contains() -> None:
    lst = make((3, 2), (5, 0), (7, 3), current=9, confirmed=1)
    assert [lst.entries_in(i) for i in (3, 5, 7, 9, 4)] == [2, 0, 3, 1, 0]
    assert lst.contains(P(3, 1)) and not lst.contains(P(3, 2))
    assert lst.contains(P(9, 0)) and not lst.contains(P(9, 1))
    assert not lst.contains(P(3, -1)) and not lst.contains(P(4, 0))
    assert lst.number_of_entries == 6
    assert lst.first_position == P(3, 0)
    assert lst.closed_size() == 500


def test_next_position_crosses_closed_ledgers_and_stays_in_the_current() -> None:
    lst = make((3, 2), (5, 0), (7, 3), current=9, confirmed=1)
    assert lst.next_position(P(3, 0)) == P(3, 1)
    assert lst.next_position(P(3, 1)) == P(5, 0)  # the next listed ledger, even if empty
    assert lst.next_position(P(9, 0)) == P(9, 1)  # the current ledger grows
    assert lst.next_position(P(3, -1)) == P(3, 0)
    closed_only = make((3, 2))
    assert closed_only.next_position(P(3, 1)) == P(3, 2)  # past the end: no next ledger


def test_normalize_moves_to_the_first_existing_position() -> None:
    lst = make((3, 2), (5, 0), (7, 3), current=9)
    assert lst.normalize(P(3, 1)) == P(3, 1)
    assert lst.normalize(P(3, 2)) == P(7, 0)  # past 3's end, skipping empty 5
    assert lst.normalize(P(1, 7)) == P(3, 0)  # a deleted (trimmed) ledger
    assert lst.normalize(P(7, -1)) == P(7, 0)
    assert lst.normalize(P(9, 5)) == P(9, 5)  # the current ledger: it will exist
    assert lst.normalize(P(10, 0)) is None
    assert make((3, 2)).normalize(P(3, 2)) is None


def test_counts_and_steps_after_a_position() -> None:
    lst = make((3, 2), (5, 0), (7, 3), current=9, confirmed=1)
    assert lst.lac == P(9, 0)
    assert lst.entries_after(P(3, -1)) == 6
    assert lst.entries_after(P(3, 1)) == 4
    assert lst.entries_after(P(7, 1)) == 2
    assert lst.entries_after(P(9, 0)) == 0
    assert lst.position_after(P(3, -1), 1) == P(3, 0)
    assert lst.position_after(P(3, 0), 2) == P(7, 0)
    assert lst.position_after(P(3, -1), 5) == P(7, 2)
    assert lst.position_after(P(3, -1), 100) == P(9, 0)  # at most the last confirmed


def test_first_position_without_entries_is_the_next_add() -> None:
    lst = make((3, 0), current=4)
    lst.lac = P(4, -1)
    assert lst.first_position == P(4, 0)
    assert lst.number_of_entries == 0


def test_retention_rules() -> None:
    r = LedgerRecord(1, entries=10, size=1000, timestamp_ms=0)
    keep = {"retention_time_s": 0, "retention_bytes": 0}
    assert not retained(r, 1000, 10_000, **keep)  # no retention
    assert retained(r, 1000, 5_000, retention_time_s=10, retention_bytes=0)
    assert not retained(r, 1000, 11_000, retention_time_s=10, retention_bytes=0)
    assert retained(r, 1000, 11_000, retention_time_s=-1, retention_bytes=0)  # unlimited
    assert retained(r, 1000, 0, retention_time_s=0, retention_bytes=1000)
    assert not retained(r, 1001, 0, retention_time_s=0, retention_bytes=1000)


def test_trimmable_stops_at_the_slowest_cursor_the_current_ledger_and_retention() -> None:
    lst = make((3, 2), (5, 2), (7, 2), current=9, confirmed=1)
    kw = {"total_size": lst.closed_size(), "now_ms": 10_000_000}
    none = {"retention_time_s": 0, "retention_bytes": 0}
    assert [r.ledger_id for r in lst.trimmable(P(5, 0), **kw, **none)] == [3]
    assert [r.ledger_id for r in lst.trimmable(P(5, 1), **kw, **none)] == [3, 5]
    # never the current ledger, even when everything is acknowledged
    assert [r.ledger_id for r in lst.trimmable(P(9, 0), **kw, **none)] == [3, 5, 7]
    assert lst.trimmable(P(9, 0), **kw, retention_time_s=-1, retention_bytes=0) == []
    # a size budget keeps the newest ledgers that fit
    got = lst.trimmable(P(9, 0), **kw, retention_time_s=0, retention_bytes=400)
    assert [r.ledger_id for r in got] == [3]
    # never the last listed ledger (a terminated list has no current one)
    closed = make((3, 2), (5, 2))
    got = closed.trimmable(P(5, 1), total_size=400, now_ms=10_000_000, **none)
    assert [r.ledger_id for r in got] == [3]
