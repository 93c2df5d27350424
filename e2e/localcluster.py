"""The local cluster for the e2e suites (`scripts/k8s/cluster.sh`): what this machine lacks
to run it, bringing it up (or using a running one), kubectl against it, tearing it down and
checking nothing is left.

Why a module: the smoke test (test_local_cluster.py) and the PulsarCluster suite
(test_pulsarcluster.py) run against the same cluster the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from magnetar import __version__
from magnetar.bookie.storage.config import BookieStorageConfig
from magnetar.bookie.storage.disk import used_fraction

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/k8s/cluster.sh"
STATE = ROOT / ".cache/cluster"


def cluster_env() -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f"source {ROOT}/scripts/k8s/versions.env; source "
         f"{ROOT}/scripts/k8s/cluster.env; set | grep -E '^(CLUSTER|KUBERNETES|HELM|ETCD)_'"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def missing() -> str | None:
    """What this machine lacks to run a local cluster, or None."""
    if os.geteuid() != 0:
        return "needs root (bridge, iptables, containerd)"
    if not (shutil.which("go") or Path("/usr/local/go/bin/go").exists()):
        kubelet = ROOT / ".cache/k8s-bin" / f"kubelet-{cluster_env()['KUBERNETES_VERSION']}"
        if not kubelet.exists():
            return "Go is missing and the cluster's binaries are not built (.cache/k8s-bin)"
    if shutil.which("docker") is None:
        return "no docker client: run `make images` (it installs Debian's docker.io)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return "no Docker daemon answers: run `make images` (it starts dockerd)"
    ref = f"magnetar/broker:{__version__}"
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode:
        return f"image {ref} is not built: run `make images`"
    return None


DISK_ROOM_NEEDED = 2 * 1024**3
"""Bytes a suite needs below the bookies' read-only threshold: the bookies' journals and
entry logs, MinIO's objects, images imported into the cluster's containerd and the pods'
logs all land on the host's disk (the volumes are directories under .cache/cluster)."""


def default_disk_usage_threshold() -> float:
    """The bookies' ``diskUsageThreshold`` when the PulsarCluster does not set it."""
    field = next(
        f for f in dataclasses.fields(BookieStorageConfig) if f.name == "disk_usage_threshold"
    )
    value = field.default
    assert isinstance(value, float), value
    return value


def disk_problem(path: Path, *, threshold: float, needed: int = DISK_ROOM_NEEDED) -> str | None:
    """Why the bookies whose volumes are on the filesystem holding ``path`` would turn
    read-only during the suite, or None.

    A bookie stops taking writes once its disk's used fraction (``1 - f_bavail/f_blocks``,
    magnetar.bookie.storage.disk, as the bookie measures it) passes ``threshold``; when that
    filesystem is already near the threshold the tests fail half-way with
    ``NotEnoughBookiesError``."""
    st = os.statvfs(path)
    usage = used_fraction(path)
    room = int((st.f_bavail - (1.0 - threshold) * st.f_blocks) * st.f_frsize)
    if room >= needed:
        return None
    return (
        f"the disk holding {path} is {usage:.1%} used (1 - f_bavail/f_blocks, as bookies "
        f"measure it); bookies turn read-only above diskUsageThreshold {threshold:.0%}, and "
        f"{max(room, 0) / 1024**3:.1f} GiB are left before that, less than the "
        f"{needed / 1024**3:.0f} GiB the suite needs: free some space first"
    )


def host_room_problem(path: Path, needed: int = DISK_ROOM_NEEDED) -> str | None:
    """Why the host's filesystem holding ``path`` cannot take what the suite writes, or None."""
    st = os.statvfs(path)
    room = st.f_bavail * st.f_frsize
    if room >= needed:
        return None
    return (
        f"the disk holding {path} has {room / 1024**3:.1f} GiB available, less than the "
        f"{needed / 1024**3:.0f} GiB the suite writes there: free some space first"
    )


def volumes_problem(threshold: float) -> str | None:
    """Why the cluster's bookies would run out of room during a suite, checked before
    anything is installed so the suite fails at once and says why, or None.

    The claims' volumes live on the cluster's own loop-mounted filesystem (scripts/k8s/
    cluster.env, CLUSTER_VOLUMES_SIZE), which the bookies measure; its image, the images
    imported into containerd and the pods' logs take the host's space as they are written.
    With CLUSTER_VOLUMES_SIZE=0 the volumes are directories on the host's filesystem, and
    the bookies measure that one."""
    host = next(d for d in (STATE.parent, ROOT) if d.exists())
    volumes = STATE / "volumes"
    if os.path.ismount(volumes):  # a running cluster's own filesystem
        return disk_problem(volumes, threshold=threshold) or host_room_problem(host)
    if cluster_env().get("CLUSTER_VOLUMES_SIZE", "0") != "0":  # cluster.sh makes a fresh one
        return host_room_problem(host)
    return disk_problem(host, threshold=threshold)


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl: Path
    gateway: str
    started_here: bool
    up_seconds: float | None

    def k(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        out = subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout


@dataclass(frozen=True)
class Site:
    """The PulsarCluster suite's installed cluster, as a check module of its own
    (e2e/functions_k8s.py, e2e/georep_k8s.py) uses it."""

    c: Cluster
    namespace: str
    cluster_name: str
    service_url: str
    admin: Callable[..., str]
    """``magnetar admin --admin-url <the proxy> ARGS``, its output (asserts it succeeded)."""
    publisher: Callable[[Any, str, str], Any]
    """``(client, topic, prefix)`` -> a publisher thread (e2e/test_pulsarcluster.py)."""
    timings: dict[str, float]


def pod_ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def running(kubectl: Path, kubeconfig: Path) -> bool:
    if not kubeconfig.exists():
        return False
    ok = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz"],
        capture_output=True, timeout=20, check=False,
    )  # fmt: skip
    return ok.returncode == 0


