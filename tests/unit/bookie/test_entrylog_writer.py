"""The entry log writer: the locations it hands out are where the bytes are, each once.

Why this test exists: with the writer compiled by mypyc, its write loop wrote every buffer
twice while its offsets counted it once (a slice bound evaluated twice, see
tests/unit/structure/test_slice_bounds.py), and the index pointed into the middle of records.
Whatever builds the storage, after a sync each log holds exactly the records appended to it,
back to back, at the locations returned.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.bookie.storage import entrylog, journal

MIB = 1024 * 1024


Written = dict[tuple[int, int], tuple[entrylog.Location, bytes]]


def _append_all(writer: entrylog.EntryLogWriter) -> Written:
    """Small and large entries, bytes and memoryviews, through both append paths, across
    rotations, a write buffer that fills mid-ledger and two flushes into one log;
    (ledger, entry) -> (location, data)."""
    data: dict[tuple[int, int], bytes] = {}
    pairs: list[tuple[bytes, bytes]] = []
    for ledger_id in (1, 2):
        entries: dict[int, bytes | memoryview] = {
            e: f"{ledger_id}/{e}".encode() * (e % 7 + 1) for e in range(300)
        }
        entries[300] = memoryview(b"v" * 1000)
        data.update({(ledger_id, e): bytes(d) for e, d in entries.items()})
        writer.append_ledger(ledger_id, entries, pairs)
    # five 1 MiB entries fill the 4 MiB write buffer inside one ledger's loop
    big = {e: bytes([e]) * MIB for e in range(5)}
    data.update({(3, e): d for e, d in big.items()})
    writer.append_ledger(3, dict(big), pairs)
    out: Written = {}
    for key, value in pairs:
        lid, eid = entrylog._KEY.unpack(key)
        out[(lid, eid)] = (entrylog.Location._make(entrylog.LOCATION.unpack(value)), data[lid, eid])
    for e in range(20):
        out[(4, e)] = (writer.append(4, e, b"single" * e), b"single" * e)
    writer.sync()
    # a second flush into the same log, after what the first one wrote
    more = {e: f"5/{e}".encode() for e in range(50)}
    pairs.clear()
    writer.append_ledger(5, dict(more), pairs)
    for key, value in pairs:
        lid, eid = entrylog._KEY.unpack(key)
        out[(lid, eid)] = (entrylog.Location._make(entrylog.LOCATION.unpack(value)), more[eid])
    return out


def test_every_location_holds_its_record_and_each_record_is_written_once(
    tmp_path: Path,
) -> None:
    writer = entrylog.EntryLogWriter(tmp_path, next_log_id=1, max_bytes=3 * MIB)
    written = _append_all(writer)
    writer.sync()
    logs = entrylog.list_logs(tmp_path)
    assert len(logs) > 1, "the test should cross a rotation"
    reader = entrylog.EntryLogReader(tmp_path)
    try:
        for (lid, eid), (loc, data) in written.items():
            assert reader.read(lid, eid, loc) == data
        scanned = [r for log_id in logs for r in reader.scan(log_id)]
    finally:
        reader.close()
        writer.close()
    assert len(scanned) == len(written), "the logs hold a record twice"
    assert {(r.ledger_id, r.entry_id): r.location for r in scanned} == {
        k: loc for k, (loc, _) in written.items()
    }
    for log_id in logs:
        end = max(loc.offset + loc.size for loc, _ in written.values() if loc.log_id == log_id)
        assert os.path.getsize(tmp_path / entrylog.file_name(log_id)) == end


def test_a_short_writev_is_completed_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may write less than a ``writev`` asked for; the rest follows, in order."""
    real = os.writev
    calls: list[int] = []

    def short(fd: int, buffers: list[bytes | memoryview]) -> int:
        calls.append(len(buffers))
        first = bytes(buffers[0])
        return real(fd, [first[: max(1, len(first) // 2)]])

    monkeypatch.setattr(os, "writev", short)
    chunks: list[bytes | memoryview] = [b"a" * 10, memoryview(b"b" * 2000), b"c" * 5] * 700
    path = tmp_path / "log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        journal.write_all(fd, chunks)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(chunks)
    assert len(calls) == 3, "2,100 chunks go in batches of at most 1,024"
