"""Two Magnetar standalones joined into one instance, as docs/geo-replication.md shows it:
``magnetar admin`` on each side, the other side's cluster record, a tenant allowing both
clusters and a namespace replicated to both."""

from __future__ import annotations

import subprocess
import sys

from tests.support.standalone import StandaloneProc


def admin(on: StandaloneProc, *args: str) -> str:
    """``magnetar admin`` against ``on`` (its output; a failure fails the test)."""
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", on.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def join(procs: dict[str, StandaloneProc], tenant: str, namespace: str) -> None:
    """Each cluster learns the other's URLs; ``tenant/namespace`` is replicated to both."""
    (name_a, a), (name_b, b) = procs.items()
    for proc, other_name, other in ((a, name_b, b), (b, name_a, a)):
        admin(proc, "clusters", "create", other_name,
              "--url", other.http_url, "--broker-url", other.service_url)  # fmt: skip
        admin(proc, "tenants", "create", tenant, "--allowed-clusters", f"{name_a},{name_b}")
        admin(proc, "namespaces", "create", f"{tenant}/{namespace}")
        admin(proc, "namespaces", "set-clusters", f"{tenant}/{namespace}",
              "--clusters", f"{name_a},{name_b}")  # fmt: skip
