"""``magnetar standalone`` as a subprocess for tests: free loopback ports, its own data
directory, bounded readiness wait (the binary port open and the health endpoint answering
``ok``), SIGTERM/SIGKILL by pid, restart on the same directory and ports."""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pulsar

from tests.support.procs import LOOPBACK, Proc, free_port, port_open, started


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


@contextlib.contextmanager
def running(data_dir: Path, *, extra_args: Sequence[str] = ()) -> Iterator[StandaloneProc]:
    """A standalone started on ``data_dir`` (ready), stopped by pid on exit: the body of the
    suites' standalone fixtures."""
    with started(StandaloneProc(data_dir, extra_args=extra_args)) as proc:
        yield proc


@contextlib.contextmanager
def client(proc: StandaloneProc, *, timeout_s: int = 15, **options: Any) -> Iterator[pulsar.Client]:
    """An official client of ``proc`` (``options``: more ``pulsar.Client`` arguments), closed
    on exit."""
    c = pulsar.Client(proc.service_url, operation_timeout_seconds=timeout_s, **options)
    try:
        yield c
    finally:
        c.close()
