"""Managed-ledger throughput: adds through a managed ledger next to raw ledger appends, and
tail reads from a cursor (entry cache) next to cold reads (bookie).

One in-process bookie (E/Wq/Aq 1/1/1) in the same event loop (uvloop), embedded metadata
store, 1 KiB entries, a sliding window of pipelined adds. Figures only: nothing here passes
or fails.

    .venv/bin/python bench/managed_ledger_bench.py [--seconds 5] [--window 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.procs import LOOPBACK, free_port

from magnetar.bookie import metrics as bookie_metrics
from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.common import aio
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.api import InitialPosition, ManagedLedgerConfig
from magnetar.managed_ledger.factory import ManagedLedgerFactoryImpl
from magnetar.metadata import open_store

ENTRY = 1024


async def pipelined(append: Callable[[bytes], Awaitable[Any]], seconds: float, window: int) -> int:
    data = bytes(ENTRY)
    inflight: deque[Awaitable[Any]] = deque()
    n = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        while len(inflight) < window:
            inflight.append(append(data))
        await inflight.popleft()
        n += 1
    for fut in inflight:
        await fut
        n += 1
    return n


def report(label: str, n: int, elapsed: float, size: int = ENTRY) -> float:
    rate = n / elapsed
    print(f"{label:<40} {rate:>10,.0f} entries/s {rate * size / 1e6:>8.1f} MB/s")
    return rate


async def main(seconds: float, window: int) -> None:
    bookie_metrics.StorageCollector = lambda *_: type(  # type: ignore[misc]
        "_None", (), {"collect": lambda self: iter(())}
    )()
    with tempfile.TemporaryDirectory(prefix="ml-bench-") as tmp:
        base = Path(tmp)
        store = await open_store(f"embedded://{base / 'meta'}")
        bookie = BookieServer(
            store,
            BookieOptions(
                data_dir=base / "bookie",
                port=free_port(),
                http_port=free_port(),
                bind_address=LOOPBACK,
            ),
        )
        await bookie.start()
        client = LedgerClient(store)
        try:
            handle = await client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
            t = time.perf_counter()
            n = await pipelined(handle.append, seconds, window)
            raw = report("ledger handle appends (baseline)", n, time.perf_counter() - t)
            await handle.close()

            config = ManagedLedgerConfig(max_entries_per_ledger=50_000)
            factory = ManagedLedgerFactoryImpl(
                store, client, default_config=config, cache_bytes=256 << 20
            )
            ml = await factory.open("bench/ns/persistent/t")
            cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
            t = time.perf_counter()
            n = await pipelined(ml.append, seconds, window)
            managed = report("managed ledger adds", n, time.perf_counter() - t)
            print(f"{'  ratio managed / raw':<40} {managed / raw:>10.2f}")
            print(f"{'  ledgers rolled':<40} {len(ml.ledgers()):>10}")

            # tail read: the newest entries (those still in the cache) through the cursor
            cached = min(n, len(ml.cache))
            await cursor.skip(n - cached)
            t = time.perf_counter()
            got = 0
            while batch := await cursor.read_entries(1000):
                got += len(batch)
            report("cursor tail reads (entry cache)", got, time.perf_counter() - t)
            # cold read: the same entries from the bookie
            ml.cache.clear()
            cursor.rewind()
            before = ml.read_stats.bookie_entries
            t = time.perf_counter()
            got = 0
            while batch := await cursor.read_entries(1000):
                got += len(batch)
            report("cursor reads (bookie, cache cleared)", got, time.perf_counter() - t)
            assert ml.read_stats.bookie_entries - before == got
            await factory.close()
        finally:
            await client.close()
            await bookie.stop()
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--window", type=int, default=2000)
    args = parser.parse_args()
    aio.run(main(args.seconds, args.window))
