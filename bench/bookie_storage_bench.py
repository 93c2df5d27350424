"""Bookie storage throughput vs the disk's raw write+fdatasync ceiling. Figures only.

For each entry size, ``--writers`` concurrent tasks call ``LedgerStorage.add_entries`` with
``--batch`` entries each (what the gRPC add stream hands the storage) for ``--seconds``;
then the same directory gets a plain ``os.write`` + ``os.fdatasync`` loop writing groups of the
same size the storage's group commit actually formed (entries per group x entry size, payload
bytes only). The ratio is storage adds/s over raw adds/s at that group size.

    .venv/bin/python bench/bookie_storage_bench.py [--dir DIR] [--seconds 3] [--sizes 100,1024]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from magnetar.bookie.storage import api
from magnetar.bookie.storage.config import BookieStorageConfig
from magnetar.bookie.storage.db import DbLedgerStorage


async def storage_run(
    root: Path, *, size: int, seconds: float, writers: int, batch: int, group_wait_ms: float
) -> tuple[float, float, float, api.StorageStats]:
    cfg = BookieStorageConfig(
        journal_dir=root / "journal",
        data_dir=root / "data",
        journal_max_group_wait_ms=group_wait_ms,
    )
    storage = DbLedgerStorage(cfg)
    await storage.start()
    data = os.urandom(size)
    key = b"bench-key"
    done = 0
    stop = False

    async def writer(ledger: int) -> None:
        nonlocal done
        lid = api.LedgerId(ledger)
        entry = 0
        while not stop:
            reqs = [
                api.AddRequest(lid, api.EntryId(e), key, e - 1, data)
                for e in range(entry, entry + batch)
            ]
            await storage.add_entries(reqs)
            entry += batch
            done += batch

    tasks = [asyncio.create_task(writer(i + 1)) for i in range(writers)]
    await asyncio.sleep(0.3)  # warm up
    start_done, start_stats, t0 = done, storage.stats(), time.perf_counter()
    await asyncio.sleep(seconds)
    n, stats, elapsed = done - start_done, storage.stats(), time.perf_counter() - t0
    stop = True
    await asyncio.gather(*tasks)
    await storage.close(flush=False)
    groups = stats.journal_writes - start_stats.journal_writes
    per_group = (stats.journal_entries - start_stats.journal_entries) / max(groups, 1)
    return n / elapsed, per_group, groups / elapsed, stats


def raw_run(root: Path, *, group_bytes: int, seconds: float) -> float:
    """Plain write + fdatasync of ``group_bytes`` groups: groups per second."""
    path = root / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    buf = os.urandom(group_bytes)
    n = 0
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.write(fd, buf)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--group-wait-ms", type=float, default=1.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    base = Path(tempfile.mkdtemp(prefix="bookie-bench-", dir=args.dir))
    print(
        f"dir={base} loop={loop_name} writers={args.writers} batch={args.batch} "
        f"group_wait={args.group_wait_ms}ms seconds={args.seconds}"
    )
    print(
        f"{'size':>6} {'adds/s':>10} {'MB/s':>8} {'ent/grp':>8} {'grp/s':>7} "
        f"{'raw adds/s':>11} {'raw MB/s':>9} {'ratio':>6}"
    )
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            root = base / f"s{size}"
            adds, per_group, groups, _ = asyncio.run(
                storage_run(
                    root,
                    size=size,
                    seconds=args.seconds,
                    writers=args.writers,
                    batch=args.batch,
                    group_wait_ms=args.group_wait_ms,
                )
            )
            shutil.rmtree(root, ignore_errors=True)
            os.sync()  # the raw run starts with the disk as idle as the storage run did
            time.sleep(0.5)
            group_bytes = max(int(per_group * size), 1)
            raw_groups = raw_run(base, group_bytes=group_bytes, seconds=args.seconds)
            raw_adds = raw_groups * per_group
            print(
                f"{size:>6} {adds:>10.0f} {adds * size / 1e6:>8.1f} {per_group:>8.0f} "
                f"{groups:>7.0f} {raw_adds:>11.0f} {raw_adds * size / 1e6:>9.1f} "
                f"{adds / raw_adds:>6.2f}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