@contextlib.contextmanager
def local_cluster(
    *, cleanup_namespaces: Sequence[str], disk_threshold: float | None = None
) -> Iterator[Cluster]:
    """A running cluster: the one already up (its namespaces ``cleanup_namespaces`` deleted
    at the end, the cluster left running) or one brought up here (torn down at the end
    unless a test did it). Skips naming what the machine lacks; fails at once when the
    host disk is too close to the bookies' ``diskUsageThreshold`` (``disk_threshold``, the
    bookies' default when None) for the suite's bookies to stay writable."""
    reason = missing()
    if reason:
        pytest.skip(f"local cluster: {reason}")
    threshold = default_disk_usage_threshold() if disk_threshold is None else disk_threshold
    problem = volumes_problem(threshold)
    if problem:
        pytest.fail(f"e2e not started: {problem}", pytrace=False)
    env = cluster_env()
    v = env["KUBERNETES_VERSION"]
    kubectl = ROOT / ".cache/k8s-bin" / f"kubectl-{v}" / "kubectl"
    kubeconfig = STATE / "kubeconfig"
    started = not (kubectl.exists() and running(kubectl, kubeconfig))
    up_seconds = None
    if started:
        t0 = time.monotonic()
        try:
            subprocess.run(["bash", str(SCRIPT), "up"], check=True, timeout=1800)
        except subprocess.SubprocessError:
            subprocess.run(["bash", str(SCRIPT), "down"], timeout=600, check=False)
            raise
        up_seconds = time.monotonic() - t0
        print(f"cluster-up took {up_seconds:.1f}s")
    c = Cluster(kubeconfig, kubectl, env["CLUSTER_GATEWAY"], started, up_seconds)
    try:
        yield c
    finally:
        if started and STATE.exists():  # the tests failed before their own teardown
            subprocess.run(["bash", str(SCRIPT), "down"], timeout=600, check=False)
        elif not started:
            subprocess.run(
                [str(kubectl), "--kubeconfig", str(kubeconfig), "delete", "namespace",
                 *cleanup_namespaces, "--ignore-not-found", "--timeout=90s"],
                capture_output=True, timeout=120, check=False,
            )  # fmt: skip


def down_and_check(c: Cluster) -> None:
    """`cluster.sh down`, then assert nothing it started or changed is left."""
    saved = dict(
        line.split("=", 1) for line in (STATE / "host/sysctl.saved").read_text().splitlines()
    )
    pids = [int(p.read_text()) for p in (STATE / "pids").glob("*.pid")]
    shims = subprocess.run(
        ["pgrep", "-f", f"containerd-shim.*-address {STATE}/run/containerd.sock"],
        capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    t0 = time.monotonic()
    subprocess.run(["bash", str(SCRIPT), "down"], check=True, timeout=600)
    print(f"cluster-down took {time.monotonic() - t0:.1f}s")
    assert leftovers(saved, pids + [int(p) for p in shims], cluster_env()["CLUSTER_BRIDGE"]) == []


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (http URLs built here)
            return bool(resp.status == 200)
    except OSError:
        return False


def leftovers(saved_sysctls: dict[str, str], pids: list[int], bridge: str) -> list[str]:
    found = [f"process {pid} still runs" for pid in pids if Path(f"/proc/{pid}").exists()]
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0:
        found.append(f"bridge {bridge} still exists")
    netns = Path("/run/netns")
    if netns.exists():
        found += [f"netns {n.name}" for n in netns.iterdir() if n.name.startswith("cni-")]
    for table in ("filter", "nat", "mangle"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True)
        found += [
            f"iptables {table} {line.split()[0]}"
            for line in out.stdout.splitlines()
            if line.startswith((":KUBE-", ":CNI-"))
        ]
    for key, value in saved_sysctls.items():
        now = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True).stdout.strip()
        if now != value:
            found.append(f"sysctl {key}={now}, was {value}")
    if STATE.exists():
        found.append(f"{STATE} still exists")
    loops = subprocess.run(
        ["losetup", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True, check=False
    ).stdout
    found += [f"loop device {line}" for line in loops.splitlines() if str(STATE) in line]
    return found
