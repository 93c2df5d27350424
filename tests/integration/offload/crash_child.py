"""Run as a process by test_crash.py: writes a ledger on its own bookie, records an offload
attempt (prints it as one JSON line, as the managed ledger stores it before uploading),
then offloads it; reads past ``gate_at`` block until ``gate_file`` exists, so the parent can
SIGKILL this process with the upload known to be half done.

    python -m tests.integration.offload.crash_child '<json settings>'
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.metadata import open_store
from magnetar.offload.config import S3Config
from magnetar.offload.offloader import Offloader
from tests.integration.offload.conftest import payloads
from tests.support.procs import LOOPBACK, free_port


class FileGatedLedger:
    def __init__(self, handle: LedgerHandle, gate_at: int, gate_file: Path) -> None:
        self._handle = handle
        self._gate_at = gate_at
        self._gate_file = gate_file
        self.ledger_id = handle.ledger_id
        self.closed = handle.closed
        self.last_add_confirmed = handle.last_add_confirmed
        self.length = handle.length

    async def read(self, first: int, last: int) -> list[tuple[int, bytes]]:
        if last >= self._gate_at:
            if first < self._gate_at:
                last = self._gate_at - 1
            else:
                print("GATED", flush=True)
                while not self._gate_file.exists():
                    await asyncio.sleep(0.05)
        return await self._handle.read(first, last)


async def main(settings: dict[str, Any]) -> None:
    base = Path(settings["dir"])
    store = await open_store(f"embedded://{base / 'metadata'}")
    bookie = BookieServer(
        store,
        BookieOptions(
            data_dir=base / "bookie",
            port=free_port(),
            http_port=free_port(),
            bind_address=LOOPBACK,
            advertised_address=LOOPBACK,
        ),
    )
    await bookie.start()
    assert bookie.service is not None
    client = LedgerClient(store, local_bookies={bookie.bookie_id: bookie.service})
    while not await client.bookies():
        await asyncio.sleep(0.05)
    writer = await client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    await asyncio.gather(*(writer.append(p) for p in payloads(settings["sizes"])))
    await writer.close()
    handle = await client.open(writer.ledger_id)
    offloader = Offloader(S3Config(**settings["s3"]))
    attempt = offloader.begin(handle.ledger_id)
    print(json.dumps(attempt.to_record()), flush=True)
    gated = FileGatedLedger(handle, settings["gate_at"], Path(settings["gate_file"]))
    result = await offloader.offload(gated, attempt)
    print(json.dumps(result.to_record()), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
