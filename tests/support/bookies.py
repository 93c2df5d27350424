"""Real bookie processes (``python -m magnetar.cli bookie``) for tests, on free loopback
ports, with bounded readiness waits (gRPC port open and /health answering 200), killed or
stopped by pid."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, ServerProc, free_ports, port_open

TEST_SESSION_TTL = 2.0


class BookieProc(ServerProc):
    def __init__(
        self,
        metadata_url: str,
        base_dir: Path,
        *,
        rack: str = "/default-rack",
        session_ttl: float = TEST_SESSION_TTL,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port, self.http_port = free_ports(2)
        self.data_dir = base_dir / f"bookie-{self.port}"
        self.journal_dir = self.data_dir / "journal"
        self.ledgers_dir = self.data_dir / "ledgers"
        argv = [
            sys.executable, "-m", "magnetar.cli", "bookie",
            "--metadata-url", metadata_url,
            "--data-dir", str(self.ledgers_dir),
            "--journal-dir", str(self.journal_dir),
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--bind-address", LOOPBACK,
            "--advertised-address", LOOPBACK,
            "--rack", rack,
            "--session-ttl", str(session_ttl),
            *extra_args,
        ]  # fmt: skip
        self.proc = Proc(
            argv, log_path=self.data_dir / "bookie.log", ready=self.ready, ready_timeout=30
        )

    @property
    def bookie_id(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            url = f"http://{LOOPBACK}:{self.http_port}/health"
            with urllib.request.urlopen(url, timeout=0.5) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def metrics(self) -> str:
        url = f"http://{LOOPBACK}:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
