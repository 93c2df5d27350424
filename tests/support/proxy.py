"""``magnetar proxy`` as a subprocess for tests: free loopback ports, bounded readiness wait
(the binary port open and ``/status.html`` answering 200, i.e. a broker is known), stopped
by pid. With ``tls`` (the context the tests' HTTPS calls use) it also listens on
``servicePortTls`` / ``webServicePortTls``; ``plaintext=False`` switches the plaintext ports
off."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, TlsAddresses, free_ports, port_open


class ProxyProc(TlsAddresses):
    def __init__(
        self,
        base_dir: Path,
        *,
        args: Sequence[str],
        ready_timeout: float = 30.0,
        env: dict[str, str] | None = None,
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
        self.ready_timeout = ready_timeout
        self.env = env
        self.proc = self._process(argv, base_dir / f"proxy-{self.port}.log")

    def _process(self, argv: Sequence[str], log_path: Path) -> Proc:
        return Proc(
            argv,
            log_path=log_path,
            ready=self.ready,
            ready_timeout=self.ready_timeout,
            env=self.env,
        )

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

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


ROOT = Path(__file__).resolve().parents[2]


class PulsarProxyProc(ProxyProc):
    """Apache Pulsar's proxy (ProxyServiceStarter) from the jars
    ``scripts/bench/install_pulsar.sh bench/peers/pulsar-proxy-pom.xml pulsar-proxy``
    assembles, run with the same proxy.conf (``--config FILE`` in ``args``) plus its ports,
    for checking Magnetar's proxy against it. ``basic_auth_conf``: the htpasswd file, which
    Pulsar's basic provider reads from a system property."""

    def __init__(
        self,
        base_dir: Path,
        *,
        conf: Path,
        tls: ssl.SSLContext,
        basic_auth_conf: Path | None = None,
        ready_timeout: float = 90.0,
    ) -> None:
        super().__init__(base_dir, args=[], tls=tls, plaintext=False, ready_timeout=ready_timeout)
        out = subprocess.run(
            ["bash", "scripts/bench/install_pulsar.sh", "bench/peers/pulsar-proxy-pom.xml",
             "pulsar-proxy"],
            cwd=ROOT, capture_output=True, text=True, timeout=1800, check=True,
        )  # fmt: skip
        lib = out.stdout.strip().splitlines()[-1]
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is needed to run Apache Pulsar's proxy")
        conf_file = base_dir / "pulsar-proxy.conf"
        conf_file.write_text(
            conf.read_text() + f"servicePort=\nwebServicePort=\nservicePortTls={self.tls_port}\n"
            f"webServicePortTls={self.https_port}\nbindAddress={LOOPBACK}\n"
            "authenticateMetricsEndpoint=false\nclusterName=standalone\n"
            "brokerProxyAllowedTargetPorts=*\n"
        )
        argv = [
            java, "-Xmx512m",
            "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            "-Dio.netty.tryReflectionSetAccessible=true",
            f"-Dlog4j.configurationFile={ROOT / 'bench/peers/log4j2.xml'}",
            *([f"-Dpulsar.auth.basic.conf={basic_auth_conf}"] if basic_auth_conf else []),
            "-cp", f"{lib}/*",
            "org.apache.pulsar.proxy.server.ProxyServiceStarter", "-c", str(conf_file),
        ]  # fmt: skip
        self.proc = self._process(argv, base_dir / f"pulsar-proxy-{self.tls_port}.log")

    def ready(self) -> bool:
        """The TLS port open and /metrics answering (Pulsar's /status.html needs a status
        file)."""
        if not port_open(self.tls_port):
            return False
        try:
            return bool(self.metrics())
        except (OSError, urllib.error.URLError):
            return False
