"""Broker worker processes and cores (issue 24): the same produce + consume load on a
standalone, on a broker of one process, on a broker of ``--workers N`` processes and on a
broker pinned to 1, 2, ... cores with as many workers.

    .venv/bin/python bench/broker_workers_bench.py [--topics 8] [--messages 20000] [--size 1024]
        [--workers 2] [--cores 1,2] [--rounds 2] [--ceiling-seconds 5]

Layouts, each started fresh on loopback and measured ``--rounds`` times in turn:

* ``standalone``: ``magnetar standalone`` (broker, bookie and metadata in one process);
* ``broker x1``: etcd + one bookie + ``magnetar broker`` (E = Wq = Aq = 1);
* ``broker xN``: the same with ``magnetar broker --workers N``;
* ``broker, K cores`` for each K of ``--cores``: the same with ``magnetar broker --workers K``
  run under ``taskset -c`` of the first K cores this process may use, so the broker and its
  worker processes (which inherit the affinity) run on K cores only: what a pod with a CPU
  limit of K buys (the operator's ``workers: auto`` runs one worker per core of the limit).
  The bookie, etcd and this process (the load generator) are not pinned: on a machine with
  few cores they share the broker's, and a K-core figure is a lower bound of what K
  dedicated cores give. Each round reads ``Cpus_allowed_list`` (/proc/PID/status) of every
  process of the layout while the load runs, prints it, and stops the run if a pinned
  broker or worker may run elsewhere.

Load: ``--topics`` topics in ``public/default`` (4 bundles), a producer (batching 1 ms) and an
Exclusive consumer on each, all in this process through the official client; every producer
sends ``--messages`` messages of ``--size`` bytes at its maximum rate while the consumers
receive and acknowledge. The figures: messages per second from the first send to the last
receive, and the server side's CPU time per message (user + system, read from /proc through
psutil, of every process of the layout: brokers, bookie, etcd), so a faster layout is seen to
be faster by parallelism and not by burning more. Which worker owns each topic is printed
(``--workers`` spreads bundles over its processes through lookups). Before the layouts, the
machine's ceilings are measured (bench/peers/ceilings.py: 4 KiB write + fdatasync on the
disk the layouts write to, loopback TCP). The machine is shared: the figures are indicative,
the comparison between layouts is the point. Figures only, never pass/fail. ``--record``
writes the table as a section of docs/benchmarks.md (replaced by the next recorded run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).with_name("peers")))

import ceilings
import report
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.procs import started
from tests.support.standalone import BrokerProc, StandaloneProc

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "broker-workers"


@dataclass
class Layout:
    name: str
    service_url: str
    http_url: str
    pids: list[int]
    roles: list[tuple[str, int]]
    """The layout's top processes by role (the broker's workers are found under it)."""
    pinned: frozenset[int] | None = None
    """The cores the broker and its workers are pinned to (None: not pinned)."""


def cpu_list(text: str) -> frozenset[int]:
    """The cores of a kernel CPU list (``0-2,5``, as in ``Cpus_allowed_list``)."""
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cores)


def cpus_allowed(pid: int) -> str:
    """``Cpus_allowed_list`` of ``pid`` (/proc/PID/status): the cores it may run on."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"no Cpus_allowed_list in /proc/{pid}/status")


def affinities(roles: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """(role, pid, Cpus_allowed_list) of each process and of every process under it (a
    broker's workers: ``<role> worker``)."""
    found: list[tuple[str, int, str]] = []
    for role, pid in roles:
        with contextlib.suppress(psutil.NoSuchProcess, FileNotFoundError):
            found.append((role, pid, cpus_allowed(pid)))
            for child in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, FileNotFoundError):
                    found.append((f"{role} worker", child.pid, cpus_allowed(child.pid)))
    return found


def check_pinned(layout: Layout, seen: list[tuple[str, int, str]]) -> None:
    """RuntimeError unless every broker process of a pinned layout may run on its cores
    only."""
    if layout.pinned is None:
        return
    broker = [(role, pid, cpus) for role, pid, cpus in seen if role.startswith("broker")]
    wrong = [f"{r} {pid}: {cpus}" for r, pid, cpus in broker if cpu_list(cpus) != layout.pinned]
    if not broker or wrong:
        raise RuntimeError(f"{layout.name}: not pinned as asked: {wrong or 'no broker'}")


