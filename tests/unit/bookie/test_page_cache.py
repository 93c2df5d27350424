"""What the bookie leaves in the kernel's page cache: nothing it has synced, when told so.

Why this test exists: on a virtual machine whose host backs guest memory on first touch, a
page cache that grows with every byte stored made each write cost about ten times more
kernel time than writing into recycled pages (docs/benchmarks.md, "Page cache growth"). The
journal (BookKeeper's journalRemoveFromPageCache) and the entry logs drop their synced pages;
the residency is read with mincore(2), so the test sees what the kernel holds, not what the
code meant to ask for.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

import pytest

from magnetar.bookie.storage import entrylog, journal

MIB = 1024 * 1024
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
)  # fmt: skip
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def resident(path: Path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages in the file), by mincore(2)."""
    size = path.stat().st_size
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(b & 1 for b in vec.raw), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """``tmp_path``, if its filesystem lets synced pages go (tmpfs keeps them: skip)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"p" * (4 * PAGE))
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if resident(probe)[0] == 4:
        pytest.skip("the filesystem of the test directory keeps synced pages cached (tmpfs)")
    probe.unlink()
    return tmp_path


def _records(n: int, size: int) -> list[bytes]:
    """``n`` framed add records of ledger 7, one entry of ``size`` bytes each."""
    out = []
    for e in range(n):
        payload = journal.encode_add(7, e - 1, b"k", [e], [bytes([e % 251]) * size])
        out.append(journal.frame(payload) + payload)
    return out


async def _journal_write(directory: Path, *, drop_cache: bool) -> Path:
    j = journal.Journal(
        directory,
        max_group_bytes=256 * 1024,
        max_group_wait_s=0.0,
        max_file_bytes=64 * MIB,
        drop_cache=drop_cache,
    )
    j.open()
    j.start()
    records = _records(64, 64 * 1024)  # 4 MiB in groups of 256 KiB
    await asyncio.gather(*(j.submit([r], len(r), 1) for r in records))
    await j.close()
    (path,) = directory.iterdir()
    return path


@pytest.mark.parametrize("drop_cache", [True, False])
def test_the_journal_drops_each_synced_group_from_the_page_cache(
    disk: Path, drop_cache: bool
) -> None:
    path = asyncio.run(_journal_write(disk, drop_cache=drop_cache))
    cached, pages = resident(path)
    assert pages > 1000
    if drop_cache:
        assert cached <= 1, f"{cached} of {pages} pages still cached"  # the header's page
    else:
        assert cached > pages * 0.9, f"only {cached} of {pages} pages cached"


def test_journal_replay_reads_back_what_was_dropped(disk: Path) -> None:
    asyncio.run(_journal_write(disk, drop_cache=True))
    seen: list[tuple[int, bytes]] = []

    def apply(rec: journal.Record) -> None:
        assert isinstance(rec, journal.AddRecord)
        seen.extend((eid, bytes(data)) for eid, data in rec.entries)

    journal.replay(disk, journal.Position(0, 0), apply)
    assert seen == [(e, bytes([e % 251]) * (64 * 1024)) for e in range(64)]


def _flushes(writer: entrylog.EntryLogWriter, first: int, count: int) -> dict[int, bytes]:
    """``count`` flushes of 1 MiB (eight 128 KiB entries of ledger 1) from entry ``first``."""
    written: dict[int, bytes] = {}
    for f in range(count):
        start = first + 8 * f
        batch = {e: bytes([e % 251]) * (128 * 1024) for e in range(start, start + 8)}
        writer.append_ledger(1, dict(batch), [])
        writer.sync()
        written.update(batch)
    return written


def _cached_mib(directory: Path) -> float:
    return sum(resident(p)[0] for p in directory.iterdir()) * PAGE / MIB


@pytest.mark.parametrize("keep_mib", [0, 6, None])
def test_entry_logs_keep_only_the_last_bytes_synced_in_the_page_cache(
    disk: Path, keep_mib: int | None
) -> None:
    """Twenty 1 MiB flushes into 3 MiB logs (rotations included): with a budget, what stays
    cached is at most the budget plus the folio a drop could not take, however much was
    written; without one, everything stays."""
    writer = entrylog.EntryLogWriter(
        disk,
        next_log_id=1,
        max_bytes=3 * MIB,
        page_cache_bytes=None if keep_mib is None else keep_mib * MIB,
    )
    written = _flushes(writer, 0, 20)
    cached = _cached_mib(disk)
    if keep_mib is None:
        assert cached > 19
    else:
        assert keep_mib - 1 <= cached <= keep_mib + 2.1, cached
    writer.close()
    reader = entrylog.EntryLogReader(disk)
    for log_id in entrylog.list_logs(disk):
        for rec in reader.scan(log_id):
            assert rec.data == written[rec.entry_id]
            del written[rec.entry_id]
    assert not written
