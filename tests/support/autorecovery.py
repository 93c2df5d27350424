"""``magnetar autorecovery`` processes for tests: an auditor candidate and a recovery worker
on free loopback ports, ready once /health answers; killed or stopped by pid."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from magnetar.ledger import entry
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import api
from tests.support.procs import LOOPBACK, Proc, ServerProc, free_ports
from tests.support.wait import eventually

FAST = (
    "--lost-bookie-recovery-delay", "3",
    "--audit-interval", "1",
    "--open-ledger-grace", "5",
    "--session-ttl", "2",
)  # fmt: skip
"""Short delays so a test sees a lost bookie's ledgers move within seconds."""


class AutorecoveryProc(ServerProc):
    def __init__(
        self, metadata_url: str, base_dir: Path, *, extra_args: Sequence[str] = FAST
    ) -> None:
        (self.http_port,) = free_ports(1)
        argv = [
            sys.executable, "-m", "magnetar.cli", "autorecovery",
            "--metadata-url", metadata_url,
            "--http-port", str(self.http_port),
            "--bind-address", LOOPBACK,
            "--log-level", "INFO",
            *extra_args,
        ]  # fmt: skip
        self.proc = Proc(
            argv,
            log_path=base_dir / f"autorecovery-{self.http_port}.log",
            ready=self.ready,
            ready_timeout=30,
        )

    def health(self) -> dict[str, Any]:
        url = f"http://{LOOPBACK}:{self.http_port}/health"
        with urllib.request.urlopen(url, timeout=2) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc

    def ready(self) -> bool:
        try:
            self.health()
            return True
        except (OSError, urllib.error.URLError):
            return False

    def metrics(self) -> str:
        url = f"http://{LOOPBACK}:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())


async def kill_one_and_read_back(
    ledgers: LedgerClient,
    store: api.MetadataStore,
    bookies: Mapping[str, Proc | ServerProc],
    *,
    prefix: bytes,
    registered_timeout: float = 30,
) -> None:
    """With three bookies registered: a ledger of 50 entries (E=Wq=Aq=2), its first bookie
    SIGKILLed; a running autorecovery moves the ledger off it and clears its marks, and both
    copies, the restored one too, read back by content."""

    async def registered() -> bool:
        return len(await ledgers.bookies()) == 3

    await eventually(registered, timeout=registered_timeout, interval=0.2, what="3 bookies")
    handle = await ledgers.create(ensemble_size=2, write_quorum=2, ack_quorum=2)
    entries = [prefix + b"-%d" % i for i in range(50)]
    for data in entries:
        await handle.add_entry(data)
    await handle.close()
    victim = handle.metadata.last_fragment.ensemble[0]
    bookies[victim].kill()

    async def moved() -> bool:
        meta, _ = await ledgers.read_metadata(handle.ledger_id)
        return victim not in meta.last_fragment.ensemble and not await ur.marks(store)

    await eventually(moved, timeout=90, interval=0.5, what=f"ledger moved off {victim}")
    meta, _ = await ledgers.read_metadata(handle.ledger_id)
    for bookie_id in meta.last_fragment.ensemble:
        got = await ledgers.bookie(bookie_id).read(handle.ledger_id, 0, 49, past_lac=True)
        assert [entry.unwrap(d)[1] for _, d in got] == entries, bookie_id
