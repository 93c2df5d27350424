"""Re-replication speed against the bookie's own catch-up read rate (issue 22, acceptance 6).

etcd and three bookie processes on this machine's disk. Each round writes one ledger of
``--mb`` MB (``--entry-size`` entries, E=Wq=Aq=2 on two of the bookies, so the one lost holds
every entry), then measures

* the catch-up read: the whole ledger read back through the ledger client (4 MB batches from
  one replica), MB/s;
* re-replication: that bookie SIGKILLed, the ledger marked as the auditor would, and one
  recovery worker (in this process, the code ``magnetar autorecovery`` runs) copying every
  entry from the surviving replica to the third bookie and swapping the ensemble, MB/s.

The killed bookie is started again (same directories) for the next round. Figures only:
nothing here passes or fails.

    .venv/bin/python bench/recovery_bench.py [--mb 64] [--entry-size 16384] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer

from magnetar.autorecovery.worker import ReplicationWorker, WorkerOptions
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.placement import BookieInfo
from magnetar.metadata import open_store


class OnThese:
    """New ensembles on two given bookies (so the victim holds every entry); replacements
    by rack-aware placement's rule: any writable bookie outside the ensemble."""

    def __init__(self, first: str, second: str) -> None:
        self.pair = (first, second)

    def new_ensemble(
        self, bookies: list[BookieInfo], size: int, *, exclude: object = ()
    ) -> tuple[str, ...]:
        return self.pair

    def replace(
        self, bookies: list[BookieInfo], ensemble: list[str], index: int, *, exclude: object = ()
    ) -> str:
        return next(b.bookie_id for b in bookies if b.bookie_id not in (*ensemble, *exclude))  # type: ignore[misc]


async def one_round(
    url: str, procs: list[BookieProc], *, mb: int, entry_size: int
) -> tuple[float, float]:
    """(catch-up read MB/s, re-replication MB/s) of one ledger."""
    victim, survivor, target = procs
    store = await open_store(url)
    client = LedgerClient(store, placement=OnThese(victim.bookie_id, survivor.bookie_id))
    try:
        handle = await client.create(ensemble_size=2, write_quorum=2, ack_quorum=2)
        payload = os.urandom(entry_size)
        count = mb * 1024 * 1024 // entry_size
        window: list[asyncio.Future[int]] = []
        for _ in range(count):
            window.append(handle.append(payload))
            if len(window) >= 256:
                await asyncio.gather(*window)
                window = []
        await asyncio.gather(*window)
        await handle.close()
        size_mb = count * entry_size / 1e6

        reader = await client.open(handle.ledger_id)
        start = time.perf_counter()
        read = 0
        for first in range(0, count, 256):
            read += len(await reader.read(first, min(count, first + 256) - 1))
        read_rate = size_mb / (time.perf_counter() - start)
        assert read == count

        victim.kill()
        while victim.bookie_id in {b.bookie_id for b in await client.bookies()}:
            await asyncio.sleep(0.2)
        await ur.mark(store, handle.ledger_id, [victim.bookie_id])
        worker = ReplicationWorker(store, client, WorkerOptions(), name="bench")
        start = time.perf_counter()
        assert await worker.recover(handle.ledger_id)
        copy_rate = size_mb / (time.perf_counter() - start)
        meta, _ = await client.read_metadata(handle.ledger_id)
        assert meta.last_fragment.ensemble == (target.bookie_id, survivor.bookie_id)
        await client.delete(handle.ledger_id)
        return read_rate, copy_rate
    finally:
        await client.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--entry-size", type=int, default=16 * 1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory(prefix="recovery-bench-", dir=".") as tmp:
        base = Path(tmp)
        etcd = EtcdServer(base / "etcd").start()
        procs: list[BookieProc] = []
        try:
            procs = [BookieProc(etcd.url, base).start() for _ in range(3)]
            for _ in range(args.rounds):
                rows.append(
                    asyncio.run(one_round(etcd.url, procs, mb=args.mb, entry_size=args.entry_size))
                )
                procs[0].restart()
                procs = [procs[2], procs[1], procs[0]]  # next round loses another bookie
        finally:
            for p in procs:
                p.stop()
            etcd.stop()
    print(f"{args.mb} MB ledger, {args.entry_size} B entries, E=Wq=Aq=2")
    print(f"{'round':>5} {'catch-up read MB/s':>19} {'re-replication MB/s':>20} {'ratio':>6}")
    for n, (read_rate, copy_rate) in enumerate(rows):
        print(f"{n:5d} {read_rate:19.1f} {copy_rate:20.1f} {copy_rate / read_rate:6.2f}")
    print(f"median re-replication / catch-up read: {statistics.median(c / r for r, c in rows):.2f}")


if __name__ == "__main__":
    main()
