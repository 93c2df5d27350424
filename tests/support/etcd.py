"""A real etcd server for tests: free loopback ports, its own data directory, bounded
readiness wait, kill -9 and restart on the same directory and ports, stop by pid.

Tuned for speed and short leases: a 50 ms heartbeat and 250 ms election timeout (so the
minimum lease TTL is 1 s and a restarted single member leads within a fraction of a second),
a small backend quota and snapshot count.

With ``tls`` the client port serves TLS only (``--cert-file``, ``--key-file``, and with
``client_cert_auth`` ``--trusted-ca-file --client-cert-auth``): the readiness check then
speaks TLS with the test client certificate.
"""

from __future__ import annotations

import shutil
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, ServerProc, free_ports

ETCD_BINARY = shutil.which("etcd") or "/usr/bin/etcd"


def etcd_available() -> bool:
    return Path(ETCD_BINARY).is_file()


@dataclass(frozen=True)
class EtcdTls:
    """The client port's TLS: server certificate and key, the CAs client certificates must
    chain to, and (for the readiness check) a client certificate and key they trust."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    client_cert_file: Path
    client_key_file: Path
    client_cert_auth: bool = True


class EtcdServer(ServerProc):
    """One etcd member on 127.0.0.1. ``url`` is the store URL for :func:`open_store`."""

    def __init__(
        self, data_dir: Path, *, ready_timeout: float = 20.0, tls: EtcdTls | None = None
    ) -> None:
        self.data_dir = data_dir
        self.tls = tls
        self.client_port, self.peer_port = free_ports(2)
        client = f"{'https' if tls else 'http'}://{LOOPBACK}:{self.client_port}"
        peer = f"http://{LOOPBACK}:{self.peer_port}"
        argv = [
            ETCD_BINARY,
            "--name=test",
            f"--data-dir={data_dir / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--initial-cluster-state=new",
            "--heartbeat-interval=50",
            "--election-timeout=250",
            "--snapshot-count=5000",
            f"--quota-backend-bytes={256 * 1024 * 1024}",
            "--logger=zap",
            "--log-level=warn",
        ]
        if tls is not None:
            argv += [f"--cert-file={tls.cert_file}", f"--key-file={tls.key_file}"]
            if tls.client_cert_auth:
                argv += [f"--trusted-ca-file={tls.ca_file}", "--client-cert-auth"]
        self.proc = Proc(
            argv,
            log_path=data_dir / "etcd.log",
            ready=self.healthy,
            ready_timeout=ready_timeout,
        )

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.client_port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}" + ("?tls=true" if self.tls else "")

    def healthy(self) -> bool:
        """etcd answers /health with a leader elected."""
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca_file))
            context.load_cert_chain(self.tls.client_cert_file, self.tls.client_key_file)
        scheme = "https" if self.tls else "http"
        try:
            with urllib.request.urlopen(
                f"{scheme}://{self.endpoint}/health", timeout=0.5, context=context
            ) as response:
                return b'"health":"true"' in response.read()
        except (OSError, urllib.error.URLError):
            return False
