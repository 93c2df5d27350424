"""bench/footprint_bench.py sums a server's memory, threads and CPU over its whole process
tree (issue 24, acceptance 4): checked on a real tree of three Python processes started
here (a root, its child, the child's child holding 64 MiB and two extra threads), and on a
root that has already waited for a CPU-bound child. The summary table's medians and ratio
on fixed figures. No timing assertions: the figures themselves go in bench/."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import footprint_bench as fb

MIB = 1024 * 1024

# Each level blocks on its stdin, a pipe from its parent: when the test closes the root's
# stdin, the root exits, its child sees end-of-file, and so on down the tree.
GRANDCHILD = f"""
import os, sys, threading
held = b"x" * (64 * {MIB})
for _ in range(2):
    threading.Thread(target=threading.Event().wait, daemon=True).start()
print(os.getpid(), flush=True)
sys.stdin.read()
"""

CHILD = """
import os, subprocess, sys
grandchild = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)
print(os.getpid(), grandchild.stdout.readline().decode().strip(), flush=True)
sys.stdin.read()
"""

ROOT = """
import os, subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1], sys.argv[2]],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
)
print(os.getpid(), child.stdout.readline().decode().strip(), flush=True)
sys.stdin.read()
"""

BURNER = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-c", "sum(i * i for i in range(5_000_000))"], check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_utime + usage.ru_stime, flush=True)
sys.stdin.read()
"""


@contextmanager
def tree(*argv: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline().decode().strip()
    finally:
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(descendants, timeout=30)
        for p in alive:
            p.kill()


def test_tree_stats_sums_every_descendant() -> None:
    with tree(ROOT, CHILD, GRANDCHILD) as (proc, line):
        pids = [int(p) for p in line.split()]
        assert len(pids) == 3 and pids[0] == proc.pid
        members = [psutil.Process(p) for p in pids]
        stats = fb.tree_stats(proc.pid)
        assert stats.processes == 3
        assert stats.threads == sum(m.num_threads() for m in members)
        assert members[2].num_threads() >= 3  # the grandchild's two threads are counted
        each = [m.memory_info().rss for m in members]
        # the sleeping processes' RSS does not move between the two reads (1 MiB leeway)
        assert abs(stats.rss - sum(each)) < MIB
        # the grandchild's 64 MiB, two levels down, are in the sum
        assert stats.rss - each[0] - each[1] >= 64 * MIB


def test_tree_cpu_counts_children_already_waited_for() -> None:
    with tree(BURNER) as (proc, line):
        reaped = float(line)
        assert reaped > 0.05  # the child did burn CPU, so the check below can fail
        times = psutil.Process(proc.pid).cpu_times()
        own = times.user + times.system
        # the waited-for child's time is in its parent's; /proc rounds to clock ticks
        assert fb.tree_cpu(proc.pid) - own >= reaped - 0.03


def _round(ready: float, rss_mib: int, threads: int) -> fb.Round:
    stats = fb.TreeStats(rss=rss_mib * MIB, processes=1, threads=threads)
    return fb.Round(
        ready_s=ready,
        first_round_trip_s=ready + 0.1,
        cpu_to_ready_s=ready / 2,
        idle=stats,
        loaded=stats,
        peak_rss=rss_mib * MIB,
        load_s=1.0,
    )


def test_summary_medians_and_ratio() -> None:
    results = {
        "A": [_round(1.0, 100, 10), _round(3.0, 120, 12), _round(2.0, 90, 11)],
        "B": [_round(10.0, 800, 150), _round(8.0, 820, 160), _round(9.0, 810, 155)],
    }
    rows = fb.summary(results)
    assert rows[0] == "| | A (median) | B (median) | B / A |"
    by_label = {r.split(" | ")[0].removeprefix("| "): r for r in rows[2:]}
    assert by_label["start-up until ready, s"].endswith("| 2.00 | 9.00 | 4.5x |")
    assert by_label["RSS idle, MiB"].endswith("| 100 | 810 | 8.1x |")
    assert by_label["processes (idle / after the load)"].endswith("| 1 / 1 | 1 / 1 | 1.0x |")
    each = fb.per_round(results)
    assert "| A: RSS idle, MiB | 100 | 120 | 90 | 100 |" in each
