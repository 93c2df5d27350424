"""What the kernel charges a journal for its writes: a new file against a file whose blocks
were written before (issue 24).

    .venv/bin/python bench/journal_files_bench.py [--mb 512] [--group-kb 160] [--rounds 2]

Writes ``--mb`` MiB in groups of ``--group-kb`` KiB, one ``write`` and one ``fdatasync`` per
group, as the bookie's journal does under load (docs/architecture.md, "The write path"), into
a temporary file on the disk of ``.cache/`` (where the benches keep their data), three ways:

* ``new``: an empty file that grows with each write (what the journal does today: every file
  is new, and deleted once flushed);
* ``sized``: a file given its full size first (``ftruncate``: a hole, no blocks; as
  BookKeeper's journal preallocates its files ahead of the writes);
* ``fallocate``: a file given its blocks by ``posix_fallocate`` first (unwritten extents);
* ``written``: a file whose blocks were all written and synced before (what reusing a flushed
  journal file would give, as BookKeeper's ``journalReuseFiles`` does).

It prints the rate and the system and user CPU per MB of each. Figures only: nothing here
passes or fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("new", "sized", "fallocate", "written")


def _prepare(fd: int, mode: str, total: int) -> None:
    if mode == "sized":
        os.ftruncate(fd, total)
        os.fsync(fd)
    elif mode == "fallocate":
        os.posix_fallocate(fd, 0, total)
        os.fsync(fd)
    elif mode == "written":
        block = b"\0" * (1 << 20)
        for _ in range(total >> 20):
            os.write(fd, block)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)


def timed(work: Callable[[], int]) -> tuple[float, float, float]:
    """Run ``work``, which returns the bytes it wrote: (MB/s, system ms per MB, user ms per
    MB) of this process while it ran."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    done = work()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    mb = done / 1e6
    return (
        mb / seconds,
        (after.ru_stime - before.ru_stime) / mb * 1e3,
        (after.ru_utime - before.ru_utime) / mb * 1e3,
    )


def run(directory: Path, mode: str, total: int, group: int) -> tuple[float, float, float]:
    """(MB/s, system ms per MB, user ms per MB) of ``total`` bytes in ``group``-byte syncs."""
    chunk = b"x" * group
    fd, name = tempfile.mkstemp(prefix="journal-files-", dir=directory)

    def write() -> int:
        done = 0
        while done < total:
            done += os.write(fd, chunk)
            os.fdatasync(fd)
        return done

    try:
        _prepare(fd, mode, total)
        return timed(write)
    finally:
        os.close(fd)
        os.unlink(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512, help="MiB written per file")
    ap.add_argument("--group-kb", type=int, default=160, help="bytes per write + fdatasync")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.mb < 1 or args.group_kb < 1 or args.rounds < 1:
        print("--mb, --group-kb and --rounds must be at least 1")
        return 2
    directory = ROOT / ".cache"
    directory.mkdir(exist_ok=True)
    for r in range(args.rounds):
        for mode in MODES:
            rate, system, user = run(directory, mode, args.mb << 20, args.group_kb << 10)
            print(
                f"round {r + 1} {mode:>9}: {rate:6,.0f} MB/s, system {system:.2f} ms/MB, "
                f"user {user:.2f} ms/MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
