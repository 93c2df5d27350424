"""Docs as tests (issue 29): the `sh` blocks of docs/kubernetes.md and of the README run here,
literally, on the local cluster, in the order a newcomer reads them.

Each block runs in bash (``set -eo pipefail``, from the repository root), one after another,
with what a block exports kept for the next (the quick start's ``eval "$(scripts/k8s/cluster.sh
env)"`` puts kubectl and helm on PATH for the blocks after it), so a command that fails fails
the test, naming the file, the line and the output. A block the test does not run carries an
HTML comment ``<!-- not run here: REASON -->`` on the line before it; the test lists those
with their reasons, and fails on a marker without a reason.

docs/kubernetes.md's quick start goes from `make images` and `make cluster-up` through
`helm install` of the chart with no --set (the operator up), the minimal PulsarCluster Ready,
a Tenant and a Topic applied together and Ready, 100 payments produced and consumed through
the proxy, to the clean-up and `make cluster-down` (checked to leave nothing behind). The
full form then runs the README's Kubernetes quick start (`make demo`, `helm uninstall`,
`make cluster-down`); ``MAGNETAR_E2E_REDUCED=1`` (inside `make test`) leaves the demo out.
Each block's time is printed, and the time from the cluster Ready to the Tenant and Topic
Ready (measured, not asserted).

Starts with no local cluster running (the docs' path brings one up): skips when one runs.
Run: `make test-e2e` (root, Go, Docker with `make images` built).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.localcluster import (
    ROOT,
    SCRIPT,
    STATE,
    cluster_env,
    default_disk_usage_threshold,
    leftovers,
    missing,
    volumes_problem,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

KUBERNETES_MD = ROOT / "docs/kubernetes.md"
README = ROOT / "README.md"
REDUCED = os.environ.get("MAGNETAR_E2E_REDUCED") == "1"
NOT_RUN = re.compile(r"^<!-- not run here:(.*)-->$")
FENCE = re.compile(r"^```(\S*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    text: str
    not_run: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def sh_blocks(path: Path) -> list[Block]:
    """Every ```sh block of ``path``, with the reason of a ``not run here`` marker on the
    line before it (None when unmarked; "" when marked without a reason)."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if m.group(1) != "sh":
            continue
        mark = NOT_RUN.match(lines[start - 1].strip()) if start else None
        reason = mark.group(1).strip() if mark else None
        blocks.append(Block(path, start + 1, "\n".join(body) + "\n", reason))
    return blocks


def test_every_sh_block_runs_or_says_why_not() -> None:
    """No cluster needed: each block is run by the tests below or marked with its reason;
    the list of exceptions is printed."""
    blocks = sh_blocks(KUBERNETES_MD) + sh_blocks(README)
    assert blocks, "no sh blocks found"
    unmarked_reason = [b.where for b in blocks if b.not_run == ""]
    assert not unmarked_reason, f"'not run here' without a reason: {unmarked_reason}"
    print("\nnot run here:")
    for b in blocks:
        if b.not_run is not None:
            print(f"  {b.where}: {b.not_run}")
    run = [b for b in blocks if b.not_run is None]
    print("run by e2e/test_docs.py:", ", ".join(b.where for b in run))
    # the newcomer's path is there, in this order, with nothing overriding the images
    text = "".join(b.text for b in run if b.path == KUBERNETES_MD)
    order = [
        "make images",
        "make cluster-up",
        "helm install magnetar helm/magnetar --namespace magnetar-system --create-namespace\n",
        "kubectl apply -f crds/examples/pulsarcluster-minimal.yaml",
        "kubectl apply -f crds/examples/tenant.yaml -f crds/examples/topic.yaml",
        "payments_client produce --service-url pulsar://$PROXY:6650",
        "payments_client consume --service-url pulsar://$PROXY:6650",
        "helm uninstall magnetar --namespace magnetar-system",
        "make cluster-down",
    ]
    at = [text.find(s) for s in order]
    assert all(i >= 0 for i in at) and at == sorted(at), dict(zip(order, at, strict=True))
    assert "--set" not in text and " pc " not in text
    assert any("make demo" in b.text for b in run if b.path == README)


class Shell:
    """Runs blocks in bash one after another, keeping what they export (as a terminal
    would); each block's output goes to a log and is shown when it fails."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env_file = workdir / "env.sh"
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with self.env_file.open("w") as f:
            subprocess.run(["bash", "-c", "export -p"], env=env, stdout=f, check=True)
        self.times: list[tuple[str, float]] = []
        self.n = 0

    def run(self, block: Block, *, timeout: float = 1800) -> str:
        self.n += 1
        log = self.workdir / f"block-{self.n}.log"
        script = (
            f"set -eo pipefail\nsource {self.env_file}\ncd {ROOT}\n"
            f"{block.text}"
            f"export -p > {self.env_file}\n"
        )
        t0 = time.monotonic()
        with log.open("w") as out:
            done = subprocess.run(
                ["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT,
                timeout=timeout, check=False, cwd=ROOT,
            )  # fmt: skip
        took = time.monotonic() - t0
        first = block.text.strip().splitlines()[0]
        self.times.append((f"{block.where} {first}", took))
        output = log.read_text()
        print(f"[{took:6.1f}s] {block.where}: {first}")
        if done.returncode != 0:
            pytest.fail(
                f"{block.where} failed (exit {done.returncode}):\n{block.text}\n--- output\n"
                f"{output[-6000:]}",
                pytrace=False,
            )
        return output


def _kubectl() -> list[str]:
    v = cluster_env()["KUBERNETES_VERSION"]
    return [str(ROOT / ".cache/k8s-bin" / f"kubectl-{v}" / "kubectl"), "--kubeconfig",
            str(STATE / "kubeconfig")]  # fmt: skip


def _snapshot() -> tuple[dict[str, str], list[int]]:
    """What `cluster.sh down` must undo: the saved sysctls and the pids it started."""
    saved = dict(
        line.split("=", 1) for line in (STATE / "host/sysctl.saved").read_text().splitlines()
    )
    pids = [int(p.read_text()) for p in (STATE / "pids").glob("*.pid")]
    shims = subprocess.run(
        ["pgrep", "-f", f"containerd-shim.*-address {STATE}/run/containerd.sock"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    return saved, pids + [int(p) for p in shims]


def _salvage() -> None:
    """After a failed block: what the docs' clean-up would have removed, then the cluster."""
    if not STATE.exists():
        return
    k = _kubectl()
    for args in (
        ["delete", "-f", "crds/examples/topic.yaml", "-f", "crds/examples/tenant.yaml",
         "--ignore-not-found", "--timeout=60s"],
        ["delete", "-f", "crds/examples/pulsarcluster-minimal.yaml", "--ignore-not-found",
         "--timeout=120s"],
    ):  # fmt: skip
        subprocess.run([*k, *args], cwd=ROOT, capture_output=True, timeout=180, check=False)
    subprocess.run(["bash", str(SCRIPT), "down"], timeout=600, check=False)


@pytest.fixture
def no_cluster_yet() -> Iterator[None]:
    reason = missing()
    if reason:
        pytest.skip(f"local cluster: {reason}")
    if STATE.exists():
        pytest.skip(
            "a local cluster already runs (or a failed one is left: .cache/cluster): the "
            "docs' path starts without one; run `make cluster-down` first"
        )
    problem = volumes_problem(default_disk_usage_threshold())
    if problem:
        pytest.fail(f"docs test not started: {problem}", pytrace=False)
    try:
        yield
    finally:
        _salvage()


def run_in_order(shell: Shell, blocks: list[Block]) -> dict[str, float]:
    """Run the unmarked blocks; returns when (monotonic) some milestones ended."""
    marks: dict[str, float] = {}
    for block in blocks:
        if block.not_run is not None:
            continue
        downs = "make cluster-down" in block.text
        before = _snapshot() if downs and STATE.exists() else None
        shell.run(block)
        if "kubectl wait pulsarcluster/dev" in block.text:
            marks["cluster_ready"] = time.monotonic()
        if "kubectl apply -f crds/examples/tenant.yaml" in block.text:
            marks["tenant_topic_ready"] = time.monotonic()
        if before is not None:
            bridge = cluster_env()["CLUSTER_BRIDGE"]
            assert leftovers(*before, bridge) == [], "make cluster-down left something"
    return marks


def test_kubernetes_md_quick_start_as_written(no_cluster_yet: None, tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    blocks = sh_blocks(KUBERNETES_MD)
    marks = run_in_order(shell, blocks)
    assert {"cluster_ready", "tenant_topic_ready"} <= marks.keys(), marks
    print(
        "Tenant and Topic (applied together) Ready "
        f"{marks['tenant_topic_ready'] - marks['cluster_ready']:.1f}s after the PulsarCluster "
        "was Ready"
    )
    print(f"docs/kubernetes.md: {len(shell.times)} blocks in {sum(t for _, t in shell.times):.0f}s")
    assert not STATE.exists(), "the docs end with make cluster-down"


@pytest.mark.skipif(REDUCED, reason="MAGNETAR_E2E_REDUCED=1: make demo runs in the full form")
def test_readme_kubernetes_quick_start_as_written(no_cluster_yet: None, tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    blocks = [b for b in sh_blocks(README) if b.not_run is None]
    assert blocks and "make demo" in blocks[0].text
    run_in_order(shell, blocks)
    demo_log = (tmp_path / "block-1.log").read_text()
    assert "consumed all 200 payments, each as produced" in demo_log, demo_log[-3000:]
    assert "Grafana dashboards: not available yet" in demo_log
    assert not STATE.exists(), "the README ends with make cluster-down"
