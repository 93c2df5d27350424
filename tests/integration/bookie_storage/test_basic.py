"""Adds, reads and the per-entry error rules of the storage interface."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.bookie.storage import api, entrylog
from magnetar.common import errors
from tests.integration.bookie_storage.conftest import MakeConfig, Open, add, payload

L = api.LedgerId
E = api.EntryId


async def test_add_read_round_trip_from_cache_and_from_entry_logs(open_storage: Open) -> None:
    s = await open_storage()
    results = await s.add_entries([add(1, i, payload(1, i), lac=i - 1) for i in range(20)])
    assert all(r.ok for r in results)
    assert [r.entry_id for r in results] == list(range(20))
    assert await s.read_entry(L(1), E(5)) == payload(1, 5)  # write cache
    await s.flush()
    assert s.stats().write_cache_bytes == 0
    assert await s.read_entry(L(1), E(6)) == payload(1, 6)  # entry log
    assert await s.read_entry(L(1), E(6)) == payload(1, 6)  # read cache
    assert s.stats().read_cache_hits >= 1
    rng = await s.read_range(L(1), E(0), E(19), 0)
    assert rng == [(i, payload(1, i)) for i in range(20)]
    assert await s.last_add_confirmed(L(1)) == 18
    assert await s.last_entry_id(L(1)) == 19
    assert await s.list_ledgers() == [1]


async def test_memoryview_data_is_stored(open_storage: Open) -> None:
    s = await open_storage()
    buf = memoryview(b"..hello..")[2:7]
    assert (await s.add_entries([add(1, 0, buf)]))[0].ok  # type: ignore[arg-type]
    assert await s.read_entry(L(1), E(0)) == b"hello"
    await s.flush()
    s._read_cache = type(s._read_cache)(1024)  # force the entry log path
    assert await s.read_entry(L(1), E(0)) == b"hello"


async def test_read_range_stops_at_gap_and_max_bytes(open_storage: Open) -> None:
    s = await open_storage()
    await s.add_entries([add(1, i, payload(1, i, 100)) for i in (0, 1, 2, 3, 5)])
    assert [e for e, _ in await s.read_range(L(1), E(0), E(10), 0)] == [0, 1, 2, 3]
    assert [e for e, _ in await s.read_range(L(1), E(0), E(10), 250)] == [0, 1]
    assert [e for e, _ in await s.read_range(L(1), E(0), E(10), 1)] == [0]  # at least one
    await s.flush()
    assert [e for e, _ in await s.read_range(L(1), E(1), E(10), 250)] == [1, 2]
    with pytest.raises(api.NoSuchEntryError):
        await s.read_range(L(1), E(4), E(10), 0)


async def test_unknown_ledger_and_entry(open_storage: Open) -> None:
    s = await open_storage()
    with pytest.raises(api.NoSuchLedgerError):
        await s.read_entry(L(9), E(0))
    with pytest.raises(api.NoSuchLedgerError):
        await s.last_add_confirmed(L(9))
    with pytest.raises(api.NoSuchLedgerError):
        await s.is_fenced(L(9))
    await s.add_entries([add(1, 0, b"x")])
    with pytest.raises(api.NoSuchEntryError):
        await s.read_entry(L(1), E(1))
    await s.flush()
    with pytest.raises(api.NoSuchEntryError):
        await s.read_entry(L(1), E(1))
    assert isinstance(api.NoSuchEntryError(), api.StorageError)


async def test_bad_master_key_fails_alone(open_storage: Open) -> None:
    s = await open_storage()
    await s.add_entries([add(1, 0, b"a", key=b"right")])
    results = await s.add_entries(
        [add(1, 1, b"b", key=b"wrong"), add(1, 2, b"c", key=b"right"), add(2, 0, b"d", key=b"x")]
    )
    assert isinstance(results[0].error, api.BadMasterKeyError)
    assert results[1].ok and results[2].ok
    with pytest.raises(api.NoSuchEntryError):
        await s.read_entry(L(1), E(1))
    with pytest.raises(api.BadMasterKeyError):
        await s.fence(L(1), b"wrong")


async def test_entry_too_large_fails_alone(open_storage: Open) -> None:
    s = await open_storage(max_entry_bytes=1000)
    results = await s.add_entries([add(1, 0, b"x" * 1000), add(1, 1, b"x" * 1001)])
    assert results[0].ok
    assert isinstance(results[1].error, api.EntryTooLargeError)
    assert await s.last_entry_id(L(1)) == 0


async def test_default_entry_limit_takes_a_5_mib_message(open_storage: Open) -> None:
    s = await open_storage()
    big = b"m" * (5 * 1024 * 1024 + 512)
    assert (await s.add_entries([add(1, 0, big)]))[0].ok
    await s.flush()
    assert await s.read_entry(L(1), E(0)) == big


async def test_fence_blocks_adds_but_not_recovery_adds(open_storage: Open) -> None:
    s = await open_storage()
    await s.add_entries([add(1, i, b"e", lac=i - 1) for i in range(3)])
    assert await s.fence(L(1), b"key") == 1
    assert await s.is_fenced(L(1))
    results = await s.add_entries([add(1, 3, b"late"), add(1, 3, b"rec", recovery=True)])
    assert isinstance(results[0].error, api.LedgerFencedError)
    assert results[1].ok
    assert await s.read_entry(L(1), E(3)) == b"rec"
    with pytest.raises(api.LedgerFencedError):
        await s.write_lac(L(1), b"key", 3)


async def test_fence_of_an_unknown_ledger_creates_it_fenced(open_storage: Open) -> None:
    s = await open_storage()
    assert await s.fence(L(7), b"k") == -1
    assert await s.is_fenced(L(7))
    assert await s.last_entry_id(L(7)) == -1
    assert isinstance(
        (await s.add_entries([add(7, 0, b"x", key=b"k")]))[0].error, api.LedgerFencedError
    )


async def test_write_lac_and_piggybacked_lac_only_grow(open_storage: Open) -> None:
    s = await open_storage()
    await s.add_entries([add(1, 0, b"a", lac=-1), add(1, 1, b"b", lac=0)])
    await s.write_lac(L(1), b"key", 1)
    await s.add_entries([add(1, 2, b"c", lac=0)])  # a stale piggybacked LAC
    assert await s.last_add_confirmed(L(1)) == 1


async def test_delete_ledger(open_storage: Open) -> None:
    s = await open_storage()
    await s.add_entries([add(1, 0, b"a"), add(2, 0, b"b")])
    await s.delete_ledger(L(1))
    await s.delete_ledger(L(1))  # idempotent
    await s.delete_ledger(L(99))
    assert await s.list_ledgers() == [2]
    with pytest.raises(api.NoSuchLedgerError):
        await s.read_entry(L(1), E(0))
    assert isinstance((await s.add_entries([add(1, 1, b"x")]))[0].error, api.NoSuchLedgerError)
    await s.flush()
    assert await s.read_entry(L(2), E(0)) == b"b"


async def test_group_commit_uses_far_fewer_fsyncs_than_adds(open_storage: Open) -> None:
    s = await open_storage()
    n = 400
    results = await asyncio.gather(*(s.add_entries([add(i % 8, i, b"x" * 100)]) for i in range(n)))
    assert all(r[0].ok for r in results)
    st = s.stats()
    assert st.journal_entries == n
    assert 1 <= st.journal_fsyncs <= n // 10, st
    # one sync covers every group written since the one before (the journal's sync thread)
    assert st.journal_fsyncs <= st.journal_writes


async def test_read_only_above_disk_threshold(open_storage: Open) -> None:
    s = await open_storage(disk_usage_threshold=0.0, disk_usage_lwm=0.0)
    assert s.is_read_only and s.stats().read_only
    results = await s.add_entries([add(1, 0, b"a"), add(1, 1, b"b")])
    assert all(isinstance(r.error, api.ReadOnlyError) for r in results)
    assert isinstance(results[0].error, errors.TemporaryError)  # retry on another bookie
    # fencing (recovery) and deletes still work: they free or protect, never fill the disk
    assert await s.fence(L(3), b"k") == -1
    await s.delete_ledger(L(3))


async def test_closed_storage_refuses_adds(open_storage: Open) -> None:
    s = await open_storage()
    await s.close()
    results = await s.add_entries([add(1, 0, b"a")])
    assert isinstance(results[0].error, api.ReadOnlyError)


async def test_corrupted_entry_log_record_is_a_named_error(
    open_storage: Open, tmp_path: Path
) -> None:
    s = await open_storage(read_cache_max_bytes=0)
    await s.add_entries([add(1, 0, b"a" * 100), add(1, 1, b"b" * 100)])
    await s.flush()
    (log,) = (tmp_path / "data" / "entrylogs").iterdir()
    raw = bytearray(log.read_bytes())
    raw[-1] ^= 0xFF  # the last byte of entry 1
    log.write_bytes(bytes(raw))
    entrylog.close_fds(s._reader.forget([1]))  # drop the cached descriptor (file replaced)
    assert await s.read_entry(L(1), E(0)) == b"a" * 100
    with pytest.raises(api.StorageCorruptedError):
        await s.read_entry(L(1), E(1))


async def test_open_storage_factory_gives_the_default_strategy(make_config: MakeConfig) -> None:
    from magnetar.bookie import storage as pkg

    s = pkg.open_storage(make_config())
    await s.start()
    try:
        assert (await s.add_entries([add(1, 0, b"x")]))[0].ok
        assert await s.read_entry(L(1), E(0)) == b"x"
    finally:
        await s.close()
