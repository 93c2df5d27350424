"""Journal record codec: every record type round-trips; malformed payloads are named errors."""

from __future__ import annotations

import pytest
from awscrt.checksums import crc32c

from magnetar.bookie.storage import api, journal


def test_add_record_round_trip_with_memoryview_data() -> None:
    payload = journal.encode_add(42, 6, b"key", [7, 8, 9], [b"seven", memoryview(b"eight"), b""])
    rec = journal.decode(payload)
    assert rec == journal.AddRecord(42, 6, b"key", [(7, b"seven"), (8, b"eight"), (9, b"")])


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (journal.encode_fence(5, b"k"), journal.FenceRecord(5, b"k")),
        (journal.encode_delete(5), journal.DeleteRecord(5)),
        (journal.encode_lac(5, 99, b"k"), journal.LacRecord(5, 99, b"k")),
    ],
)
def test_small_records_round_trip(payload: bytes, expected: journal.Record) -> None:
    assert journal.decode(payload) == expected


def test_frame_is_length_and_crc32c() -> None:
    payload = journal.encode_delete(1)
    length, crc = journal.HEADER.unpack(journal.frame(payload))
    assert length == len(payload)
    assert crc == crc32c(payload)


def test_an_add_framed_as_parts_is_the_record_framed_whole() -> None:
    """Large entries are journaled uncopied (the parts go to ``writev``): the header over the
    parts is the one over the joined payload, and the bytes written are the same."""
    datas = [b"a" * 5000, memoryview(b"b" * 7000), b""]
    parts = journal.encode_add_parts(3, 1, b"key", [4, 5, 6], datas)
    whole = journal.encode_add(3, 1, b"key", [4, 5, 6], datas)
    assert b"".join(parts) == whole
    assert parts[1] is datas[0] and parts[2] is datas[1], "the data is not copied"
    assert journal.frame_parts(parts, len(whole)) == journal.frame(whole)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x09",  # unknown type
        journal.encode_add(1, 0, b"k", [1], [b"data"])[:-1],  # entry cut short
        journal.encode_add(1, 0, b"k", [1], [b"data"]) + b"x",  # trailing garbage
        journal.encode_delete(1)[:5],
        journal.encode_fence(1, b"key")[:-1],
    ],
)
def test_malformed_payloads_raise_storage_corrupted(payload: bytes) -> None:
    with pytest.raises(api.StorageCorruptedError):
        journal.decode(payload)


def test_positions_order_by_file_then_offset() -> None:
    assert journal.Position(1, 500) < journal.Position(2, 8) < journal.Position(2, 9)
