"""Durability across restarts: journal replay, torn tails, persisted fencing/LAC/deletes."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest

from magnetar.bookie.storage import api, journal
from tests.integration.bookie_storage.conftest import Open, add, payload
from tests.support.wait import eventually

L = api.LedgerId
E = api.EntryId


def journal_files(tmp_path: Path) -> list[Path]:
    return [
        tmp_path / "journal" / journal.file_name(s)
        for s in journal.list_files(tmp_path / "journal")
    ]


@pytest.mark.parametrize(
    "size",
    [64, 8192],
    ids=["small entries, journaled joined", "large entries, journaled as parts"],
)
async def test_restart_without_flush_replays_everything_acknowledged(
    open_storage: Open, size: int
) -> None:
    s = await open_storage()
    for batch in range(5):
        results = await s.add_entries(
            [
                add(
                    1 + batch % 2,
                    batch * 10 + i,
                    payload(1, batch * 10 + i, size),
                    lac=batch * 10 + i - 1,
                )
                for i in range(10)
            ]
        )
        assert all(r.ok for r in results)
    await s.close(flush=False)
    s2 = await open_storage()
    for batch in range(5):
        for i in range(10):
            eid = batch * 10 + i
            assert await s2.read_entry(L(1 + batch % 2), E(eid)) == payload(1, eid, size)
    assert await s2.last_entry_id(L(1)) == 49
    assert await s2.last_add_confirmed(L(2)) == 38


async def test_restart_after_flush_and_more_adds(open_storage: Open, tmp_path: Path) -> None:
    s = await open_storage(journal_max_file_bytes=4096)
    await s.add_entries([add(1, i, payload(1, i, 500)) for i in range(20)])
    await s.flush()
    await s.add_entries([add(1, i, payload(1, i, 500)) for i in range(20, 40)])

    # each batch rotated the journal; files whose content is flushed are deleted (the writer
    # rotates after the write that crossed the size, so wait for it, boundedly)
    async def only_the_last_journal() -> bool:
        await s.flush()
        return [p.name for p in journal_files(tmp_path)] == [journal.file_name(3)]

    await eventually(only_the_last_journal, what="older journal files released by the flush")
    await s.add_entries([add(1, i, payload(1, i, 500)) for i in range(40, 45)])
    await s.close(flush=False)
    s2 = await open_storage()
    got = await s2.read_range(L(1), E(0), E(100), 1 << 20)
    assert got == [(i, payload(1, i, 500)) for i in range(45)]


async def _two_batches_then_crash(open_storage: Open, tmp_path: Path) -> Path:
    s = await open_storage()
    assert all(r.ok for r in await s.add_entries([add(1, i, payload(1, i)) for i in range(10)]))
    assert all(r.ok for r in await s.add_entries([add(1, i, payload(1, i)) for i in range(10, 20)]))
    await s.close(flush=False)
    return journal_files(tmp_path)[-1]


async def test_journal_truncated_mid_record_loses_only_that_record(
    open_storage: Open, tmp_path: Path
) -> None:
    last = await _two_batches_then_crash(open_storage, tmp_path)
    size = last.stat().st_size
    os.truncate(last, size - 30)  # the second batch's record is now partial
    s = await open_storage()
    assert await s.read_range(L(1), E(0), E(100), 0) == [(i, payload(1, i)) for i in range(10)]
    with pytest.raises(api.NoSuchEntryError):
        await s.read_entry(L(1), E(10))
    assert await s.last_entry_id(L(1)) == 9
    # the torn tail was cut: new adds and another restart work
    assert (await s.add_entries([add(1, 10, b"again")]))[0].ok
    await s.close(flush=False)
    s = await open_storage()
    assert await s.read_entry(L(1), E(10)) == b"again"
    assert await s.read_entry(L(1), E(3)) == payload(1, 3)


async def test_journal_with_bad_crc_in_last_record_loses_only_that_record(
    open_storage: Open, tmp_path: Path
) -> None:
    last = await _two_batches_then_crash(open_storage, tmp_path)
    raw = bytearray(last.read_bytes())
    raw[-1] ^= 0xFF  # inside the second batch's last entry
    last.write_bytes(bytes(raw))
    s = await open_storage()
    assert await s.read_range(L(1), E(0), E(100), 0) == [(i, payload(1, i)) for i in range(10)]
    assert await s.last_entry_id(L(1)) == 9
    assert last.stat().st_size < len(raw)


async def test_journal_with_only_a_partial_header_at_the_end(
    open_storage: Open, tmp_path: Path
) -> None:
    last = await _two_batches_then_crash(open_storage, tmp_path)
    with last.open("ab") as f:
        f.write(b"\x00\x00\x01")  # a group write cut after 3 bytes
    s = await open_storage()
    assert await s.last_entry_id(L(1)) == 19


async def test_corruption_in_an_older_journal_file_refuses_to_start(
    open_storage: Open, tmp_path: Path
) -> None:
    first = await _two_batches_then_crash(open_storage, tmp_path)
    s = await open_storage()  # a new journal file now follows `first`
    await s.add_entries([add(2, 0, b"x")])
    await s.close(flush=False)
    raw = bytearray(first.read_bytes())
    raw[-1] ^= 0xFF
    first.write_bytes(bytes(raw))
    with pytest.raises(api.StorageCorruptedError):
        await open_storage()
    # the refused start leaves no exception behind as the one being handled (compiled, it
    # did: tests/unit/structure/test_compiled_handlers.py)
    assert sys.exc_info() == (None, None, None)


@pytest.mark.parametrize("flush", [False, True])
async def test_fence_lac_and_delete_survive_restart(open_storage: Open, flush: bool) -> None:
    s = await open_storage()
    await s.add_entries([add(1, i, b"e", lac=i - 1) for i in range(5)])
    await s.add_entries([add(2, 0, b"e")])
    await s.add_entries([add(3, 0, b"e", key=b"k3")])
    assert await s.fence(L(1), b"key") == 3
    await s.delete_ledger(L(2))
    await s.close(flush=flush)
    s2 = await open_storage()
    assert await s2.is_fenced(L(1))
    assert await s2.last_add_confirmed(L(1)) == 3
    assert await s2.last_entry_id(L(1)) == 4
    assert await s2.list_ledgers() == [1, 3]
    res = await s2.add_entries(
        [add(1, 5, b"x"), add(1, 5, b"x", recovery=True), add(3, 1, b"x", key=b"bad")]
    )
    assert isinstance(res[0].error, api.LedgerFencedError)
    assert res[1].ok
    assert isinstance(res[2].error, api.BadMasterKeyError)
    with pytest.raises(api.NoSuchLedgerError):
        await s2.read_entry(L(2), E(0))
    await s2.flush()
    await s2.close(flush=False)
    s3 = await open_storage()
    assert await s3.is_fenced(L(1))
    assert await s3.read_entry(L(1), E(5)) == b"x"


async def test_adds_acknowledged_during_a_flush_survive_a_crash_after_it(
    open_storage: Open,
) -> None:
    s = await open_storage()
    await s.add_entries([add(1, i, payload(1, i)) for i in range(10)])
    gate, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        gate.wait(5)

    # the flush thread is busy, so the flush swaps the write cache and then waits for it
    # (the storage's methods are not replaced: the compiled build does not allow that)
    s._flush_pool.submit(hold)
    await eventually(holding.is_set, what="the flush thread held")
    flush = asyncio.create_task(s.flush())
    await eventually(lambda: s._flushing is not None, what="the write cache swapped")
    assert all(r.ok for r in await s.add_entries([add(1, i, payload(1, i)) for i in range(10, 20)]))
    gate.set()
    await flush
    await s.close(flush=False)  # crash: the second batch is only in the journal
    s2 = await open_storage()
    assert await s2.read_range(L(1), E(0), E(100), 0) == [(i, payload(1, i)) for i in range(20)]
