"""``magnetar proxy`` as a subprocess for tests: free loopback ports, bounded readiness wait
(the binary port open and ``/status.html`` answering 200, i.e. a broker is known), stopped
by pid."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, free_port, port_open


class ProxyProc:
    def __init__(
        self,
        base_dir: Path,
        *,
        args: Sequence[str],
        ready_timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.http_port = free_port()
        while self.http_port == self.port:
            self.http_port = free_port()
        argv = [
            sys.executable, "-m", "magnetar.cli", "proxy",
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--bind-address", LOOPBACK,
            *args,
        ]  # fmt: skip
        self.proc = Proc(
            argv,
            log_path=base_dir / f"proxy-{self.port}.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
            env=env,
        )

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            with urllib.request.urlopen(f"{self.http_url}/status.html", timeout=0.5) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self) -> ProxyProc:
        self.proc.start()
        return self

    def stop(self) -> None:
        self.proc.stop()

    def tail(self, n: int = 40) -> str:
        return self.proc.tail(n)
