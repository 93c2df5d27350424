"""Deleting ledgers and compacting gives the disk space back and keeps live entries readable."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from magnetar.bookie.storage import api, compaction, entrylog
from tests.integration.bookie_storage.conftest import Open, add, payload

L = api.LedgerId
E = api.EntryId
SIZE = 8 * 1024


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_size
    return total


async def fill(s: api.LedgerStorage, ledgers: list[int], entries: int) -> None:
    for start in range(0, entries, 25):
        for lid in ledgers:  # interleaved: every entry log holds every ledger
            results = await s.add_entries(
                [add(lid, e, payload(lid, e, SIZE)) for e in range(start, start + 25)]
            )
            assert all(r.ok for r in results)
        await s.flush()


async def test_delete_and_compact_frees_disk_and_keeps_live_ledgers(
    open_storage: Open, tmp_path: Path
) -> None:
    s = await open_storage(entry_log_max_bytes=600 * 1024)
    await fill(s, [1, 2, 3], 100)  # ~2.4 MiB, several entry logs
    before = dir_bytes(tmp_path / "data")
    logs_before = s.stats().entry_logs
    assert logs_before >= 3
    await s.delete_ledger(L(1))
    await s.delete_ledger(L(2))
    freed = await s.compact()
    after = dir_bytes(tmp_path / "data")
    assert freed > 0
    assert after < before - 1_000_000, (before, after)
    assert s.stats().compacted_logs >= logs_before - 1
    got = await s.read_range(L(3), E(0), E(99), 1 << 30)
    assert got == [(e, payload(3, e, SIZE)) for e in range(100)]
    for lid in (1, 2):
        with pytest.raises(api.NoSuchLedgerError):
            await s.read_entry(L(lid), E(0))
    await s.close()
    s2 = await open_storage()
    assert await s2.list_ledgers() == [3]
    assert await s2.read_entry(L(3), E(57)) == payload(3, 57, SIZE)
    with pytest.raises(api.NoSuchLedgerError):
        await s2.read_entry(L(1), E(0))
    assert await s2.compact() == 0  # nothing left to collect


async def test_logs_of_only_deleted_ledgers_are_removed_whole(open_storage: Open) -> None:
    s = await open_storage(entry_log_max_bytes=256 * 1024)
    await fill(s, [1], 60)
    await fill(s, [2], 10)
    before = s.stats().entry_log_bytes
    await s.delete_ledger(L(1))
    await s.compact()
    st = s.stats()
    # two logs held only ledger 1: gone; the third is mostly ledger 2 and stays
    assert st.compacted_logs == 2
    assert st.entry_log_bytes < before - 480 * 1024
    assert await s.read_entry(L(2), E(9)) == payload(2, 9, SIZE)


async def test_reads_during_compaction_still_succeed(open_storage: Open) -> None:
    s = await open_storage(entry_log_max_bytes=300 * 1024, read_cache_max_bytes=0)
    await fill(s, [1, 2], 100)
    await s.delete_ledger(L(1))

    async def reader() -> None:
        for _ in range(5):
            for e in range(0, 100, 7):
                assert await s.read_entry(L(2), E(e)) == payload(2, e, SIZE)
            await asyncio.sleep(0)  # yields a turn so the reads interleave with compaction

    await asyncio.gather(s.compact(), reader(), reader())
    await reader()


async def test_removed_logs_are_closed_in_the_flush_thread_not_on_the_loop(
    open_storage: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last close of an unlinked entry log is where the kernel frees its blocks (hundreds
    of ms for a few GB): the reader's descriptors of the logs a compaction removed are closed
    in the storage's flush thread, never on the event loop's."""
    s = await open_storage(entry_log_max_bytes=256 * 1024, read_cache_max_bytes=0)
    await fill(s, [1], 60)
    await fill(s, [2], 10)
    # reading ledger 1 caches a descriptor for each of its logs
    got = await s.read_range(L(1), E(0), E(59), 1 << 30)
    assert len(got) == 60
    cached = dict(s._reader._fds)
    assert len(cached) >= 2
    loop_thread = threading.current_thread().name
    closed: dict[int, str] = {}
    real_close = os.close

    def spy(fd: int) -> None:
        if fd in cached.values():
            closed[fd] = threading.current_thread().name
        real_close(fd)

    monkeypatch.setattr(os, "close", spy)
    await s.delete_ledger(L(1))
    await s.compact()
    removed = [lid for lid in cached if lid not in entrylog.list_logs(s._entry_dir)]
    assert len(removed) >= 2  # the logs that held only ledger 1
    # the flush thread runs one job at a time: this one runs after the closes queued there
    await asyncio.get_running_loop().run_in_executor(s._flush_pool, lambda: None)
    for lid in removed:
        assert cached[lid] in closed, f"the descriptor of removed log {lid} was not closed"
    assert loop_thread not in closed.values()
    assert all(name.startswith("bookie-flush") for name in closed.values()), closed
    assert await s.read_entry(L(2), E(9)) == payload(2, 9, SIZE)


async def test_compaction_steps_over_garbage_from_headers_and_is_paced(
    open_storage: Open, tmp_path: Path
) -> None:
    """The garbage of a rewritten log is skipped from its record headers (a damaged record of
    a deleted ledger does not stop the log's compaction; before, its checksum was checked and
    the log was left in place), live records are still checked, and the scan calls ``pace``
    once per record it walks over."""
    s = await open_storage(entry_log_max_bytes=600 * 1024)
    await fill(s, [1, 2, 3], 100)
    data = tmp_path / "data" / "entrylogs"
    reader = entrylog.EntryLogReader(data)
    first = entrylog.list_logs(data)[0]
    records = list(reader.scan(first))
    dead = next(r for r in records if r.ledger_id == 1)
    calls: list[None] = []
    kept = list(
        reader.scan(first, keep=lambda lid, _e, _w: lid == 3, pace=lambda: calls.append(None))
    )
    assert [r.ledger_id for r in kept] == [r.ledger_id for r in records if r.ledger_id == 3]
    assert [r.data for r in kept] == [r.data for r in records if r.ledger_id == 3]
    assert len(calls) == len(records)
    reader.close()

    with open(data / entrylog.file_name(first), "r+b") as f:  # damage a ledger-1 entry
        f.seek(dead.location.offset + entrylog.RECORD_HEAD.size + 10)
        f.write(b"\xff" * 16)
    await s.delete_ledger(L(1))
    await s.delete_ledger(L(2))
    await s.compact()
    assert first not in entrylog.list_logs(data)  # rewritten despite the damaged garbage
    got = await s.read_range(L(3), E(0), E(99), 1 << 30)
    assert got == [(e, payload(3, e, SIZE)) for e in range(100)]


def test_the_pacer_pauses_after_its_work_slice() -> None:
    busy = compaction.Pacer(work_s=0.0, pause_s=0.0)
    for _ in range(5):
        busy()
    assert busy.pauses == 5
    idle = compaction.Pacer(work_s=3600.0)
    for _ in range(5):
        idle()
    assert idle.pauses == 0
