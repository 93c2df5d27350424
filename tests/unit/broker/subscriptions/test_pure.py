"""Pure pieces: sticky-key hashing, hash-range selectors, consumer selection, ack-set math,
entry metadata."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from magnetar.broker.subscriptions import (
    acks,
    delayed,
    entries,
    hashing,
    redelivery,
    selectors,
    stats,
)
from magnetar.managed_ledger.api import Position
from magnetar.wire import batch
from tests.unit.broker.subscriptions.fakes import entry_data


@dataclass(eq=False)
class C:
    consumer_name: str
    priority_level: int = 0


# -- hashing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"hello", 0, 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
        (b"abc", 0, 0xB3DD93FA),
        (b"abcd", 0, 0x43ED676A),
    ],
)
def test_murmur3_known_vectors(data: bytes, seed: int, expected: int) -> None:
    assert hashing.murmur3_32(data, seed) == expected


def test_sticky_hash_is_non_negative_31_bits() -> None:
    for k in range(2000):
        h = hashing.sticky_key_hash(f"key-{k}".encode())
        assert 0 <= h <= 0x7FFFFFFF
        assert 0 <= hashing.key_slot(f"key-{k}".encode()) < hashing.RANGE_SIZE


# -- auto-split hash ranges ------------------------------------------------------------------


def test_auto_split_halves_the_biggest_range() -> None:
    sel: selectors.AutoSplitSelector[C] = selectors.AutoSplitSelector()
    a, b, c, d = C("a"), C("b"), C("c"), C("d")
    sel.add(a)
    assert [(s, e, x.consumer_name) for s, e, x in sel.ranges()] == [(0, 65536, "a")]
    sel.add(b)  # the newcomer takes the lower half
    assert [(s, e, x.consumer_name) for s, e, x in sel.ranges()] == [
        (0, 32768, "b"),
        (32769, 65536, "a"),
    ]
    sel.add(c)  # both halves equally big: the first is split
    assert [x.consumer_name for *_, x in sel.ranges()] == ["c", "b", "a"]
    assert sel.ranges()[0][1] == 16384
    sel.add(d)  # now a's half is the biggest
    assert [x.consumer_name for *_, x in sel.ranges()] == ["c", "b", "d", "a"]
    assert sel.select(0) is c
    assert sel.select(16384) is c
    assert sel.select(16385) is b
    assert sel.select(65535) is a
    assert sel.select(65536 + 5) is c  # hash modulo the range size


def test_auto_split_remove_merges_into_the_neighbour() -> None:
    sel: selectors.AutoSplitSelector[C] = selectors.AutoSplitSelector()
    a, b, c = C("a"), C("b"), C("c")
    for x in (a, b, c):
        sel.add(x)
    sel.remove(b)  # a middle range: the range above absorbs it
    assert [(s, e, x.consumer_name) for s, e, x in sel.ranges()] == [
        (0, 16384, "c"),
        (16385, 65536, "a"),
    ]
    sel.remove(a)  # the top range: the one below grows to the top
    assert [(s, e, x.consumer_name) for s, e, x in sel.ranges()] == [(0, 65536, "c")]
    sel.remove(c)
    assert sel.select(5) is None


def test_auto_split_every_slot_has_exactly_one_owner() -> None:
    sel: selectors.AutoSplitSelector[C] = selectors.AutoSplitSelector()
    cs = [C(str(i)) for i in range(7)]
    for x in cs:
        sel.add(x)
    sel.remove(cs[3])
    ranges = sel.ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == 65536
    for (_, e1, _), (s2, _, _) in itertools.pairwise(ranges):
        assert s2 == e1 + 1
    for slot in range(0, 65536, 97):
        owner = sel.select(slot)
        assert any(s <= slot <= e and x is owner for s, e, x in ranges)


def test_auto_split_runs_out_of_ranges() -> None:
    sel: selectors.AutoSplitSelector[C] = selectors.AutoSplitSelector(range_size=8)
    for i in range(4):
        sel.add(C(str(i)))
    with pytest.raises(selectors.AssignError):
        sel.add(C("x"))


def test_sticky_ranges_and_overlaps() -> None:
    sel: selectors.StickySelector[C] = selectors.StickySelector()
    a, b = C("a"), C("b")
    sel.add(a, [(0, 99), (200, 299)])
    sel.add(b, [(100, 199)])
    assert sel.select(50) is a and sel.select(150) is b and sel.select(250) is a
    assert sel.select(300) is None  # nobody owns it: its entries wait
    with pytest.raises(selectors.AssignError):
        sel.add(C("c"), [(250, 400)])
    with pytest.raises(selectors.AssignError):
        sel.add(C("d"), [])
    sel.remove(a)
    assert sel.select(50) is None


# -- single active consumer (Exclusive / Failover) -----------------------------------------


def test_pick_active_by_priority_then_name() -> None:
    b, a, z = C("b"), C("a"), C("z", priority_level=-1)
    assert selectors.pick_active([]) is None
    assert selectors.pick_active([b, a]) is a
    assert selectors.pick_active([b, a, z]) is z  # lower level = higher priority
    assert selectors.pick_active([C("a", 2), C("b", 1)]).consumer_name == "b"


def test_pick_active_on_partitions_spreads_by_index() -> None:
    cs = [C("c"), C("a"), C("b"), C("low", priority_level=5)]
    picked = [selectors.pick_active(cs, partition_index=p).consumer_name for p in range(6)]
    assert picked == ["a", "b", "c", "a", "b", "c"]  # only the top priority level counts


def test_round_robin_prefers_priority_and_skips_full_consumers() -> None:
    rr: selectors.RoundRobin[C] = selectors.RoundRobin()
    a, b, c = C("a"), C("b"), C("c", priority_level=1)
    cs = [a, b, c]
    order = [rr.pick(cs, lambda x: True).consumer_name for _ in range(4)]
    assert order == ["a", "b", "a", "b"]  # c only when a and b cannot take
    assert rr.pick(cs, lambda x: x is not a) is b
    assert rr.pick(cs, lambda x: x is c) is c
    assert rr.pick(cs, lambda x: False) is None


# -- acks -----------------------------------------------------------------------------------


def test_acked_indexes_from_ack_set() -> None:
    words = batch.ack_set_from_unacked([1, 3, 4])  # bit set = still unacked
    assert acks.acked_indexes(words, 6) == [0, 2, 5]
    assert acks.unacked_count(words) == 3
    assert acks.unacked_count(batch.full_ack_set(100), 70) == 70
    assert acks.acked_indexes([], 3) == [0, 1, 2]
    # a word with the sign bit set (index 63 unacked) reads as unsigned
    words = batch.ack_set_from_unacked([63, 64])
    assert words[0] < 0
    assert acks.acked_indexes(words, 66) == [*range(63), 65]


def test_position_of_normalises_unsigned_ids() -> None:
    from magnetar.wire import pb

    mid = pb.MessageIdData(ledgerId=2**64 - 1, entryId=2**64 - 1)
    assert acks.position_of(mid) == Position(-1, -1)
    assert acks.previous_in_ledger(Position(3, 0)) is None
    assert acks.previous_in_ledger(Position(3, 5)) == Position(3, 4)


# -- entry metadata --------------------------------------------------------------------------


def test_entry_meta_reads_batch_size_key_and_times() -> None:
    meta = entries.read_meta(entry_data(batch_size=5, key="k", publish_time=42, deliver_at=99))
    assert meta.num_messages == 5 and meta.is_batch
    assert meta.publish_time == 42 and meta.deliver_at == 99
    assert meta.key_hash == hashing.sticky_key_hash(b"k")
    single = entries.read_meta(entry_data())
    assert single.num_messages == 1 and not single.is_batch
    assert single.key_hash == hashing.sticky_key_hash(entries.NONE_KEY)


def test_entry_meta_survives_garbage() -> None:
    meta = entries.read_meta(b"\x00\x00\x00\xffgarbage")
    assert meta.num_messages == 1


def test_meta_cache_is_bounded() -> None:
    from magnetar.managed_ledger.api import Entry

    cache = entries.EntryMetaCache(capacity=3)
    data = entry_data()
    for i in range(5):
        cache.get(Entry(Position(1, i), data))
    assert cache.lookup(Position(1, 0)) is None
    assert cache.lookup(Position(1, 4)) is not None


def test_split_entry_with_and_without_checksum() -> None:
    from magnetar.wire import frames, pb

    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    for checksum in (True, False):
        data = frames.encode_headers_and_payload(md, b"payload", checksum=checksum)
        raw, payload = entries.split_entry(data)
        assert frames.parse_message_metadata(raw).publish_time == 5
        assert bytes(payload) == b"payload"
    with pytest.raises(entries.CorruptMetadataError):
        entries.split_entry(b"\x00\x00\x01\x00ab")


# -- redelivery state and delayed delivery --------------------------------------------------


def test_replay_set_counts_key_hashes() -> None:
    r = redelivery.Redelivery()
    r.park(Position(1, 1), 7)
    r.park(Position(1, 2), 7)
    r.park(Position(1, 2), 7)  # parked twice: once in the set
    assert r.replay_hashes == {7: 2}
    r.drop(Position(1, 1))
    assert r.replay_hashes == {7: 1}
    r.acked(Position(1, 2))
    assert r.replay == {} and r.replay_hashes == {}


def test_redelivery_counts_follow_acknowledgements() -> None:
    r = redelivery.Redelivery()
    r.count({Position(1, 1): (3, 0), Position(1, 2): (1, 0)})
    r.count({Position(1, 2): (1, 0)})
    assert r.counts == {Position(1, 1): 1, Position(1, 2): 2}
    assert r.redelivered.msgs == 5
    r.acked_upto(Position(1, 1))
    assert r.counts == {Position(1, 2): 2}
    r.rewind = True
    r.park(Position(1, 3), 0)
    r.reset()
    assert (r.counts, r.replay, r.rewind) == ({}, {}, False)


async def test_delayed_delivery_releases_what_is_due() -> None:
    fired: list[bool] = []
    d = delayed.DelayedDelivery(on_due=lambda: fired.append(True))
    now = stats.now_ms()
    d.add(Position(1, 2), now - 1)
    d.add(Position(1, 1), now - 2)
    d.add(Position(1, 3), now + 3_600_000)
    d.discard(Position(1, 2))  # acknowledged while held
    assert len(d) == 2 and d.waiting
    assert d.release_due() == [Position(1, 1)]
    assert len(d) == 1
    d.cancel()
    d.clear()
    assert len(d) == 0 and not d.waiting and not fired
