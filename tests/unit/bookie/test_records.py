"""Entry log records and index values: round trips and checks."""

from __future__ import annotations

import pytest

from magnetar.bookie.storage import api, entrylog, index


def test_entry_log_record_round_trip() -> None:
    head, data = entrylog.encode_record(3, 4, b"payload")
    assert entrylog.decode_record(head + data, 3, 4, "t") == b"payload"


def test_entry_log_record_detects_corruption_and_misdirection() -> None:
    head, data = entrylog.encode_record(3, 4, b"payload")
    record = bytearray(head + data)
    with pytest.raises(api.StorageCorruptedError, match="holds 3/4"):
        entrylog.decode_record(bytes(record), 3, 5, "t")
    record[-1] ^= 1
    with pytest.raises(api.StorageCorruptedError, match="checksum"):
        entrylog.decode_record(bytes(record), 3, 4, "t")
    with pytest.raises(api.StorageCorruptedError, match="length"):
        entrylog.decode_record(bytes(record[:-1]), 3, 4, "t")


@pytest.mark.parametrize(
    "meta",
    [
        index.LedgerMeta(b"key", fenced=True, deleted=False, lac=5, last_entry=9),
        index.LedgerMeta(None, fenced=False, deleted=True, lac=-1, last_entry=-1),
        index.LedgerMeta(b"", fenced=False, deleted=False, lac=0, last_entry=0),
    ],
)
def test_ledger_meta_round_trip(meta: index.LedgerMeta) -> None:
    assert index.decode_meta(index.encode_meta(meta)) == meta


def test_usage_round_trip() -> None:
    assert index.decode_usage(index.encode_usage({2: 10, 1: 5})) == {1: 5, 2: 10}
