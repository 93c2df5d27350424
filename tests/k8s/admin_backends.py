"""Where the Tenant/Topic tests find a Pulsar admin API, read through that API only: a real
``magnetar standalone`` on free loopback ports (``StandaloneBackend``).

The tests observe and disturb the cluster over HTTP (``AdminView``).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from magnetar.client import admin
from tests.support.procs import LOOPBACK, Proc, free_port


class AdminView:
    """Synchronous reads and out-of-band writes on an admin API (urllib, JSON)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded answer; None when it is 404 (other errors raise AdminError)."""
        client = admin.AdminClient(self.url, timeout=10)
        try:
            return client.call(method, path, admin.NO_BODY if body is None else body)
        except admin.AdminError as e:
            if e.status == 404:
                return None
            raise

    def tenant(self, t: str) -> dict[str, Any] | None:
        out: dict[str, Any] | None = self.call("GET", f"/admin/v2/tenants/{t}")
        return out

    def namespaces(self, t: str) -> list[str]:
        return list(self.call("GET", f"/admin/v2/namespaces/{t}") or [])

    def policies(self, t: str, ns: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/admin/v2/namespaces/{t}/{ns}") or {})

    def topics(self, t: str, ns: str) -> list[str]:
        return list(self.call("GET", f"/admin/v2/persistent/{t}/{ns}") or [])

    def partitioned(self, t: str, ns: str) -> list[str]:
        return list(self.call("GET", f"/admin/v2/persistent/{t}/{ns}/partitioned") or [])

    def partitions(self, t: str, ns: str, topic: str) -> int:
        meta = self.call("GET", f"/admin/v2/persistent/{t}/{ns}/{topic}/partitions") or {}
        return int(meta.get("partitions", 0))

    def topic_policy(self, t: str, ns: str, topic: str, policy: str) -> Any:
        return self.call("GET", f"/admin/v2/persistent/{t}/{ns}/{topic}/{policy}")


class Backend:
    name: str
    url: str
    cluster_name = "standalone"

    def stop(self) -> None:
        raise NotImplementedError


class StandaloneBackend(Backend):
    name = "standalone"

    def __init__(self, workdir: Path) -> None:
        http = free_port()
        self.url = f"http://{LOOPBACK}:{http}"
        exe = str(Path(sys.executable).with_name("magnetar"))
        self.proc = Proc(
            [
                exe,
                "standalone",
                f"--data-dir={workdir / 'data'}",
                f"--port={free_port()}",
                f"--http-port={http}",
                f"--bookie-port={free_port()}",
            ],
            log_path=workdir / "standalone.log",
            ready=lambda: _answers(f"{self.url}/metrics"),
            ready_timeout=60,
        ).start()

    def stop(self) -> None:
        self.proc.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
