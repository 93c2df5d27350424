"""A broker stand-in for crash tests: owns one managed ledger, produces, then consumes and
acknowledges slowly until it is killed.

``python -m tests.integration.managed_ledger.owner_proc METADATA_URL NAME ENTRIES INTERVAL``

A producer keeps adding ``late<i>`` entries, printing ``ADD <ledger>:<entry> <i>`` once
each is confirmed. Every acknowledgement is announced on stdout *before* it is made
(``ACK <ledger>:<entry> <unix time>``), so the set announced is a superset of the set
acknowledged when the process dies. Every 7th entry is never acknowledged.
"""

from __future__ import annotations

import asyncio
import sys
import time

from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.api import InitialPosition, ManagedLedgerConfig
from magnetar.managed_ledger.factory import ManagedLedgerFactoryImpl
from magnetar.metadata import open_store

SKIP_EVERY = 7


async def main(url: str, name: str, entries: int, interval: float) -> None:
    store = await open_store(url)
    client = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    config = ManagedLedgerConfig(max_entries_per_ledger=100, cursor_persist_interval_s=interval)
    factory = ManagedLedgerFactoryImpl(store, client, default_config=config)
    ml = await factory.open(name)
    cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    await asyncio.gather(*(ml.add_entry(b"m%d" % i) for i in range(entries)))
    print(f"LAST {ml.last_confirmed_entry}", flush=True)
    print("READY", flush=True)

    async def produce() -> None:  # keeps adding (and rolling ledgers) until killed
        i = 0
        while True:
            pos = await ml.add_entry(b"late%d" % i)
            print(f"ADD {pos} {i}", flush=True)
            i += 1
            await asyncio.sleep(0.005)  # paces the producer (ledgers keep rolling)

    producer = asyncio.create_task(produce())
    n = 0
    while True:
        for entry in await cursor.read_entries_or_wait(10):
            n += 1
            if n % SKIP_EVERY == 0:
                continue
            print(f"ACK {entry.position} {time.time():.6f}", flush=True)
            await cursor.delete([entry.position])
            await asyncio.sleep(0.002)  # paces the acks, spread over the run
        assert not producer.done()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
