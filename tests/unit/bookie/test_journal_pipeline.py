"""The journal writes the next group while the previous one syncs, as BookKeeper's
force-write thread does, and never acknowledges past a failed sync.

Why this test exists: with the write and the ``fdatasync`` of a group in one thread, each
group waited for the sync of the one before it, and under a producer at its maximum rate the
adds queued in the journal for tens of milliseconds (docs/benchmarks.md, "Page cache growth").
The pipeline must keep the journal's promise all the same: a group completes only once a sync
that began after it was written has finished, in submission order, and a failed sync fails
its group and every later one, even when a later sync succeeds (it may have succeeded without
the data the failed one lost).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.bookie.storage import api, journal

WAIT_S = 10.0


class BlockedSync:
    """``os.fdatasync`` whose first call once armed (the journal file is open) blocks until
    released, then raises ``fail`` if given; ``calls`` counts the armed calls."""

    def __init__(self, real: Callable[[int], None], fail: OSError | None = None) -> None:
        self._real = real
        self._fail = fail
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, fd: int) -> None:
        if not self.armed:
            self._real(fd)
            return
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            if not self.release.wait(WAIT_S):
                raise TimeoutError("the test never released the first sync")
            if self._fail is not None:
                raise self._fail
        self._real(fd)


def _record(entry_id: int) -> bytes:
    payload = journal.encode_add(7, entry_id - 1, b"k", [entry_id], [b"x" * 1000])
    return journal.frame(payload) + payload


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0.001)


async def _with_journal(
    tmp_path: Path, sync: BlockedSync, body: Callable[[journal.Journal], Awaitable[None]]
) -> journal.Journal:
    j = journal.Journal(
        tmp_path, max_group_bytes=64 * 1024, max_group_wait_s=0.0, max_file_bytes=64 << 20
    )
    j.open()
    sync.armed = True
    j.start()
    try:
        await body(j)
    finally:
        await j.close()
    return j


def _submit(j: journal.Journal, entry_id: int, done: list[int]) -> asyncio.Future[None]:
    rec = _record(entry_id)
    return j.submit([rec], len(rec), 1, on_durable=lambda: done.append(entry_id))


async def _written_behind_held_sync(
    j: journal.Journal, sync: BlockedSync, done: list[int], groups: int
) -> list[asyncio.Future[None]]:
    """Submit ``groups`` groups: the first one's sync is held, the others are written (one
    group each) while it is."""
    futures = [_submit(j, 0, done)]
    await _until(sync.entered.is_set)
    for entry_id in range(1, groups):
        futures.append(_submit(j, entry_id, done))
        await _until(lambda n=entry_id + 1: j.writes == n)
    return futures


def test_groups_written_during_a_sync_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = BlockedSync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", sync)
    done: list[int] = []

    async def body(j: journal.Journal) -> None:
        # the first group's sync is held: the next two groups are written all the same
        futures = await _written_behind_held_sync(j, sync, done, 3)
        assert done == [] and not any(f.done() for f in futures)
        start = j.durable_position
        sync.release.set()
        await asyncio.gather(*futures)
        assert done == [0, 1, 2]
        assert j.durable_position > start
        # one sync for the first group, one for the two written while it ran
        assert j.fsyncs == 2 and sync.calls == 2

    j = asyncio.run(_with_journal(tmp_path, sync, body))
    assert j.failed is None
    seen: list[int] = []

    def apply(rec: journal.Record) -> None:
        assert isinstance(rec, journal.AddRecord)
        seen.extend(eid for eid, _ in rec.entries)

    journal.replay(tmp_path, journal.Position(0, 0), apply)
    assert seen == [0, 1, 2]


def test_a_failed_sync_fails_its_group_and_every_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = BlockedSync(os.fdatasync, fail=OSError(5, "Input/output error"))
    monkeypatch.setattr(os, "fdatasync", sync)
    done: list[int] = []

    async def body(j: journal.Journal) -> None:
        futures = await _written_behind_held_sync(j, sync, done, 2)
        start = j.durable_position
        sync.release.set()
        for fut in futures:
            with pytest.raises(api.StorageIOError, match="journal sync failed"):
                await fut
        assert done == [] and j.durable_position == start
        # the journal is read-only from now on
        with pytest.raises(api.StorageIOError):
            await _submit(j, 2, done)

    j = asyncio.run(_with_journal(tmp_path, sync, body))
    assert isinstance(j.failed, OSError)
    assert done == []


def test_groups_are_written_and_synced_while_the_loop_is_busy(tmp_path: Path) -> None:
    """The writer and sync threads hand groups to each other without the event loop: a
    loop busy elsewhere (a drain, say) delays only the completions, once per sync. When each
    group went through the loop between its write and its sync, a busy loop held up both."""

    async def body() -> None:
        j = journal.Journal(
            tmp_path, max_group_bytes=64 * 1024, max_group_wait_s=0.0, max_file_bytes=64 << 20
        )
        j.open()
        j.start()
        done: list[int] = []
        futures = [_submit(j, e, done) for e in range(3)]
        deadline = time.monotonic() + WAIT_S
        # the loop is held here (no await): the journal's threads go on alone
        while j.fsyncs == 0 or j.bytes_written < 3 * len(_record(0)):
            assert time.monotonic() < deadline, "nothing written or synced while the loop was busy"
            time.sleep(0.001)
        assert not any(f.done() for f in futures) and done == []  # completions need the loop
        await asyncio.gather(*futures)
        assert done == [0, 1, 2]
        await j.close()

    asyncio.run(body())


def test_a_bug_in_a_journal_thread_fails_the_adds_instead_of_hanging_them(
    tmp_path: Path,
) -> None:
    """An unexpected exception in the writer thread (here the queue-latency callback the
    metrics pass in) fails the group it was writing and turns the journal read-only; the
    thread lives on to fail what comes after, and close() still returns."""

    def broken_metric(_: float) -> None:
        raise ValueError("metric broke")

    async def body() -> None:
        j = journal.Journal(
            tmp_path,
            max_group_bytes=64 * 1024,
            max_group_wait_s=0.0,
            max_file_bytes=64 << 20,
            on_queue=broken_metric,
        )
        j.open()
        j.start()
        done: list[int] = []
        async with asyncio.timeout(WAIT_S):
            with pytest.raises(api.StorageIOError, match="metric broke"):
                await _submit(j, 0, done)
            with pytest.raises(api.StorageIOError, match="journal failed"):
                await _submit(j, 1, done)
            await j.close()
        assert done == [] and isinstance(j.failed, ValueError)

    asyncio.run(body())
