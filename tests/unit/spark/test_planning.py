"""The Spark source's option parsing and range planning, without Spark or a broker: offsets
JSON, topic names, the entry walk that bounds a micro-batch and the checkpoint form of a
position that closed its ledger."""

from __future__ import annotations

import pytest

from magnetar.spark import options as opts
from magnetar.spark.admin import Ledger, PartitionState
from magnetar.spark.options import BEFORE_ALL, MAX_BATCH, MagnetarSourceError, Position
from magnetar.spark.read import _check_loss_needed, _entries, _offset, end_until, start_after


def test_topic_names() -> None:
    assert opts.full_topic_name("t") == "persistent://public/default/t"
    assert opts.full_topic_name("a/b/t") == "persistent://a/b/t"
    assert opts.full_topic_name("non-persistent://a/b/t") == "non-persistent://a/b/t"
    with pytest.raises(MagnetarSourceError, match="neither a short name"):
        opts.full_topic_name("a/t")


def test_offsets_json() -> None:
    parsed = opts.offsets_option(
        {"startingoffsets": '{"t": {"ledgerId": 3, "entryId": 4}, "a/b/u": "latest"}'},
        "startingOffsets",
        default="earliest",
    )
    assert parsed.spec("persistent://public/default/t") == Position(3, 4, -1)
    assert parsed.spec("persistent://a/b/u") == "latest"
    assert parsed.spec("persistent://public/default/other") == "earliest"
    for bad in ("{", "[]", '{"t": 5}', '{"t": {"ledgerId": -1, "entryId": 0}}'):
        with pytest.raises(MagnetarSourceError, match="startingOffsets"):
            opts.offsets_option({"startingoffsets": bad}, "startingOffsets", default="earliest")


def test_inclusive_start_and_exclusive_end_become_an_after_until_range() -> None:
    state = PartitionState(Position(7, 9, -1), (Ledger(7, 10, 1000),))
    assert start_after("earliest", state) == BEFORE_ALL
    assert start_after("latest", state) == Position(7, 9, -1)
    after = start_after(Position(7, 3, -1), state)
    assert after < Position(7, 3, -1) and after > Position(7, 2, MAX_BATCH)
    until = end_until(Position(7, 5, -1), state)
    assert until is not None and Position(7, 4, 0) < until < Position(7, 5, -1)
    assert end_until(Position(8, 0, -1), state) == Position(7, 9, -1)  # past the end: the end
    assert end_until("latest", PartitionState(None, ())) is None


def test_entries_between_positions_and_the_checkpoint_form() -> None:
    state = PartitionState(
        Position(5, 1, -1), (Ledger(2, 3, 300), Ledger(4, 2, 100), Ledger(5, 2, 50))
    )
    walked = [p for p, _ in _entries(state, Position(2, 1, -1), Position(5, 1, -1))]
    assert walked == [
        Position(2, 2, MAX_BATCH),
        Position(4, 0, MAX_BATCH),
        Position(4, 1, MAX_BATCH),
        Position(5, 0, MAX_BATCH),
        Position(5, 1, MAX_BATCH),
    ]
    assert [size for _, size in _entries(state, BEFORE_ALL, Position(2, 0, -1))] == [100]
    # the last entry of a closed ledger carries the ledger after it
    assert _offset(Position(4, 1, -1), state) == "4:1:-1:5"
    assert _offset(Position(4, 0, -1), state) == "4:0:-1"
    assert _offset(Position(5, 1, -1), state) == "5:1:-1"  # the open ledger: no successor yet
    assert Position.parse("4:1:-1:5") == Position(4, 1, -1)


def test_data_loss_is_the_checkpoint_ledger_gone_with_its_successor() -> None:
    state = PartitionState(Position(9, 0, -1), (Ledger(9, 1, 10),))
    assert _check_loss_needed("3:4:-1", state)
    assert not _check_loss_needed("3:4:-1:9", state)  # the read continues in ledger 9
    assert not _check_loss_needed("9:0:-1", state)
    assert not _check_loss_needed("-1:-1:-1", state)
