"""``magnetar standalone`` as a subprocess for tests: free loopback ports, its own data
directory, bounded readiness wait (the binary port open and the health endpoint answering
``ok``), SIGTERM/SIGKILL by pid, restart on the same directory and ports; and
:func:`admin_call`, one JSON call of a broker's admin API."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.procs import LOOPBACK, Proc, free_port, port_open


def admin_call(
    http_url: str, method: str, path: str, body: object = None, *, timeout: float = 30.0
) -> Any:
    """``method /admin/v2{path}`` with a JSON body; the decoded answer (None when empty).
    HTTP errors raise urllib.error.HTTPError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{http_url}/admin/v2{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read()
        return json.loads(text) if text else None


class StandaloneProc:
    def __init__(
        self, data_dir: Path, *, extra_args: Sequence[str] = (), ready_timeout: float = 60.0
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.http_port = free_port()
        while self.http_port == self.port:
            self.http_port = free_port()
        argv = [
            sys.executable, "-m", "magnetar.cli", "standalone",
            "--data-dir", str(data_dir),
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--advertised-address", LOOPBACK,
            "--bind-address", LOOPBACK,
            *extra_args,
        ]  # fmt: skip
        self.proc = Proc(
            argv,
            log_path=data_dir.parent / f"{data_dir.name}.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
        )

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            with urllib.request.urlopen(
                f"{self.http_url}/admin/v2/brokers/health", timeout=0.5
            ) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"{self.http_url}{path}", timeout=10) as r:
            return str(r.read().decode())

    def metrics(self) -> str:
        return self.get("/metrics")

    def start(self) -> StandaloneProc:
        self.proc.start()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self.proc.stop(timeout)

    def kill(self) -> None:
        self.proc.kill()

    def restart(self) -> None:
        """Start again on the same data directory and ports (after kill or stop)."""
        self.proc.kill()
        self.proc.start()

    def alive(self) -> bool:
        return self.proc.alive()

    def tail(self, n: int = 40) -> str:
        return self.proc.tail(n)

    def log(self) -> str:
        """Everything the process has logged so far."""
        return self.proc.log_path.read_text(errors="replace")


class BrokerProc:
    """``magnetar broker`` (cluster form) as a subprocess, against etcd and its bookies."""

    def __init__(
        self,
        metadata_url: str,
        base_dir: Path,
        *,
        ensemble: tuple[int, int, int] = (2, 2, 2),
        session_ttl: float = 5.0,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
    ) -> None:
        self.port = free_port()
        self.http_port = free_port()
        while self.http_port == self.port:
            self.http_port = free_port()
        e, wq, aq = ensemble
        argv = [
            sys.executable, "-m", "magnetar.cli", "broker",
            "--metadata-url", metadata_url,
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--bind-address", LOOPBACK,
            "--advertised-address", LOOPBACK,
            "--ensemble-size", str(e),
            "--write-quorum", str(wq),
            "--ack-quorum", str(aq),
            "--session-ttl", str(session_ttl),
            *extra_args,
        ]  # fmt: skip
        self.proc = Proc(
            argv,
            log_path=base_dir / f"broker-{self.port}.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
        )

    service_url = StandaloneProc.service_url
    http_url = StandaloneProc.http_url
    ready = StandaloneProc.ready
    get = StandaloneProc.get
    metrics = StandaloneProc.metrics
    start = StandaloneProc.start  # type: ignore[assignment]
    stop = StandaloneProc.stop
    kill = StandaloneProc.kill
    restart = StandaloneProc.restart
    alive = StandaloneProc.alive
    tail = StandaloneProc.tail
    log = StandaloneProc.log
