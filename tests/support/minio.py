"""A real MinIO server for tests and benchmarks: free loopback ports, its own data directory
and root credentials, a bounded readiness wait, stopped (or paused, to play a stalled S3)
by pid.

The binary is built from the Go module proxy by scripts/k8s/install-minio.sh at the version
pinned in scripts/k8s/versions.env and cached in .cache/k8s-bin (`make test` builds it when
Go is on the machine; without it the offload suites skip with a message).
"""

from __future__ import annotations

import os
import secrets
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

import boto3
import botocore.config

from tests.support.procs import LOOPBACK, Proc, ServerProc, free_port

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "scripts" / "k8s" / "versions.env"
INSTALL_SCRIPT = "scripts/k8s/install-minio.sh"


def _pinned_version() -> str:
    for line in VERSIONS.read_text().splitlines():
        if line.startswith("MINIO_VERSION="):
            return line.split("=", 1)[1].split("#", 1)[0].strip()
    raise RuntimeError(f"MINIO_VERSION is not pinned in {VERSIONS}")


def minio_binary() -> Path:
    cache = Path(os.environ.get("MAGNETAR_K8S_BIN", ROOT / ".cache" / "k8s-bin"))
    version = _pinned_version()
    return cache / f"minio-{version}" / "minio"


def minio_available() -> bool:
    return minio_binary().is_file()


class MinioServer(ServerProc):
    """One MinIO on 127.0.0.1 with its own data directory and root credentials."""

    def __init__(self, base_dir: Path, *, ready_timeout: float = 30.0) -> None:
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.port = free_port()
        self.console_port = free_port()
        while self.console_port == self.port:
            self.console_port = free_port()
        self.access_key = "magnetar-" + secrets.token_hex(4)
        self.secret_key = secrets.token_hex(16)
        self.region = "us-east-1"
        argv = [
            str(minio_binary()),
            "server",
            str(self.data_dir),
            "--address",
            f"{LOOPBACK}:{self.port}",
            "--console-address",
            f"{LOOPBACK}:{self.console_port}",
            "--quiet",
        ]
        env = {
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "MINIO_REGION": self.region,
            "HOME": str(base_dir),  # MinIO keeps its client config under $HOME
        }
        self.proc = Proc(
            argv,
            log_path=base_dir / "minio.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
            env=env,
        )
        self.paused = False

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def ready(self) -> bool:
        try:
            url = f"{self.endpoint}/minio/health/ready"
            with urllib.request.urlopen(url, timeout=0.5) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return super().start()

    def stop(self, timeout: float | None = None) -> None:
        self.resume()  # a stopped (SIGSTOP) process would not see the SIGTERM
        super().stop(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.paused = False

    def restart(self) -> None:
        """Start again on the same data directory, port and credentials."""
        self.stop()
        self.proc.start()

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing (a stalled S3)."""
        self.proc.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.proc.signal(signal.SIGCONT)
            self.paused = False

    def client(self, **config: Any) -> Any:
        """A plain boto3 S3 client with the root credentials (test setup and checks)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=botocore.config.Config(
                s3={"addressing_style": "path"}, retries={"max_attempts": 2}, **config
            ),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (what a test checks is left behind)."""
        found: list[str] = []
        for page in (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        ):
            found.extend(o["Key"] for o in page.get("Contents", []))
        return found

    def uploads(self, bucket: str, prefix: str = "") -> list[str]:
        """Keys of the multipart uploads in progress under ``prefix``. MinIO lists uploads
        by exact object key only (an empty prefix lists those it has in memory), so pass
        the data key to be sure."""
        out = self.client().list_multipart_uploads(Bucket=bucket, Prefix=prefix)
        return [u["Key"] for u in out.get("Uploads", [])]
