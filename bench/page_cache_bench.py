"""What a growing page cache costs a writer here, against one whose synced pages are dropped
(issue 24, docs/benchmarks.md "Page cache growth").

    .venv/bin/python bench/page_cache_bench.py [--gib 6] [--sync-mib 64]

Writes ``--gib`` GiB into one file on the disk of ``.cache/`` (where the benches keep their
data) in 1,700 KiB writes (about a journal group under w1p), ``fdatasync`` every
``--sync-mib`` MiB, twice:

* ``kept``: the file's pages stay in the page cache (the kernel's default: the page cache
  grows with every byte until the machine's memory is full);
* ``dropped``: after each sync, the synced pages leave the page cache
  (``POSIX_FADV_DONTNEED``, as the bookie does with its journal and its older entry logs).

It prints, per GiB written, the rate and the writer's system CPU per MB. On a machine whose
memory is backed by its host on first touch (a virtual machine), ``kept`` slows down once the
page cache reaches memory the guest never used before; ``dropped`` writes into recycled
pages. The page cache is left as found: the file is deleted at the end. Figures only:
nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from journal_files_bench import timed

ROOT = Path(__file__).resolve().parents[1]
WRITE = 1700 * 1024
GIB = 1 << 30
FOLIO = 2 << 20


def run(
    directory: Path, steps: int, sync_bytes: int, drop: bool, step_bytes: int = GIB
) -> list[tuple[float, float]]:
    """(MB/s, system ms per MB) of each ``step_bytes`` written, ``steps`` times."""
    chunk = b"x" * WRITE
    fd, name = tempfile.mkstemp(prefix="page-cache-", dir=directory)
    state = {"offset": 0, "synced": 0}

    def write() -> int:
        done = 0
        while done < step_bytes:
            n = os.write(fd, chunk)
            done += n
            state["offset"] += n
            if state["offset"] - state["synced"] >= sync_bytes:
                os.fdatasync(fd)
                if drop:  # from the folio boundary before, as the bookie's drops
                    start = state["synced"] // FOLIO * FOLIO
                    os.posix_fadvise(fd, start, 0, os.POSIX_FADV_DONTNEED)
                state["synced"] = state["offset"]
        return done

    try:
        return [timed(write)[:2] for _ in range(steps)]
    finally:
        os.close(fd)
        os.unlink(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=int, default=6, help="GiB written per mode")
    ap.add_argument("--sync-mib", type=int, default=64, help="MiB between syncs")
    args = ap.parse_args()
    if args.gib < 1 or args.sync_mib < 1:
        print("--gib and --sync-mib must be at least 1")
        return 2
    directory = ROOT / ".cache"
    directory.mkdir(exist_ok=True)
    for mode in ("kept", "dropped"):
        steps = run(directory, args.gib, args.sync_mib << 20, mode == "dropped")
        for i, (rate, system) in enumerate(steps):
            print(
                f"{mode:>7} GiB {i + 1}: {rate:6,.0f} MB/s, system {system:.2f} ms/MB", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
