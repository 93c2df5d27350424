"""Where a Magnetar standalone's time goes under one of the side-by-side workloads (issue 24).

    .venv/bin/python bench/profile_bench.py [--workload w2] [--seconds 15] [--gil] [--top 30]

Starts ``magnetar standalone`` on free loopback ports, warms it up, drives it with the load
role of bench/peers/loadgen.py that the chosen row of ``make bench-peers`` uses, and samples
the server with py-spy (a dev dependency, installed by ``make setup``) while the load runs:

* ``w1``: 1 KiB messages, batching 1 ms, one publisher at its maximum rate (W1 publish);
* ``w2``: 100 B messages, batching off, 1,000 outstanding (W2's maximum rate);
* ``w3``: the fan-out at ``--w3-rate`` msg/s: a paced producer (1 KiB, batching 1 ms), 4
  exclusive subscriptions and a shared one with 4 consumers, each reading end to end (W3's
  sustained rate, its end-to-end p99 and its CPU per message);
* ``w4``: a backlog of ``--backlog-mb`` drained from the earliest position while a paced
  producer publishes 5,000 msg/s (W4's drain and its publish latency);
* ``w1p``: pulsar-perf's Java producer at its maximum rate and its consumer, together
  (bench/peers/perf.py, as the w1p row); sampling starts once both JVMs are sending.

It prints the load's rate, the server's CPU (the loop thread and the others, user and
system), and the functions by share of the samples: self (the function itself was running)
and inclusive (it was on the stack). With ``--gil`` only samples of the thread holding the
GIL count, which on a CPU-bound event loop is the work that bounds the rate. ``--raw FILE``
keeps py-spy's collapsed stacks. ``--system pulsar`` drives Apache Pulsar's standalone (as
bench/peers/systems.py starts it) with the same load instead and prints only its CPU by
thread, grouped by thread name (py-spy does not sample a JVM). Figures only: nothing here
passes or fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).with_name("peers")))

import perf
import systems
import workloads
from loadgen import percentile

ROOT = Path(__file__).resolve().parents[1]
LOADGEN = ROOT / "bench" / "peers" / "loadgen.py"
PY_SPY = Path(sys.executable).with_name("py-spy")
_FRAME = re.compile(r"(?P<fn>.*) \((?P<file>[^()]*):\d+\)$")


def short(frame: str) -> str:
    """``fn (path/to/module.py:12)`` as ``fn (package/module.py)``: one name per function."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m["file"]
    for cut in ("site-packages/", "/src/", "/lib/python3"):
        if cut in path:
            path = path.split(cut, 1)[1]
            break
    return f"{m['fn']} ({path})"


