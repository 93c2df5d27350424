"""e2e fixtures: a kind cluster with the chart installed (e2e/kind.sh), or a skip with the
reason when this machine has no working container runtime (Docker or Podman)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def container_runtime() -> str | None:
    """``docker`` or ``podman`` when its daemon/service answers, else None."""
    for cli in ("docker", "podman"):
        if shutil.which(cli) is None:
            continue
        ok = subprocess.run([cli, "info"], capture_output=True, timeout=30, check=False)
        if ok.returncode == 0:
            return cli
    return None


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[str]:
    runtime = container_runtime()
    if runtime is None:
        pytest.skip(
            "e2e needs a working container runtime for kind (docker or podman): "
            "`docker info` fails here (no daemon); run the k8s suite instead: make test-k8s"
        )
    subprocess.run(["bash", str(ROOT / "e2e/kind.sh"), "up"], check=True, timeout=1800)
    try:
        yield "magnetar-e2e"
    finally:
        subprocess.run(["bash", str(ROOT / "e2e/kind.sh"), "down"], check=False, timeout=600)
