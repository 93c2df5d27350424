"""Run as a process by test_crash.py: writes a ledger on its own bookie, records an offload
attempt (prints it as one JSON line, as the managed ledger stores it before uploading),
then offloads it; reads past ``gate_at`` block for good (the child prints ``GATED``), so the
parent can SIGKILL this process with the upload known to be half done.

    python -m tests.integration.offload.crash_child '<json settings>'
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.offload.config import S3Config
from magnetar.offload.offloader import Offloader
from tests.integration.offload.conftest import LedgerEnv, payloads
from tests.support.local_bookie import local_ledgers


class GatedLedger:
    def __init__(self, handle: LedgerHandle, gate_at: int) -> None:
        self._handle = handle
        self._gate_at = gate_at
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
                await asyncio.Event().wait()  # never set: held here until the parent kills us
        return await self._handle.read(first, last)


async def main(settings: dict[str, Any]) -> None:
    async with local_ledgers(Path(settings["dir"])) as env:
        await offload(env.client, settings)


async def offload(client: LedgerClient, settings: dict[str, Any]) -> None:
    handle = await LedgerEnv(client).write(payloads(settings["sizes"]))
    offloader = Offloader(S3Config(**settings["s3"]))
    attempt = offloader.begin(handle.ledger_id)
    print(json.dumps(attempt.to_record()), flush=True)
    gated = GatedLedger(handle, settings["gate_at"])
    result = await offloader.offload(gated, attempt)
    print(json.dumps(result.to_record()), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
