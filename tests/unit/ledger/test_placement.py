"""Rack-aware placement: ensembles spread across racks, replacements avoid neighbours."""

import random

import pytest

from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.placement import BookieInfo, RackAwarePlacement


def bookies(spec: dict[str, int]) -> list[BookieInfo]:
    out = []
    for rack, n in spec.items():
        out += [BookieInfo(f"{rack}-b{i}:3181", rack) for i in range(n)]
    return out


def rack(b: str) -> str:
    return b.split("-")[0]


def test_every_write_set_spans_racks() -> None:
    policy = RackAwarePlacement(random.Random(1))
    pool = bookies({"r1": 3, "r2": 3, "r3": 3})
    for _ in range(50):
        ens = policy.new_ensemble(pool, 6)
        assert len(set(ens)) == 6
        for start in range(6):  # Wq=2 write sets: consecutive positions
            pair = {rack(ens[start]), rack(ens[(start + 1) % 6])}
            assert len(pair) == 2, ens


def test_read_only_and_excluded_bookies_are_not_chosen() -> None:
    policy = RackAwarePlacement(random.Random(2))
    pool = [*bookies({"r1": 2}), BookieInfo("ro:1", read_only=True)]
    ens = policy.new_ensemble(pool, 2)
    assert "ro:1" not in ens
    with pytest.raises(NotEnoughBookiesError, match="need 2"):
        policy.new_ensemble(pool, 2, exclude={"r1-b0:3181"})


def test_replacement_prefers_a_rack_the_neighbours_lack() -> None:
    policy = RackAwarePlacement(random.Random(3))
    pool = bookies({"r1": 2, "r2": 2, "r3": 1})
    ensemble = ["r1-b0:3181", "r2-b0:3181", "r1-b1:3181"]
    chosen = {policy.replace(pool, ensemble, 1, exclude={"r2-b0:3181"}) for _ in range(40)}
    assert chosen == {"r2-b1:3181", "r3-b0:3181"}  # never r1, the neighbours' rack


def test_no_replacement_left() -> None:
    policy = RackAwarePlacement()
    pool = bookies({"r1": 3})
    with pytest.raises(NotEnoughBookiesError, match="no writable bookie"):
        policy.replace(pool, [b.bookie_id for b in pool], 0)


def test_replacement_prefers_a_rack_the_whole_ensemble_lacks() -> None:
    policy = RackAwarePlacement(random.Random(4))
    pool = bookies({"r1": 2, "r2": 2, "r3": 2, "r4": 1, "r5": 1})
    ensemble = ["r1-b0:3181", "r2-b0:3181", "r3-b0:3181", "r4-b0:3181", "r2-b1:3181"]
    chosen = {policy.replace(pool, ensemble, 2, exclude={"r3-b0:3181"}) for _ in range(40)}
    assert chosen == {"r3-b1:3181", "r5-b0:3181"}  # r1 is a neighbour of nobody, but taken


def test_min_racks_per_write_quorum_enforced() -> None:
    pool = bookies({"r1": 3, "r2": 1})
    lenient = RackAwarePlacement(random.Random(5), min_racks_per_write_quorum=2)
    assert len(lenient.new_ensemble(pool, 3)) == 3  # not enforced: fewer racks is allowed
    strict = RackAwarePlacement(
        random.Random(5), min_racks_per_write_quorum=2, enforce_min_racks=True, write_quorum=2
    )
    with pytest.raises(NotEnoughBookiesError, match="minNumRacksPerWriteQuorum=2"):
        strict.new_ensemble(pool, 3)
    assert {rack(b) for b in strict.new_ensemble(pool, 2)} == {"r1", "r2"}
    with pytest.raises(NotEnoughBookiesError, match="keeping minNumRacksPerWriteQuorum=2"):
        strict.replace(pool, ["r1-b0:3181", "r2-b0:3181"], 1, exclude={"r2-b0:3181"})
