"""bench/broker_workers_bench.py's pinned layouts (issue 24, acceptance 2): the affinity it
reads and checks, on a real tree of two Python processes started under ``taskset -c`` (a
child inherits its parent's affinity, as a broker's workers do); the ``--cores`` values it
refuses; the section it records (commit, machine ceilings, command to reproduce, the
affinity seen), written into a copy of a benchmarks page. No timing assertions: the figures
themselves go in bench/."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import broker_workers_bench as bwb

# The parent starts a child, prints both pids, and both block on their stdin: closing the
# parent's stdin ends the parent, whose exit closes the child's.
PARENT = """
import os, subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
)
print(os.getpid(), child.pid, flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset not installed")


@contextmanager
def pinned_tree(cores: str) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        ["taskset", "-c", cores, sys.executable, "-c", PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        parent, child = (int(p) for p in proc.stdout.readline().split())
        yield parent, child
    finally:
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(descendants, timeout=30)
        for p in alive:
            p.kill()


def _layout(pid: int, pinned: frozenset[int] | None) -> bwb.Layout:
    return bwb.Layout("broker, test", "", "", [pid], [("broker", pid)], pinned)


def test_a_pinned_process_and_its_child_are_read_and_checked() -> None:
    first = bwb.first_cores(1)
    with pinned_tree(str(first[0])) as (parent, child):
        seen = bwb.affinities([("broker", parent)])
        assert seen == [("broker", parent, str(first[0])), ("broker worker", child, str(first[0]))]
        bwb.check_pinned(_layout(parent, frozenset(first)), seen)
        if len(os.sched_getaffinity(0)) > 1:  # a broker on more cores than asked is refused
            with pytest.raises(RuntimeError, match="not pinned as asked"):
                bwb.check_pinned(_layout(parent, frozenset(bwb.first_cores(2))), seen)


def test_an_unpinned_process_may_run_on_every_core_this_one_may() -> None:
    seen = bwb.affinities([("bench", os.getpid())])
    assert bwb.cpu_list(seen[0][2]) == frozenset(os.sched_getaffinity(0))
    with pytest.raises(RuntimeError, match="no broker"):  # a pinned layout without its broker
        bwb.check_pinned(_layout(os.getpid(), frozenset({0})), [])


def test_cpu_lists_and_core_counts() -> None:
    assert bwb.cpu_list("0-2,5") == frozenset({0, 1, 2, 5})
    assert bwb.cpu_list("3") == frozenset({3})
    assert bwb.parse_cores("1") == [1]
    assert bwb.parse_cores("") == []
    available = len(os.sched_getaffinity(0))
    for bad in ("0", "x", str(available + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match="a core count from 1"):
            bwb.parse_cores(bad)


def test_the_recorded_section_names_commit_ceilings_command_and_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n<!-- bench-peers section broker-workers begin -->\nstale figures\n"
        "<!-- bench-peers section broker-workers end -->\n\n## How it is measured\n"
    )
    monkeypatch.setattr(bwb, "DOC", doc)
    args = argparse.Namespace(
        topics=8, messages=1000, size=1024, workers=2, cores=[1], rounds=1, ceiling_seconds=2.0
    )
    pinned = "broker, 1 core (taskset -c 0, --workers 1)"
    results = {
        "broker x1": [bwb.Round(100.0, 10.0, {}, [("broker", 10, "0-1")])],
        pinned: [bwb.Round(80.0, 12.0, {}, [("broker", 11, "0"), ("bookie", 12, "0-1")])],
    }
    ceiling = {
        "fsync": {"ops": 1234.0, "mbs": 5.0, "p50_ms": 0.5, "p99_ms": 1.5},
        "loopback": {"mbs": 4321.0},
    }
    rows = ["| layout | ... |", "|---|---|", f"| {pinned} | 80 |"]
    bwb.record(rows, results, ceiling, args)
    text = doc.read_text()
    assert "stale figures" not in text and text.endswith("## How it is measured\n")
    head = subprocess.run(
        ["git", "-C", str(bwb.ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"at commit {head}" in text
    assert "fsync 1,234 write+fdatasync/s" in text and "loopback TCP 4,321 MB/s" in text
    assert (
        "`.venv/bin/python bench/broker_workers_bench.py --topics 8 --messages 1000 --size 1024 "
        "--workers 2 --cores '1' --rounds 1 --ceiling-seconds 2 --record`" in text
    )
    assert f"  * {pinned}: broker 0; bookie 0-1\n" in text
    assert "broker on 1 cores" not in text and "broker on 1 core" in text
    assert f"| {pinned} | 80 |" in text
