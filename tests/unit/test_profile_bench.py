"""bench/profile_bench.py's CPU split by thread and over the machine,
bench/journal_files_bench.py's file modes and bench/page_cache_bench.py's two writers (issue
24): the split on a real process of this test's own (a thread that burns CPU beside the main
thread, which waits), the machine split on fixed figures, the file benches on small files. No
timing assertions: the figures themselves go in bench/."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import journal_files_bench as jfb
import page_cache_bench as pcb
import profile_bench as pb


def _burn(stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1


def test_thread_split_puts_a_busy_thread_among_the_others_and_not_on_the_main_thread() -> None:
    pid = os.getpid()
    stop = threading.Event()
    worker = threading.Thread(target=_burn, args=(stop,), daemon=True)
    before = pb._thread_times(pid)
    worker.start()
    try:
        deadline = time.monotonic() + 5
        busy = 0.0
        while time.monotonic() < deadline and busy < 0.3:
            stop.wait(0.05)
            now = pb._thread_times(pid)
            busy = sum(u + s for tid, (u, s) in now.items() if tid != pid) - sum(
                u + s for tid, (u, s) in before.items() if tid != pid
            )
        after = pb._thread_times(pid)
    finally:
        stop.set()
        worker.join()
    assert busy >= 0.3, "the burning thread never got CPU"
    lines = pb.thread_split(pid, before, after, 1.0)
    assert lines[0].startswith("  loop thread: ")
    others = next(line for line in lines if "other threads" in line)
    user_share = int(others.split(":")[1].split("%")[0])
    assert user_share >= 30, lines
    named = [line for line in lines if line.startswith("    thread ")]
    assert named and f"thread {worker.native_id} " in named[0], lines
    assert any("other threads by name" in line for line in lines)


def test_machine_split_reports_each_field_in_cores() -> None:
    before = SimpleNamespace(user=10.0, system=5.0, softirq=1.0, irq=0.0, iowait=2.0, idle=100.0)
    after = SimpleNamespace(user=30.0, system=15.0, softirq=1.5, irq=0.0, iowait=2.0, idle=120.0)
    text = pb.machine_split(before, after, 10.0)
    assert text == (
        "  machine, in cores: user 2.00, system 1.00, softirq 0.05, irq 0.00, iowait 0.00, "
        "idle 2.00"
    )


def test_latencies_name_p50_and_p99_only() -> None:
    assert pb._latencies({"p50": 12.34, "p99": 100.0, "p999": 300.0}) == "p50 12.3 ms, p99 100.0 ms"
    assert pb._latencies({}) == "-"


def test_journal_files_bench_writes_every_mode_and_leaves_nothing(tmp_path: Path) -> None:
    for mode in jfb.MODES:
        rate, system, user = jfb.run(tmp_path, mode, 2 << 20, 256 << 10)
        assert rate > 0 and system >= 0 and user >= 0
    assert list(tmp_path.iterdir()) == []


def test_page_cache_bench_reports_each_step_of_both_writers_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    for drop in (False, True):
        steps = pcb.run(tmp_path, 3, 1 << 20, drop, step_bytes=4 << 20)
        assert len(steps) == 3
        assert all(rate > 0 and system >= 0 for rate, system in steps)
    assert list(tmp_path.iterdir()) == []