def shares(collapsed: str) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(samples, self counts, inclusive counts) by function from py-spy's collapsed stacks
    (``frame;frame;... count`` per line; the process and thread frames are not functions)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [short(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return total, own, incl


def _load(args: argparse.Namespace, url: str, tag: str) -> list[dict[str, object]]:
    topic = f"persistent://public/default/profile-{tag}"
    if args.workload == "w1":
        return [
            {"role": "publish", "url": url, "topic": topic, "size": 1024, "batching": True,
             "batch_delay_ms": 1, "seconds": args.seconds + 8}
        ]  # fmt: skip
    if args.workload == "w2":
        return [
            {"role": "publish", "url": url, "topic": topic, "size": 100, "batching": False,
             "outstanding": 1000, "seconds": args.seconds + 8}
        ]  # fmt: skip
    if args.workload == "w3":
        start_at = time.time() + 2
        produce = args.seconds + 8
        expected = int(args.w3_rate * produce)
        deadline = start_at + produce + 10
        subs: list[dict[str, object]] = [
            {"role": "e2e_consume", "url": url, "topic": topic, "subscription": f"ex{i}",
             "sub_type": "exclusive", "consumers": 1, "messages": expected, "deadline": deadline}
            for i in range(workloads.W3_EXCLUSIVE)
        ]  # fmt: skip
        subs.append(
            {"role": "e2e_consume", "url": url, "topic": topic, "subscription": "shared",
             "sub_type": "shared", "consumers": workloads.W3_SHARED_CONSUMERS,
             "messages": expected, "deadline": deadline}
        )  # fmt: skip
        return [
            {"role": "paced_publish", "url": url, "topic": topic, "size": workloads.W3_SIZE,
             "batching": True, "batch_delay_ms": 1, "rate": args.w3_rate,
             "seconds": produce, "start_at": start_at},
            *subs,
        ]  # fmt: skip
    return [  # w4: the drain of a backlog built first (_backlog), with a paced producer
        {"role": "consume", "url": url, "topic": topic, "subscription": "catchup",
         "messages": args.backlog_mb * 1024, "timeout": 600},
        {"role": "paced_publish", "url": url, "topic": topic, "size": 1024, "batching": True,
         "batch_delay_ms": 1, "rate": 5000, "seconds": args.seconds + 8, "measure": True},
    ]  # fmt: skip


def _thread_times(pid: int) -> dict[int, tuple[float, float]]:
    """User and system CPU seconds so far of each thread of ``pid``, by thread id."""
    return {t.id: (t.user_time, t.system_time) for t in psutil.Process(pid).threads()}


def machine_split(before: object, after: object, seconds: float) -> str:
    """The whole machine's CPU between two ``psutil.cpu_times()``, in cores: the server, the
    load generators and the kernel's own threads (writeback, interrupts) together."""
    parts = []
    for field in ("user", "system", "softirq", "irq", "iowait", "idle"):
        spent = getattr(after, field, 0.0) - getattr(before, field, 0.0)
        parts.append(f"{field} {spent / seconds:.2f}")
    return "  machine, in cores: " + ", ".join(parts)


def _kernel_threads_cpu() -> float:
    """CPU seconds so far of the kernel's worker threads (kworker, writeback, jbd2: no
    process is charged for them)."""
    total = 0.0
    for proc in psutil.process_iter(["name", "cpu_times", "ppid"]):
        if proc.info["ppid"] == 2 and proc.info["cpu_times"] is not None:
            total += proc.info["cpu_times"].system + proc.info["cpu_times"].user
    return total


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def thread_split(
    pid: int, before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]],
    seconds: float,
) -> list[str]:  # fmt: skip
    """Lines saying where the server's CPU went between two ``_thread_times``: the main
    thread (Magnetar's loop), the others, the busiest of them and every thread name, each as
    user + system share of a core."""
    spent: dict[int, tuple[float, float]] = {}
    for tid, (user, system) in after.items():
        u0, s0 = before.get(tid, (0.0, 0.0))
        spent[tid] = (user - u0, system - s0)
    main_user, main_system = spent.pop(pid, (0.0, 0.0))
    lines = [
        f"  loop thread: {main_user / seconds:.0%} user + {main_system / seconds:.0%} system "
        "of a core",
        f"  {len(spent)} other threads: {sum(u for u, _ in spent.values()) / seconds:.0%} user + "
        f"{sum(s for _, s in spent.values()) / seconds:.0%} system of a core",
    ]
    names = {tid: _thread_name(pid, tid) for tid in spent}
    lines.extend(
        f"    thread {tid} ({names[tid]}): {sum(spent[tid]) / seconds:.0%} of a core"
        for tid in sorted(spent, key=lambda t: -sum(spent[t]))[:4]
    )
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for tid, (user, system) in spent.items():
        group = groups[re.sub(r"[-_]?\d+$", "", names[tid])]
        group[0] += user
        group[1] += system
        group[2] += 1
    lines.append("  other threads by name (digits at the end dropped):")
    for name, (user, system, count) in sorted(groups.items(), key=lambda g: -(g[1][0] + g[1][1]))[
        :8
    ]:
        lines.append(
            f"    {name} (x{count:.0f}): {user / seconds:.0%} user + {system / seconds:.0%} system"
        )
    return lines


