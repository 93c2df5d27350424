"""The managed ledger's offload decisions (src/magnetar/managed_ledger/offloading.py): which
ledgers the thresholds and a manual offload pick, the record transitions, the deletion lag,
and the status shape the admin API answers with."""

from __future__ import annotations

import pytest

from magnetar.managed_ledger import offloading as off
from magnetar.managed_ledger.api import ManagedLedgerConfig, Position
from magnetar.managed_ledger.records import LedgerRecord, ManagedLedgerInfo

NOW = 10_000_000
DONE = {"uuid": "u-1", "complete": True, "bookieDeleted": False, "timestamp": NOW - 5_000}


def ledgers() -> list[LedgerRecord]:
    return [
        LedgerRecord(1, entries=10, size=100, timestamp_ms=NOW - 9_000_000),
        LedgerRecord(2, entries=10, size=100, timestamp_ms=NOW - 5_000_000, offloaded=DONE),
        LedgerRecord(3, entries=0, size=0, timestamp_ms=NOW - 4_000_000),  # empty
        LedgerRecord(4, entries=10, size=100, timestamp_ms=NOW - 3_000_000),
        LedgerRecord(5, entries=10, size=100, timestamp_ms=NOW - 1_000),
        LedgerRecord(6),  # current, open
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (off.OffloadPolicy(), []),  # thresholds off
        (off.OffloadPolicy(threshold_bytes=0), [1, 4, 5]),  # everything closed
        (off.OffloadPolicy(threshold_bytes=100), [1, 4]),  # keep the newest 100 bytes
        (off.OffloadPolicy(threshold_bytes=250), [1]),
        (off.OffloadPolicy(threshold_bytes=10_000), []),
        (off.OffloadPolicy(threshold_seconds=3_500), [1]),  # closed over ~1 h ago
        (off.OffloadPolicy(threshold_seconds=60), [1, 4]),
        (off.OffloadPolicy(threshold_bytes=10_000, threshold_seconds=60), [1, 4]),
    ],
)
def test_thresholds_pick_the_oldest_closed_ledgers(
    policy: off.OffloadPolicy, expected: list[int]
) -> None:
    assert off.ledgers_over_threshold(ledgers(), 6, policy, NOW) == expected


def test_manual_offload_covers_ledgers_before_the_position() -> None:
    assert off.ledgers_before(ledgers(), 6, Position(5, 3)) == [1, 4]
    assert off.ledgers_before(ledgers(), 6, Position(6, 0)) == [1, 4, 5]
    assert off.ledgers_before(ledgers(), 6, Position(1, 0)) == []
    assert off.first_unoffloaded(ledgers()) == Position(1, 0)
    all_done = [LedgerRecord(r.ledger_id, 10, 1, 1, DONE) for r in ledgers()]
    assert off.first_unoffloaded(all_done) is None


def test_record_transitions_and_stale_attempts() -> None:
    info = ManagedLedgerInfo(ledgers=tuple(ledgers()))
    begun = off.with_offloaded(info, 4, {"uuid": "u-4", "complete": False})
    r4 = begun.ledgers[3]
    assert off.stale_attempt(r4) == "u-4" and not off.is_offloaded(r4)
    # the record survives the JSON the metadata store keeps
    again = ManagedLedgerInfo.from_json(begun.to_json())
    assert off.stale_attempt(again.ledgers[3]) == "u-4"
    done = off.with_offloaded(again, 4, {**DONE, "uuid": "u-5"})
    assert off.is_offloaded(done.ledgers[3]) and off.stale_attempt(done.ledgers[3]) is None
    assert [r.ledger_id for r in done.ledgers] == [1, 2, 3, 4, 5, 6]
    assert done.ledgers[3].entries == 10 and done.ledgers[3].size == 100
    with pytest.raises(KeyError):
        off.with_offloaded(info, 99, None)


def test_bookie_copy_goes_only_after_the_lag() -> None:
    record = LedgerRecord(2, 10, 100, 1, DONE)
    assert not off.bookie_copy_deletable(record, off.OffloadPolicy(deletion_lag_ms=6_000), NOW)
    assert off.bookie_copy_deletable(record, off.OffloadPolicy(deletion_lag_ms=5_000), NOW)
    deleted = LedgerRecord(2, 10, 100, 1, off.mark_bookie_deleted(DONE))
    assert not off.bookie_copy_deletable(deleted, off.OffloadPolicy(deletion_lag_ms=0), NOW)
    attempt = LedgerRecord(2, 10, 100, 1, {"uuid": "x", "complete": False})
    assert not off.bookie_copy_deletable(attempt, off.OffloadPolicy(deletion_lag_ms=0), NOW)


def test_status_has_pulsars_shape() -> None:
    assert off.OffloadStatus().to_json() == {
        "status": "NOT_RUN",
        "lastError": "",
        "firstUnoffloadedMessage": {"ledgerId": -1, "entryId": -1, "partitionIndex": -1},
    }
    failed = off.OffloadStatus(off.OffloadState.ERROR, "bucket x does not exist", Position(4, 0))
    assert failed.to_json(2) == {
        "status": "ERROR",
        "lastError": "bucket x does not exist",
        "firstUnoffloadedMessage": {"ledgerId": 4, "entryId": 0, "partitionIndex": 2},
    }


def test_first_unoffloaded_is_the_current_ledger_once_every_closed_one_is_offloaded() -> None:
    done = {"uuid": "u", "complete": True}
    records = [LedgerRecord(1, 5, 50, 1, done), LedgerRecord(2, 5, 50, 1, done), LedgerRecord(3)]
    assert off.first_unoffloaded(records, current_id=3) == Position(3, 0)
    assert off.first_unoffloaded(records) is None


def test_location_summary_shows_the_attempt_or_the_complete_copy() -> None:
    assert off.location_summary(LedgerRecord(1, 5, 50, 1)) is None
    attempt = {"uuid": "u", "complete": False, "bucket": "b", "dataKey": "d", "indexKey": "i"}
    summary = off.location_summary(LedgerRecord(1, 5, 50, 1, attempt))
    assert summary is not None and summary["complete"] is False and summary["dataKey"] == "d"
    done = {**attempt, "complete": True, "bookieDeleted": True}
    summary = off.location_summary(LedgerRecord(1, 5, 50, 1, done))
    assert summary is not None and summary["complete"] and summary["bookieDeleted"]


def test_policy_from_the_managed_ledger_config() -> None:
    config = ManagedLedgerConfig(
        offload_threshold_bytes=10, offload_threshold_s=20, offload_deletion_lag_ms=30
    )
    assert off.OffloadPolicy.of(config) == off.OffloadPolicy(10, 20, 30)
