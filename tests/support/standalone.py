"""``magnetar standalone`` as a subprocess for tests: free loopback ports, its own data
directory, bounded readiness wait (the binary port open and the health endpoint answering
``ok``), SIGTERM/SIGKILL by pid, restart on the same directory and ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
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
A suite that asks which broker owns a topic then compares the owner's URL with
:meth:`BrokerProc.serves` (a worker's own ports), not with the process's configured ports,
and counts :attr:`BrokerProc.workers` brokers per process."""


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
        argv_prefix: Sequence[str] = (),
    ) -> None:
        """``argv_prefix``: a command the broker is run under, which must exec it (the pid
        stays the broker's), e.g. ``["taskset", "-c", "0"]`` to pin it and its workers."""
        self.auth_token = auth_token
        self.port, self.http_port = free_ports(2)
        e, wq, aq = ensemble
        argv = [
            *argv_prefix,
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
        given = list(extra_args)
        self.workers = (
            int(given[given.index("--workers") + 1]) if "--workers" in given else int(workers or 1)
        )
        """Brokers of the cluster this process is (its worker processes, or 1)."""
        self.proc = Proc(
            argv,
            log_path=base_dir / f"broker-{self.port}.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
        )

    def kill(self) -> None:
        """kill -9 of the broker and, with workers, of every worker at once (a pod dying, not
        the workers' orderly exit when their parent goes): its process group, which is its
        own (``Proc`` starts a session), then the reaping of the parent."""
        sockets = self._worker_dirs()
        if self.pid is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self.proc.kill()
        for directory in sockets:  # what the parent, killed, could not remove
            shutil.rmtree(directory, ignore_errors=True)

    def _worker_dirs(self) -> set[str]:
        """The workers' socket directories (``--worker-dir``) of the running parent."""
        if self.pid is None:
            return set()
        found: set[str] = set()
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children():
                with contextlib.suppress(psutil.Error):
                    argv = child.cmdline()
                    if "--worker-dir" in argv[:-1]:
                        found.add(argv[argv.index("--worker-dir") + 1])
        return found

    def restart(self) -> None:
        self.kill()
        self.proc.start()

    def ports(self) -> set[int]:
        """Every port the broker listens on: the configured ones and, with workers, each
        worker's own (those its broker id and the lookups' URLs carry)."""
        if self.pid is None:
            return set()
        try:
            parent = psutil.Process(self.pid)
            procs = [parent, *parent.children()]
        except psutil.NoSuchProcess:
            return set()
        listening: set[int] = set()
        for proc in procs:
            try:
                conns = proc.net_connections(kind="tcp")
            except psutil.NoSuchProcess:  # a worker just exiting
                continue
            listening |= {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
        return listening

    def serves(self, url: str) -> bool:
        """Whether ``url`` (a lookup's ``brokerUrl`` or ``httpUrl``, a redirect's Location)
        is one of this broker's (one of its workers', with workers)."""
        return urlsplit(url).port in self.ports()


def holders(brokers: Iterable[BrokerProc], urls: Iterable[str]) -> set[BrokerProc]:
    """The brokers ``urls`` (owners' URLs from lookups) belong to (:meth:`BrokerProc.serves`)."""
    found = list(urls)
    return {b for b in brokers if any(b.serves(u) for u in found)}


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
