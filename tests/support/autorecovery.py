"""``magnetar autorecovery`` processes for tests: an auditor candidate and a recovery worker
on free loopback ports, ready once /health answers; killed or stopped by pid."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.procs import LOOPBACK, Proc, ServerProc, free_ports

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
