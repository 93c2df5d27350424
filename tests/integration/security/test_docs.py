"""docs/security.md's step-by-step section, run literally: its ``sh`` blocks with bash, its
``properties`` block as the standalone's configuration, its ``python`` block with the
official client (the only edit: the example's fixed port becomes the free one)."""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path

from tests.integration.security.conftest import magnetar_only
from tests.support.pki import CertificateAuthority
from tests.support.procs import LOOPBACK, Proc, free_ports, port_open, started
from tests.support.standalone import BrokerHttpProc

ROOT = Path(__file__).resolve().parents[3]
SECTION = "## A secured standalone, step by step"


def _blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs/security.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


class _DocStandalone(BrokerHttpProc):
    def __init__(self, cwd: Path, tls_port: int, ca: Path) -> None:
        self.tls_port = tls_port
        self.ca = ca
        self.proc = Proc(
            [sys.executable, "-m", "magnetar.cli", "standalone", "--config", "standalone.conf",
             "--data-dir", "data"],
            log_path=cwd / "standalone.log",
            ready=self.ready,
            cwd=cwd,
        )  # fmt: skip

    def ready(self) -> bool:
        if not port_open(self.tls_port):
            return False
        ctx = ssl.create_default_context(cafile=str(self.ca))
        try:
            with socket.create_connection((LOOPBACK, self.tls_port), timeout=2) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    return True
        except OSError:
            return False


@magnetar_only("Magnetar's own documentation")
def test_the_step_by_step_section_runs_as_written(tmp_path: Path) -> None:
    blocks = _blocks()
    assert [kind for kind, _ in blocks] == ["sh", "properties", "sh", "python"], blocks
    ca = CertificateAuthority(tmp_path / "pki")
    pair = ca.issue("localhost", server=True)
    (tmp_path / "ca.pem").write_bytes(ca.ca_file.read_bytes())
    (tmp_path / "broker.cert.pem").write_bytes(pair.cert.read_bytes())
    (tmp_path / "broker.key.pem").write_bytes(pair.key.read_bytes())
    tls_port, https_port = free_ports(2)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PORT_TLS": str(tls_port),
        "PORT_HTTPS": str(https_port),
        "PWD": str(tmp_path),
    }

    def sh(script: str) -> str:
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert out.returncode == 0, f"{script}\n--> {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out.stdout

    (_, tokens_block), (_, conf), (_, admin_block), (_, python_block) = blocks
    printed = sh(tokens_block)
    assert '"sub": "app"' in printed, printed
    for name in ("PORT_TLS", "PORT_HTTPS", "PWD"):
        conf = conf.replace(f"${name}", env[name])
    (tmp_path / "standalone.conf").write_text(conf)
    with started(_DocStandalone(tmp_path, tls_port, tmp_path / "ca.pem")):
        listed = sh(admin_block)
        assert '"app"' in listed or "app" in listed, listed
        script = python_block.replace(
            '"pulsar+ssl://localhost:6651"', f'"pulsar+ssl://localhost:{tls_port}"'
        )
        out = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