class _CpuSnapshot:
    """The server's CPU (all its processes, and by thread of its main one), the machine's and
    the kernel threads', at one moment."""

    def __init__(self, server: systems.System, pid: int) -> None:
        self.pid = pid
        self.server = server.cpu_seconds()
        self.threads = _thread_times(pid)
        self.machine = psutil.cpu_times()
        self.kernel = _kernel_threads_cpu()

    def report(self, later: _CpuSnapshot, seconds: float) -> list[str]:
        return [
            f"server CPU while measured: {(later.server - self.server) / seconds:.0%} of a core",
            *thread_split(self.pid, self.threads, later.threads, seconds),
            machine_split(self.machine, later.machine, seconds),
            f"  kernel threads: {(later.kernel - self.kernel) / seconds:.0%} of a core",
        ]


def _wait_for_perf_producer(log: Path, timeout: float = 180.0) -> None:
    """Until pulsar-perf's producer has reported a rate (its JVM started and sent), plus a
    few seconds of steady state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and "Throughput produced" in log.read_text(errors="replace"):
            time.sleep(3)
            return
        time.sleep(0.5)
    raise RuntimeError(f"pulsar-perf's producer did not report within {timeout:.0f} s: {log}")


def _run_role(cfg: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(LOADGEN), json.dumps(cfg)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=systems.die_with_parent,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode})")
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


class _MagnetarWith(systems.MagnetarStandalone):
    """``magnetar standalone`` with more command-line arguments (``--server-arg``)."""

    def __init__(self, workdir: Path, extra: list[str], env: list[str]) -> None:
        super().__init__(workdir)
        self.extra = extra
        self.env = dict(kv.split("=", 1) for kv in env)

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, env, cwd = super().argv()
        return [*argv, *self.extra], {**env, **self.env}, cwd


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _latencies(ms: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:,.1f} ms" for k, v in ms.items() if k in ("p50", "p99")) or "-"


def _report_load(
    args: argparse.Namespace,
    roles: list[subprocess.Popen[str]],
    pair: threading.Thread | None,
    perf_run: list[perf.PerfRun],
) -> None:
    """Wait for the load to end and print what it achieved."""
    if pair is not None:
        pair.join()
        run = perf_run[0]
        print(
            f"workload w1p: {run.send_rate:,.0f} msg/s published, {run.receive_rate:,.0f} "
            f"consumed ({run.sent:,} sent, {run.received:,} received); publish latency "
            f"{_latencies(run.publish_latency_ms)}, end to end {_latencies(run.e2e_latency_ms)}"
        )
        return
    results = [_result(p) for p in roles]
    if args.workload == "w3":
        hist: collections.Counter[int] = collections.Counter()
        for r in results[1:]:
            counts = r["hist"]
            assert isinstance(counts, dict)
            hist.update({int(k): int(v) for k, v in counts.items()})
        received = [int(str(r["messages"])) for r in results[1:]]
        print(
            f"workload w3: {float(str(results[0]['rate'])):,.0f} msg/s published; "
            f"received per subscription {received}; end-to-end p50 "
            f"{_ms(percentile(dict(hist), 0.5))}, p99 {_ms(percentile(dict(hist), 0.99))}"
        )
    first = results[0]
    rate = float(str(first["messages"])) / float(str(first["seconds"]))
    print(f"workload {args.workload}: {rate:,.0f} msg/s ({first['messages']:,} messages)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("w1", "w2", "w3", "w4", "w1p"), default="w2")
    ap.add_argument("--seconds", type=float, default=15.0, help="sampling time")
    ap.add_argument("--rate", type=int, default=250, help="samples per second")
    ap.add_argument("--gil", action="store_true", help="only the thread holding the GIL")
    ap.add_argument(
        "--native",
        action="store_true",
        help="unwind native frames too (the compiled modules' functions; pauses the server "
        "for each sample)",
    )
    ap.add_argument("--backlog-mb", type=int, default=512, help="w4's backlog")
    ap.add_argument("--w3-rate", type=int, default=32000, help="w3's publish rate, msg/s")
    ap.add_argument(
        "--warm-seconds",
        type=float,
        default=5.0,
        help="publish this long (1 KiB, batching 1 ms) before the load (a JVM's JIT warms up)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="one more argument for `magnetar standalone` (repeat it: --server-arg=--flag "
        "--server-arg=value)",
    )
    ap.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one more environment variable for `magnetar standalone` (repeat it)",
    )
    ap.add_argument("--system", choices=("magnetar", "pulsar"), default="magnetar")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = ap.parse_args()
    if args.system == "magnetar" and not PY_SPY.exists():
        print(f"{PY_SPY} not found: run `make setup` (py-spy is a dev dependency)")
        return 2
    with tempfile.TemporaryDirectory(prefix="profile-bench-") as tmp:
        server: systems.System = (
            _MagnetarWith(Path(tmp), args.server_arg, args.server_env)
            if args.system == "magnetar"
            else systems.PulsarStandalone(Path(tmp))
        )
        server.install()
        url = server.start()
        try:
            return profile(server, url, args, Path(tmp))
        finally:
            server.stop()


def profile(server: systems.System, url: str, args: argparse.Namespace, tmp: Path) -> int:
    warm = _run_role(
        {"role": "publish", "url": url, "topic": "persistent://public/default/profile-warm",
         "size": 1024, "batching": True, "batch_delay_ms": 1, "seconds": args.warm_seconds}
    )  # fmt: skip
    _result(warm)
    tag = str(int(time.time()))
    if args.workload in ("w3", "w4"):
        subscriptions = (
            [f"ex{i}" for i in range(workloads.W3_EXCLUSIVE)] + ["shared"]
            if args.workload == "w3"
            else ["catchup"]
        )
        subscribe = _run_role(
            {"role": "subscribe", "url": url, "topic": f"persistent://public/default/profile-{tag}",
             "subscriptions": subscriptions, "shared": ["shared"]}
        )  # fmt: skip
        _result(subscribe)
    if args.workload == "w4":
        build = _run_role(
            {"role": "publish", "url": url, "topic": f"persistent://public/default/profile-{tag}",
             "size": 1024, "batching": True, "batch_delay_ms": 1,
             "messages": args.backlog_mb * 1024}
        )  # fmt: skip
        _result(build)
    perf_run: list[perf.PerfRun] = []
    if args.workload == "w1p":
        topic = f"persistent://public/default/profile-{tag}"
        pair = threading.Thread(
            target=lambda: perf_run.append(
                perf.run_pair(url, topic, seconds=args.seconds + 20, workdir=tmp / "perf")
            )
        )
        pair.start()
        _wait_for_perf_producer(tmp / "perf" / "perf-produce.log")
        roles = []
    else:
        roles = [_run_role(cfg) for cfg in _load(args, url, tag)]
        time.sleep(3)  # past the producers' start
    raw = args.raw or tmp / "stacks.txt"
    pid = server.pid()
    assert pid is not None
    before = _CpuSnapshot(server, pid)
    if args.system == "pulsar":
        time.sleep(args.seconds)
        after = _CpuSnapshot(server, pid)
        _report_load(args, roles, pair if args.workload == "w1p" else None, perf_run)
        print("\n".join(before.report(after, args.seconds)))
        return 0
    spy = [str(PY_SPY), "record", "-p", str(pid), "-d", str(int(args.seconds)), "-r",
           str(args.rate), "-f", "raw", "-o", str(raw)]  # fmt: skip
    spy.append("--native" if args.native else "--nonblocking")
    if args.gil:
        spy.append("--gil")
    subprocess.run(spy, check=True, capture_output=True)
    after = _CpuSnapshot(server, pid)
    total, own, incl = shares(raw.read_text())
    _report_load(args, roles, pair if args.workload == "w1p" else None, perf_run)
    print("\n".join(before.report(after, args.seconds)))
    print(f"{total:,} samples{' (GIL holder only)' if args.gil else ''}")
    print("\nself (the function running):")
    for fn, n in own.most_common(args.top):
        print(f"  {n / total:6.1%}  {fn}")
    print("\ninclusive (on the stack):")
    for fn, n in incl.most_common(args.top):
        print(f"  {n / total:6.1%}  {fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
