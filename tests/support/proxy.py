"""``magnetar proxy`` as a subprocess for tests: free loopback ports, bounded readiness wait
(the binary port open and ``/status.html`` answering 200, i.e. a broker is known), stopped
by pid. With ``tls`` (the context the tests' HTTPS calls use) it also listens on
``servicePortTls`` / ``webServicePortTls``; ``plaintext=False`` switches the plaintext ports
off."""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, free_ports, port_open


class ProxyProc:
    def __init__(
        self,
        base_dir: Path,
        *,
        args: Sequence[str],
        ready_timeout: float = 30.0,
        tls: ssl.SSLContext | None = None,
        plaintext: bool = True,
    ) -> None:
        self.port, self.http_port, self.tls_port, self.https_port = free_ports(4)
        self.tls = tls
        self.plaintext = plaintext
        ports = [
            "--port", str(self.port) if plaintext else "off",
            "--http-port", str(self.http_port) if plaintext else "off",
        ]  # fmt: skip
        if tls is not None:
            ports += [
                "--service-port-tls", str(self.tls_port),
                "--web-service-port-tls", str(self.https_port),
            ]  # fmt: skip
        argv = [
            sys.executable, "-m", "magnetar.cli", "proxy",
            *ports,
            "--bind-address", LOOPBACK,
            *args,
        ]  # fmt: skip
        self.proc = Proc(
            argv,
            log_path=base_dir / f"proxy-{self.port}.log",
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
    def tls_service_url(self) -> str:
        return f"pulsar+ssl://localhost:{self.tls_port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.https_port}"

    def ready(self) -> bool:
        if self.plaintext:
            port, url, context = self.port, self.http_url, None
        else:
            port, url, context = self.tls_port, self.https_url, self.tls
        if not port_open(port):
            return False
        try:
            with urllib.request.urlopen(f"{url}/status.html", timeout=0.5, context=context) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def metrics(self) -> str:
        url, context = (self.http_url, None) if self.plaintext else (self.https_url, self.tls)
        with urllib.request.urlopen(f"{url}/metrics", timeout=10, context=context) as r:
            return str(r.read().decode())

    def start(self) -> ProxyProc:
        self.proc.start()
        return self

    def stop(self) -> None:
        self.proc.stop()

    def tail(self, n: int = 40) -> str:
        return self.proc.tail(n)