def first_cores(count: int) -> list[int]:
    """The first ``count`` cores this process may run on."""
    return sorted(os.sched_getaffinity(0))[:count]


def parse_cores(text: str) -> list[int]:
    """``--cores``: core counts, comma-separated (empty: no pinned layout)."""
    available = len(os.sched_getaffinity(0))
    counts = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not part.isdigit() or not 1 <= int(part) <= available:
            raise argparse.ArgumentTypeError(
                f"{part!r}: a core count from 1 to {available} (the cores this process may use)"
            )
        counts.append(int(part))
    return counts


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            total += sum(proc.cpu_times()[:2])
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += sum(child.cpu_times()[:2])
    return total


@contextlib.contextmanager
def standalone(work: Path) -> Iterator[Layout]:
    with started(StandaloneProc(work / "standalone" / "data")) as proc:
        assert proc.pid is not None
        yield Layout(
            "standalone", proc.service_url, proc.http_url, [proc.pid], [("standalone", proc.pid)]
        )


@contextlib.contextmanager
def cluster(work: Path, workers: int, cores: list[int] | None = None) -> Iterator[Layout]:
    """etcd, a bookie and ``magnetar broker --workers N``; with ``cores``, the broker run under
    ``taskset -c`` of those cores (its workers inherit the affinity)."""
    cpus = ",".join(map(str, cores or []))
    if cores:
        s = "s" if len(cores) > 1 else ""
        name = f"broker, {len(cores)} core{s} (taskset -c {cpus}, --workers {workers})"
        base = work / f"cluster-{workers}-cores-{len(cores)}"
    else:
        name = "broker x1" if workers == 1 else f"broker x{workers} (--workers {workers})"
        base = work / f"cluster-{workers}"
    base.mkdir(parents=True)
    with started(EtcdServer(base / "etcd")) as etcd, started(BookieProc(etcd.url, base)) as bk:
        broker = BrokerProc(
            etcd.url,
            base,
            ensemble=(1, 1, 1),
            extra_args=["--workers", str(workers)],
            argv_prefix=["taskset", "-c", cpus] if cores else [],
        )
        with started(broker):
            assert broker.pid is not None and bk.pid is not None and etcd.pid is not None
            roles = [("broker", broker.pid), ("bookie", bk.pid), ("etcd", etcd.pid)]
            if workers > 1:  # every worker registered before the load starts
                deadline = time.monotonic() + 60
                while len(_brokers(broker.http_url)) < workers:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the workers did not all register")
                    time.sleep(0.2)
            yield Layout(
                name,
                broker.service_url,
                broker.http_url,
                [pid for _, pid in roles],
                roles,
                frozenset(cores) if cores else None,
            )


def _brokers(http_url: str) -> list[str]:
    with urllib.request.urlopen(f"{http_url}/admin/v2/brokers/standalone", timeout=10) as r:
        return list(json.loads(r.read()))


def _owner(http_url: str, topic: str) -> str:
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{http_url}/lookup/v2/topic/persistent/{path}", timeout=30) as r:
        return str(json.loads(r.read())["brokerUrl"])


_round = iter(range(1_000_000))


@dataclass
class Round:
    rate: float
    """Messages per second, produced and consumed."""
    cpu_us: float
    """Server CPU (every process of the layout) per message, µs."""
    owners: dict[str, int]
    """Topics per owner (a lookup's broker URL)."""
    affinity: list[tuple[str, int, str]]
    """(role, pid, Cpus_allowed_list) of the layout's processes, read while the load ran."""


