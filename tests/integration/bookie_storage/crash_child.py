"""Child process for the crash test: adds entries as fast as it can and prints, per finished
``add_entries`` call, ``ledger first last`` — only after the call returned, i.e. only what the
storage acknowledged. The parent SIGKILLs it at a random moment.

Run: ``python -m tests.integration.bookie_storage.crash_child DIR``.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from magnetar.bookie.storage import api
from magnetar.bookie.storage.config import BookieStorageConfig
from magnetar.bookie.storage.db import DbLedgerStorage

KEY = b"crash-key"
WRITERS = 4


def entry_size(ledger: int, entry: int) -> int:
    return 10 + (ledger * 7919 + entry * 104729) % 3000


def entry_data(ledger: int, entry: int) -> bytes:
    seed = f"{ledger}:{entry};".encode()
    size = entry_size(ledger, entry)
    return (seed * (size // len(seed) + 1))[:size]


def config(root: Path) -> BookieStorageConfig:
    # small sizes so that flushes, journal rotation and entry log rotation all happen
    return BookieStorageConfig(
        journal_dir=root / "journal",
        data_dir=root / "data",
        flush_interval_s=0.05,
        write_cache_flush_bytes=256 * 1024,
        journal_max_file_bytes=512 * 1024,
        entry_log_max_bytes=1024 * 1024,
        gc_interval_s=0.2,
        disk_usage_threshold=1.0,
        disk_usage_lwm=1.0,
    )


async def main(root: Path) -> None:
    storage = DbLedgerStorage(config(root))
    await storage.start()
    out = sys.stdout

    async def writer(ledger: int) -> None:
        rng = random.Random(ledger)
        entry = 0
        while True:
            n = rng.randint(1, 30)
            reqs = [
                api.AddRequest(
                    api.LedgerId(ledger), api.EntryId(e), KEY, e - 1, entry_data(ledger, e)
                )
                for e in range(entry, entry + n)
            ]
            results = await storage.add_entries(reqs)
            if not all(r.ok for r in results):
                raise SystemExit(f"add failed: {results}")
            out.write(f"{ledger} {entry} {entry + n - 1}\n")
            out.flush()
            entry += n

    async def churn() -> None:
        # ledgers that are written, deleted and collected while the others write
        ledger = 1000
        while True:
            await storage.add_entries(
                [
                    api.AddRequest(api.LedgerId(ledger), api.EntryId(e), KEY, -1, b"z" * 2000)
                    for e in range(100)
                ]
            )
            await storage.delete_ledger(api.LedgerId(ledger))
            ledger += 1
            await asyncio.sleep(0.01)  # paces the churn until the parent kills us

    out.write("ready\n")
    out.flush()
    await asyncio.gather(*(writer(lid) for lid in range(1, WRITERS + 1)), churn())


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
