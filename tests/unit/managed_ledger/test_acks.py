"""The acknowledgement state of a cursor, without storage."""

from __future__ import annotations

import pytest

from magnetar.managed_ledger.acks import AckState, ack_set_words, indexes_of_words
from magnetar.managed_ledger.api import Position

# Ledgers 3 (entries 0..9) and 5 (0..9).
SIZES = {3: 10, 5: 10}


def nxt(p: Position) -> Position:
    if p.entry_id + 1 < SIZES.get(p.ledger_id, 0):
        return Position(p.ledger_id, p.entry_id + 1)
    later = [lid for lid in sorted(SIZES) if lid > p.ledger_id]
    return Position(later[0], 0) if later else Position(p.ledger_id, p.entry_id + 1)


def P(text: str) -> Position:
    return Position.parse(text)


def test_individual_ranges_in_pulsar_format() -> None:
    s = AckState(P("3:-1"))
    for p in ("3:2", "3:3", "3:6", "5:0"):
        assert s.delete(P(p))
    assert not s.delete(P("3:2"))
    assert s.ranges_str() == "[(3:1..3:3], (3:5..3:6], (5:-1..5:0]]"
    assert s.deleted_count() == 4
    assert s.is_deleted(P("3:6")) and not s.is_deleted(P("3:5"))
    assert not s.advance(nxt)


def test_mark_delete_absorbs_the_acknowledged_prefix_across_ledgers() -> None:
    s = AckState(P("3:-1"))
    for e in range(1, 10):
        s.delete(Position(3, e))
    s.delete(P("5:0"))
    s.delete(P("5:2"))
    s.delete(P("3:0"))
    assert s.advance(nxt)
    assert s.mark_delete == P("5:0")
    assert s.ranges_str() == "[(5:1..5:2]]"
    s.set_mark_delete(P("5:4"))
    assert s.ranges_str() == "[]" and s.deleted_count() == 0
    assert not s.delete(P("5:3"))


def test_batch_acks() -> None:
    s = AckState(P("3:-1"))
    assert not s.batch_ack(P("3:0"), [0, 1], 3)
    words = s.unacked_batch_words(P("3:0"))
    assert words == [0b100]
    assert s.batch_ack(P("3:0"), [2], 3)
    assert s.unacked_batch_words(P("3:0")) is None
    s.batch_ack(P("3:4"), [1], 2)
    s.set_mark_delete(P("3:4"))
    assert s.batch_count == 0
    s.batch_ack(P("3:5"), [0], 2)
    s.delete(P("3:5"))
    assert s.batch_count == 0


@pytest.mark.parametrize("size", [1, 63, 64, 65, 200])
def test_ack_set_words_roundtrip(size: int) -> None:
    unacked = [i for i in range(size) if i % 3 != 1]
    words = ack_set_words(unacked, size)
    assert indexes_of_words(words) == unacked
    assert all(-(2**63) <= w < 2**63 for w in words)


def test_ack_set_words_like_java_bitset() -> None:
    assert ack_set_words([63], 64) == [-(2**63)]
    assert ack_set_words([], 10) == []
    assert ack_set_words([0, 64], 100) == [1, 1]


def test_encode_decode() -> None:
    s = AckState(P("3:1"), {"a": 5})
    s.delete(P("3:4"))
    s.delete(P("5:7"))
    s.batch_ack(P("5:8"), [1, 2], 10)
    t = AckState.decode(s.encode())
    assert t.mark_delete == s.mark_delete
    assert t.properties == {"a": 5}
    assert t.ranges_str() == s.ranges_str()
    assert t.unacked_batch_words(P("5:8")) == s.unacked_batch_words(P("5:8"))


def test_big_runs_stay_compact() -> None:
    s = AckState(P("3:-1"))
    for e in range(1, 100_000, 2):
        s.delete(Position(7, e))
    assert len(s.encode()) < 200_000
