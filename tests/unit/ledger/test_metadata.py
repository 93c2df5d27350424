"""Ledger metadata: striping, fragments, JSON round trip, quorum validation."""

import pytest

from magnetar.ledger.metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.ledger.recovery import fencing_covers


def meta(e: int = 3, wq: int = 2, aq: int = 2) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=aq,
        fragments=(Fragment(0, tuple(f"b{i}:1" for i in range(e))),),
        password=b"\x01\x02",
    )


def test_write_sets_stripe_round_robin() -> None:
    m = meta(3, 2, 2)
    assert m.write_set(0) == ["b0:1", "b1:1"]
    assert m.write_set(1) == ["b1:1", "b2:1"]
    assert m.write_set(2) == ["b2:1", "b0:1"]
    assert m.write_set(3) == m.write_set(0)


def test_fragments_decide_where_an_entry_lives() -> None:
    m = meta(3, 3, 2).with_fragment(10, ("b0:1", "b9:1", "b2:1"))
    assert "b1:1" in m.write_set(9) and "b9:1" not in m.write_set(9)
    assert "b9:1" in m.write_set(10) and "b1:1" not in m.write_set(10)
    # a second change at the same entry replaces the fragment instead of stacking
    m2 = m.with_fragment(10, ("b0:1", "b8:1", "b2:1"))
    assert [f.first_entry_id for f in m2.fragments] == [0, 10]


def test_json_round_trip() -> None:
    m = meta().with_fragment(5, ("b0:1", "b3:1", "b2:1"))
    closed = LedgerMetadata.from_json(m.to_json())
    assert closed == m
    c = LedgerMetadata(
        ledger_id=1,
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        fragments=(Fragment(0, ("x:1",)),),
        password=b"",
        state=LedgerState.CLOSED,
        last_entry_id=41,
        length=4200,
        custom={"topic": "t"},
    )
    assert LedgerMetadata.from_json(c.to_json()) == c


@pytest.mark.parametrize(("e", "wq", "aq"), [(2, 3, 1), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_bad_quorums_rejected(e: int, wq: int, aq: int) -> None:
    with pytest.raises(ValueError, match="quorums"):
        meta(e, wq, aq)


def test_fencing_coverage() -> None:
    m = meta(3, 3, 2)  # every write set is all three: need 2 fenced
    assert not fencing_covers(m, {0})
    assert fencing_covers(m, {0, 2})
    m = meta(3, 2, 2)  # write sets {0,1},{1,2},{2,0}: one fenced per set
    assert not fencing_covers(m, {0})
    assert fencing_covers(m, {0, 1})
    m = meta(1, 1, 1)
    assert fencing_covers(m, {0}) and not fencing_covers(m, set())
