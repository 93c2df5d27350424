"""Every knob of the bookie storage engine, in one frozen dataclass with sane defaults.

Why: the CLI, the operator-rendered config file and the tests all build the same object, and
the engine reads nothing else (no environment, no globals).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class BookieStorageConfig:
    journal_dir: Path
    """Write-ahead journal; put it on its own (fast, fsync-cheap) disk."""
    data_dir: Path
    """Entry logs and the LMDB index."""

    max_entry_bytes: int = 5 * MiB + 64 * 1024
    """Largest entry accepted (Pulsar's 5 MiB max message + room for metadata)."""

    # journal / group commit
    journal_max_group_wait_ms: float = 0.0
    """How long the oldest waiting add may be held to gather a bigger group. 0 (the
    default): no added wait; a group is whatever queued while the previous write and
    fdatasync ran, so groups grow with the load by themselves (BookKeeper's
    journalFlushWhenQueueEmpty). A wait only adds latency at low rates: 1 ms took the
    fan-out p50 from 2.4 to 4.1 ms at 1,000 msg/s without raising throughput."""
    journal_max_group_bytes: int = 1 * MiB
    """A group is written as soon as it reaches this size."""
    journal_max_file_bytes: int = 256 * MiB
    """Journal files rotate at this size; files before the checkpoint are deleted."""
    journal_fsync: bool = True
    """Off only for tests that do not care about durability."""
    journal_remove_from_page_cache: bool = True
    """Drop each group's pages from the kernel's page cache once synced, as BookKeeper's
    journalRemoveFromPageCache (on by default there too): the journal is read back only at
    replay. docs/benchmarks.md, "Page cache growth"."""

    # write cache / flush
    write_cache_flush_bytes: int = 32 * MiB
    """Flush to entry logs when the write cache holds this much."""
    write_cache_max_bytes: int = 128 * MiB
    """Adds wait for a flush when unflushed data would pass this (back-pressure)."""
    flush_interval_s: float = 2.0
    """Flush at least this often (bounds journal replay time)."""

    # entry logs / index / read cache
    entry_log_max_bytes: int = 512 * MiB
    entry_log_page_cache_bytes: int | None = 2048 * MiB
    """How much of the entry logs last written may stay in the kernel's page cache: after
    each flush, the pages of older flushes are dropped, so the page cache does not grow with
    every byte stored (on a virtual machine whose host backs guest memory on first touch, a
    growing page cache cost each byte written about ten times more kernel time than recycled
    pages). Entries older than the last 2 GiB are read from the disk, through the read
    cache; what reads bring back into the page cache is left to the kernel. None: the kernel
    decides everything (BookKeeper's buffered entry logger; its direct-I/O one keeps none).
    docs/benchmarks.md, "Page cache growth"."""
    index_map_size: int = 4 * 1024 * MiB
    """LMDB map size (address space, not disk: the file grows as needed)."""
    read_cache_max_bytes: int = 32 * MiB
    read_range_default_max_bytes: int = 4 * MiB

    # garbage collection / compaction
    gc_interval_s: float = 60.0
    compaction_threshold: float = 0.5
    """Entry logs with a smaller live fraction are rewritten; empty ones are deleted."""

    # disk usage
    disk_usage_threshold: float = 0.95
    """Go read-only above this used fraction of the journal or data disk."""
    disk_usage_lwm: float = 0.90
    """Become writable again below this fraction."""
    disk_check_interval_s: float = 10.0
