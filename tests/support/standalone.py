"""``magnetar standalone`` as a subprocess for tests: free loopback ports, its own data
directory, bounded readiness wait (the binary port open and the health endpoint answering
``ok``), SIGTERM/SIGKILL by pid, restart on the same directory and ports."""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pulsar

from magnetar.client import admin
from magnetar.security.client_auth import Credentials
from tests.support.procs import LOOPBACK, Proc, ServerProc, free_ports, port_open, started


def admin_call(
    http_url: str,
    method: str,
    path: str,
    body: object = None,
    *,
    timeout: float = 30.0,
    token: str | None = None,
) -> Any:
    """``method /admin/v2{path}`` with a JSON body (None: no body) through the client layer's
    admin client; the decoded answer (None when empty). An error status raises
    :class:`magnetar.client.admin.AdminError` (``status``, ``reason``)."""
    creds = None if token is None else Credentials.parse("token", token)
    client = admin.AdminClient(http_url, credentials=creds, timeout=timeout)
    return client.call(method, f"/admin/v2{path}", admin.NO_BODY if body is None else body)


class BrokerHttpProc(ServerProc):
    """A process serving a broker (standalone or cluster form): its binary-protocol and HTTP
    ports, readiness (the port open and the health check answering), HTTP reads."""

    stop_timeout_s = 20.0
    port: int
    http_port: int
    auth_token: str | None = None
    """Sent as ``Authorization: Bearer`` by the readiness check (a broker with
    authentication on answers the health check to a super-user only)."""

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        request = urllib.request.Request(f"{self.http_url}/admin/v2/brokers/health")
        if self.auth_token is not None:
            request.add_header("Authorization", f"Bearer {self.auth_token}")
        try:
            with urllib.request.urlopen(request, timeout=0.5) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"{self.http_url}{path}", timeout=10) as r:
            return str(r.read().decode())

    def metrics(self) -> str:
        return self.get("/metrics")


class StandaloneProc(BrokerHttpProc):
    """``magnetar standalone`` as a subprocess on free loopback ports."""

    def __init__(
        self, data_dir: Path, *, extra_args: Sequence[str] = (), ready_timeout: float = 60.0
    ) -> None:
        self.data_dir = data_dir
        self.port, self.http_port = free_ports(2)
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


BROKER_WORKERS_ENV = "MAGNETAR_TEST_BROKER_WORKERS"
"""Set to N > 1, every :class:`BrokerProc` that names no ``--workers`` runs N worker
processes (``magnetar broker --workers N``): the cluster suites against the multi-process
broker (``MAGNETAR_TEST_BROKER_WORKERS=2 .venv/bin/python -m pytest tests/integration/...``).
Suites that count brokers (two_brokers' load reports, ownership spread) then see N per
process."""


class BrokerProc(BrokerHttpProc):
    """``magnetar broker`` (cluster form) as a subprocess, against etcd and its bookies
    (with :data:`BROKER_WORKERS_ENV` set, N worker processes behind its ports)."""

    def __init__(
        self,
        metadata_url: str,
        base_dir: Path,
        *,
        ensemble: tuple[int, int, int] = (2, 2, 2),
        session_ttl: float = 5.0,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
        auth_token: str | None = None,
    ) -> None:
        self.auth_token = auth_token
        self.port, self.http_port = free_ports(2)
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
        workers = os.environ.get(BROKER_WORKERS_ENV, "")
        if workers and "--workers" not in extra_args:
            argv += ["--workers", workers]
        self.proc = Proc(
            argv,
            log_path=base_dir / f"broker-{self.port}.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
        )


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