def run_load(layout: Layout, args: argparse.Namespace) -> Round:
    """One round of the load on ``layout``."""
    client = pulsar.Client(
        layout.service_url,
        io_threads=4,
        operation_timeout_seconds=60,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        n = next(_round)
        topics = [f"persistent://public/default/w{n}-{i}" for i in range(args.topics)]
        owners: dict[str, int] = {}
        for t in topics:
            url = _owner(layout.http_url, t)
            owners[url] = owners.get(url, 0) + 1
        consumers = [client.subscribe(t, "bench", receiver_queue_size=5000) for t in topics]
        producers = [
            client.create_producer(
                t,
                batching_enabled=True,
                batching_max_publish_delay_ms=1,
                max_pending_messages=5000,
                block_if_queue_full=True,
            )
            for t in topics
        ]
        payload = b"x" * args.size
        total = args.topics * args.messages
        received = [0]
        lock = threading.Lock()
        done = threading.Event()

        def drain(consumer: pulsar.Consumer) -> None:
            for _ in range(args.messages):
                consumer.acknowledge(consumer.receive(timeout_millis=120_000))
            with lock:
                received[0] += args.messages
                if received[0] == total:
                    done.set()

        def send(producer: pulsar.Producer) -> None:
            for _ in range(args.messages):
                producer.send_async(payload, None)
            producer.flush()

        cpu0, t0 = _cpu(layout.pids), time.monotonic()
        threads = [threading.Thread(target=drain, args=(c,), daemon=True) for c in consumers]
        threads += [threading.Thread(target=send, args=(p,), daemon=True) for p in producers]
        for thread in threads:
            thread.start()
        affinity = affinities(layout.roles)  # while the load runs
        check_pinned(layout, affinity)
        if not done.wait(600):
            raise RuntimeError(f"{layout.name}: {received[0]:,} of {total:,} received")
        elapsed, cpu = time.monotonic() - t0, _cpu(layout.pids) - cpu0
        for c in consumers:
            c.close()
        for p in producers:
            p.close()
        return Round(total / elapsed, cpu / total * 1e6, owners, affinity)
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--messages", type=int, default=20_000, help="per topic")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--cores",
        type=parse_cores,
        default="1,2",  # through parse_cores, as given ones
        help="core counts to pin the broker to, one layout each with as many workers "
        "(default 1,2; empty: none)",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ceiling-seconds", type=float, default=5.0, help="per ceiling measurement")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    results: dict[str, list[Round]] = {}
    with tempfile.TemporaryDirectory(prefix="workers-bench-") as tmp:
        work = Path(tmp)
        print("ceilings: fsync (4 KiB write + fdatasync) and loopback TCP", flush=True)
        ceiling = {
            "fsync": ceilings.fsync_ceiling(work, args.ceiling_seconds),
            "loopback": ceilings.loopback_ceiling(args.ceiling_seconds),
        }
        print(f"ceilings: {ceilings_text(ceiling)}", flush=True)
        makers: list[Callable[[], contextlib.AbstractContextManager[Layout]]] = [
            functools.partial(standalone, work),
            functools.partial(cluster, work, 1),
            functools.partial(cluster, work, args.workers),
        ]
        makers += [functools.partial(cluster, work, k, first_cores(k)) for k in args.cores]
        for make in makers:
            with make() as layout:
                for _ in range(args.rounds):
                    one = run_load(layout, args)
                    results.setdefault(layout.name, []).append(one)
                    spread = ", ".join(
                        f"{u.rsplit(':', 1)[-1]}: {k}" for u, k in one.owners.items()
                    )
                    print(
                        f"{layout.name}: {one.rate:,.0f} msg/s, server CPU {one.cpu_us:,.0f} "
                        f"µs/msg (topics per owner port: {spread})",
                        flush=True,
                    )
                    for role, pid, cpus in one.affinity:
                        print(f"  {role} {pid}: Cpus_allowed_list {cpus}", flush=True)
    rows = [
        "| layout | produce + consume msg/s (median) | server CPU µs/msg (median) | rounds |",
        "|---|---:|---:|---|",
    ]
    for name, runs in results.items():
        rate = statistics.median(r.rate for r in runs)
        cpu = statistics.median(r.cpu_us for r in runs)
        each = ", ".join(f"{r.rate:,.0f}" for r in runs)
        rows.append(f"| {name} | {rate:,.0f} | {cpu:,.0f} | {each} msg/s |")
    print()
    print("\n".join(rows))
    if args.record:
        record(rows, results, ceiling, args)
    return 0


def ceilings_text(c: dict[str, Any]) -> str:
    f = c["fsync"]
    return (
        f"fsync {f['ops']:,.0f} write+fdatasync/s of 4 KiB ({f['mbs']:.1f} MB/s, p50 "
        f"{f['p50_ms']:.3f} ms, p99 {f['p99_ms']:.3f} ms) on the disk the layouts write to; "
        f"loopback TCP {c['loopback']['mbs']:,.0f} MB/s (one sender, one reader, 64 KiB writes)"
    )


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces the run (with ``--record``)."""
    cores = ",".join(map(str, args.cores))
    return (
        f".venv/bin/python bench/broker_workers_bench.py --topics {args.topics} "
        f"--messages {args.messages} --size {args.size} --workers {args.workers} "
        f"--cores '{cores}' --rounds {args.rounds} --ceiling-seconds {args.ceiling_seconds:g} "
        "--record"
    )


def _git(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=False
    )


def record(
    rows: list[str],
    results: dict[str, list[Round]],
    ceiling: dict[str, Any],
    args: argparse.Namespace,
) -> None:
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    head = _git("rev-parse", "--short", "HEAD").stdout.strip()
    if _git("diff", "--quiet", "HEAD", "--", "src", "operator", "bench", "tests").returncode:
        head += " with uncommitted changes to the code"
    m = ceilings.machine()
    cores = os.cpu_count() or 1
    counts = " and ".join(map(str, args.cores))
    title = "standalone, broker, broker workers" + (
        f", broker on {counts} core{'s' if args.cores != [1] else ''}" if args.cores else ""
    )
    pinned = []
    for name, runs in results.items():
        if name.startswith("broker,"):
            seen = "; ".join(f"{role} {cpus}" for role, _, cpus in runs[-1].affinity)
            pinned.append(f"  * {name}: {seen}")
    lines = [
        f"<!-- bench-peers section {SECTION} begin -->",
        f"## Process layouts and cores: {title} "
        "(`bench/broker_workers_bench.py --record`, issue 24)",
        "",
        "<!-- Generated by bench/broker_workers_bench.py --record; replaced by its next "
        "recorded run. Do not edit by hand. -->",
        "",
        f"* Finished {started} (UTC) at commit {head}; 1-min load average "
        f"{os.getloadavg()[0]:.2f} on the machine's {cores} cores, shared with other "
        "work: indicative.",
        f"* Machine: {m['cpu'] or 'CPU model unknown'}, {m['cores']} cores, "
        f"{m['memory_gib']} GiB, Linux {m['kernel']}. Ceilings, same run: "
        f"{ceilings_text(ceiling)}.",
        f"* Reproduce: `{command(args)}` (without `--record` it only prints).",
        f"* {args.topics} topics in 4 bundles, a producer (batching 1 ms, {args.size:,} B) and "
        f"a consumer each, all in the bench's process (the official client); "
        f"{args.messages:,} messages per topic, produced and consumed together; "
        f"{args.rounds} rounds per layout. Server CPU: every process of the layout (broker "
        "workers, bookie, etcd), per message.",
        "* Layouts: `standalone` is one process (broker, bookie, embedded metadata; adds reach "
        "the bookie in-process); `broker x1` is etcd, a bookie and a broker, each its own "
        "process (adds over gRPC: what a standalone with its bookie in a process of its own "
        "would pay); `broker xN` runs `magnetar broker --workers N`: N broker processes behind "
        'one set of ports, bundles spread over them (docs/architecture.md, "Broker worker '
        "processes\"). `magnetar broker` runs 1 unless told; the operator's `workers: auto` "
        "runs one per whole core of the pod's CPU limit.",
    ]
    if args.cores:
        lines += [
            "* `broker, K cores`: the broker of `broker xN` with `--workers K`, run under "
            "`taskset -c` of the machine's first K cores, so it and its workers (which inherit "
            "the affinity) run on K cores only: what a broker pod with a CPU limit of K cores "
            "and `workers: auto` buys. The bookie, etcd and the load generator (the bench's "
            f"process, the official client) are not pinned: on this {cores}-core machine they "
            "share the broker's cores"
            + (
                f" (with {max(args.cores)} cores given to the broker, all of them)"
                if max(args.cores) >= cores
                else ""
            )
            + ", so a K-core figure is a lower bound of what a pod with K dedicated cores "
            "buys. `Cpus_allowed_list` (/proc/PID/status) of each process, read while the "
            "load ran (last round):",
            *pinned,
        ]
    lines += [
        "",
        *rows,
        "",
        f"<!-- bench-peers section {SECTION} end -->",
        "",
    ]
    DOC.write_text(report.put_section(DOC.read_text(), SECTION, "\n".join(lines)))


if __name__ == "__main__":
    sys.exit(main())
