"""Bookie throughput through the ledger client, next to the disk's raw ceiling.

For 100 B and 1 KiB entries, with one bookie (E/Wq/Aq 1/1/1) and three (3/2/2): a writer
pipelines adds into one ledger for a fixed time and the script prints adds/s and MB/s. Then it
measures the raw ceiling of the same disk with the same group sizes the bookie's journal
achieved (one write + one fdatasync per group, taken from the bookie's own counters), and prints
the ratio. Bookies run as separate processes (gRPC over loopback), metadata on a real etcd.
Figures only: nothing here passes or fails.

    .venv/bin/python bench/bookie_bench.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer

from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store

WINDOW = 2000


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counter(metrics: str, name: str) -> float:
    m = re.search(rf"^{name}(?:_total)? ([0-9.e+]+)$", metrics, re.M)
    return float(m.group(1)) if m else 0.0


async def pipelined_adds(handle: Any, *, size: int, seconds: float) -> tuple[float, int]:
    """(adds/s, adds) of ``size``-byte adds pipelined into ``handle`` (WINDOW in flight) for
    ``seconds``; bench/bookie_tls_bench.py measures with it too."""
    payload = os.urandom(size)
    inflight: set[asyncio.Future[int]] = set()
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        while len(inflight) < WINDOW:
            inflight.add(handle.append(payload))
        done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
        count += len(done)
    for f in inflight:
        await f
    count += len(inflight)
    return count / (time.perf_counter() - start), count


async def run_writer(url: str, *, quorum: tuple[int, int, int], size: int, seconds: float):
    store = await open_store(url)
    client = LedgerClient(store)
    try:
        handle = await client.create(
            ensemble_size=quorum[0], write_quorum=quorum[1], ack_quorum=quorum[2]
        )
        rate, _ = await pipelined_adds(handle, size=size, seconds=seconds)
        await handle.close()
        return rate
    finally:
        await client.close()
        await store.close()


def raw_ceiling(directory: Path, *, group_bytes: int, seconds: float) -> float:
    """Groups per second of write(group_bytes) + fdatasync on ``directory``'s disk."""
    path = directory / "raw-ceiling.bin"
    block = os.urandom(max(1, group_bytes))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bookie-bench-", dir=".") as tmp:
        base = Path(tmp)
        etcd = EtcdServer(base / "etcd").start()
        bookies = []
        try:
            for n_bookies, quorum in ((1, (1, 1, 1)), (3, (3, 2, 2))):
                for b in bookies:
                    b.stop()
                bookies = [BookieProc(etcd.url, base / f"b{n_bookies}") for _ in range(n_bookies)]
                for b in bookies:
                    b.start()
                time.sleep(0.5)
                for size in (100, 1024):
                    before = [b.metrics() for b in bookies]
                    cpu0 = [cpu_seconds(b.proc.pid or 0) for b in bookies]
                    me0, t0 = time.process_time(), time.perf_counter()
                    rate = asyncio.run(
                        run_writer(etcd.url, quorum=quorum, size=size, seconds=args.seconds)
                    )
                    wall = time.perf_counter() - t0
                    client_cpu = (time.process_time() - me0) / wall
                    bookie_cpu = max(
                        (cpu_seconds(b.proc.pid or 0) - c) / wall
                        for b, c in zip(bookies, cpu0, strict=True)
                    )
                    after = [b.metrics() for b in bookies]
                    writes = sum(
                        counter(a, "bookie_journal_writes") - counter(b, "bookie_journal_writes")
                        for a, b in zip(after, before, strict=True)
                    )
                    jbytes = sum(
                        counter(a, "bookie_journal_bytes") - counter(b, "bookie_journal_bytes")
                        for a, b in zip(after, before, strict=True)
                    )
                    entries = sum(
                        counter(a, "bookie_journal_entries") - counter(b, "bookie_journal_entries")
                        for a, b in zip(after, before, strict=True)
                    )
                    group_bytes = int(jbytes / writes) if writes else size
                    per_group = entries / writes if writes else 1.0
                    groups_s = raw_ceiling(
                        bookies[0].journal_dir, group_bytes=group_bytes, seconds=3.0
                    )
                    # one bookie's disk carries Wq/E of the entries when striping
                    share = quorum[1] / quorum[0]
                    ceiling = groups_s * per_group / share
                    ratio = rate / ceiling if ceiling else 0.0
                    rows.append(
                        (
                            quorum,
                            size,
                            rate,
                            per_group,
                            group_bytes,
                            ceiling,
                            ratio,
                            client_cpu,
                            bookie_cpu,
                        )
                    )
        finally:
            for b in bookies:
                b.stop()
            etcd.stop()

    print(
        f"{'E/Wq/Aq':8} {'entry':>6} {'adds/s':>10} {'MB/s':>7} {'entries/sync':>12} "
        f"{'group B':>8} {'raw ceiling adds/s':>18} {'ratio':>6} {'client CPU':>10} "
        f"{'bookie CPU':>10}"
    )
    for quorum, size, rate, per_group, gbytes, ceiling, ratio, ccpu, bcpu in rows:
        q = "/".join(map(str, quorum))
        print(
            f"{q:8} {size:6d} {rate:10.0f} {rate * size / 1e6:7.2f} {per_group:12.1f} "
            f"{gbytes:8d} {ceiling:18.0f} {ratio:6.2f} {ccpu:10.0%} {bcpu:10.0%}"
        )
    print(
        "raw ceiling = (write + fdatasync of one journal group of that size)/s x entries per "
        "group, on the journal's disk; ratio = measured / ceiling; CPU = share of one core "
        "used by the writer process and by the busiest bookie process"
    )


if __name__ == "__main__":
    main()
