"""Deduplication's classification without storage: new, duplicate, in flight; failures
make a sequence id sendable again; inactive producers are forgotten."""

from __future__ import annotations

from typing import Any, cast

from magnetar.broker.dedup import Deduplication, Status, Verdict
from magnetar.managed_ledger.api import Position


def _enabled() -> Deduplication:
    d = Deduplication(cast(Any, None), entries_interval=1000, inactivity_s=60, max_producers=10)
    d.status = Status.ENABLED
    return d


async def test_new_duplicate_and_in_flight() -> None:
    d = _enabled()
    assert d.check("p", 0, 0) is Verdict.NEW
    assert d.check("p", 0, 0) is Verdict.IN_FLIGHT  # not stored yet
    d.stored("p", 0, Position(1, 0))
    assert d.check("p", 0, 0) is Verdict.DUPLICATE
    assert d.check("p", 1, 1) is Verdict.NEW
    assert d.check("other", 0, 0) is Verdict.NEW  # per producer
    assert d.last_sequence_id("p") == 0
    assert d.last_sequence_id("nobody") == -1


async def test_batches_record_their_highest_id() -> None:
    d = _enabled()
    assert d.check("p", 0, 9) is Verdict.NEW
    d.stored("p", 9, Position(1, 0))
    assert d.check("p", 5, 5) is Verdict.DUPLICATE
    assert d.check("p", 9, 9) is Verdict.DUPLICATE
    assert d.check("p", 10, 19) is Verdict.NEW
    assert d.last_sequence_id("p") == 9


async def test_a_failed_store_can_be_sent_again() -> None:
    d = _enabled()
    assert d.check("p", 0, 0) is Verdict.NEW
    d.stored("p", 0, Position(1, 0))
    assert d.check("p", 1, 1) is Verdict.NEW
    d.forget_pushed("p")  # the add of 1 failed
    assert d.check("p", 1, 1) is Verdict.NEW
    d2 = _enabled()
    assert d2.check("q", 0, 0) is Verdict.NEW
    d2.forget_pushed("q")
    assert d2.check("q", 0, 0) is Verdict.NEW


async def test_inactive_producers_are_forgotten() -> None:
    d = _enabled()
    d.check("p", 3, 3)
    d.stored("p", 3, Position(1, 0))
    d.producer_disconnected("p")
    assert d.purge_inactive(now=0.0) == []
    d.producer_connected("p")
    assert d.purge_inactive(now=10**9) == []  # connected again: kept
    d.producer_disconnected("p")
    assert d.purge_inactive(now=10**9) == ["p"]
    assert d.last_sequence_id("p") == -1
