"""Broker worker processes (issue 24): the same produce + consume load on a standalone, on a
broker of one process and on a broker of ``--workers N`` processes.

    .venv/bin/python bench/broker_workers_bench.py [--topics 8] [--messages 20000] [--size 1024]
        [--workers 2] [--rounds 2]

Layouts, each started fresh on loopback and measured ``--rounds`` times in turn:

* ``standalone``: ``magnetar standalone`` (broker, bookie and metadata in one process);
* ``broker x1``: etcd + one bookie + ``magnetar broker`` (E = Wq = Aq = 1);
* ``broker xN``: the same with ``magnetar broker --workers N``.

Load: ``--topics`` topics in ``public/default`` (4 bundles), a producer (batching 1 ms) and an
Exclusive consumer on each, all in this process through the official client; every producer
sends ``--messages`` messages of ``--size`` bytes at its maximum rate while the consumers
receive and acknowledge. The figures: messages per second from the first send to the last
receive, and the server side's CPU time per message (user + system, read from /proc through
psutil, of every process of the layout: brokers, bookie, etcd), so a faster layout is seen to
be faster by parallelism and not by burning more. Which worker owns each topic is printed
(``--workers`` spreads bundles over its processes through lookups). The machine is shared:
the figures are indicative, the comparison between layouts is the point. Figures only,
never pass/fail. ``--record`` writes the table as a section of docs/benchmarks.md (replaced
by the next recorded run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).with_name("peers")))

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
        yield Layout("standalone", proc.service_url, proc.http_url, [proc.pid])


@contextlib.contextmanager
def cluster(work: Path, workers: int) -> Iterator[Layout]:
    base = work / f"cluster-{workers}"
    base.mkdir(parents=True)
    with started(EtcdServer(base / "etcd")) as etcd, started(BookieProc(etcd.url, base)) as bk:
        broker = BrokerProc(
            etcd.url, base, ensemble=(1, 1, 1), extra_args=["--workers", str(workers)]
        )
        with started(broker):
            pids = [p for p in (broker.pid, bk.pid, etcd.pid) if p is not None]
            name = "broker x1" if workers == 1 else f"broker x{workers} (--workers {workers})"
            if workers > 1:  # every worker registered before the load starts
                deadline = time.monotonic() + 60
                while len(_brokers(broker.http_url)) < workers:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the workers did not all register")
                    time.sleep(0.2)
            yield Layout(name, broker.service_url, broker.http_url, pids)


def _brokers(http_url: str) -> list[str]:
    with urllib.request.urlopen(f"{http_url}/admin/v2/brokers/standalone", timeout=10) as r:
        return list(json.loads(r.read()))


def _owner(http_url: str, topic: str) -> str:
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{http_url}/lookup/v2/topic/persistent/{path}", timeout=30) as r:
        return str(json.loads(r.read())["brokerUrl"])


_round = iter(range(1_000_000))


def run_load(layout: Layout, args: argparse.Namespace) -> tuple[float, float, dict[str, int]]:
    """(msg/s, server CPU µs per message, topics per owner) of one round."""
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
        if not done.wait(600):
            raise RuntimeError(f"{layout.name}: {received[0]:,} of {total:,} received")
        elapsed, cpu = time.monotonic() - t0, _cpu(layout.pids) - cpu0
        for c in consumers:
            c.close()
        for p in producers:
            p.close()
        return total / elapsed, cpu / total * 1e6, owners
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--messages", type=int, default=20_000, help="per topic")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="workers-bench-") as tmp:
        work = Path(tmp)
        for make in (
            lambda: standalone(work),
            lambda: cluster(work, 1),
            lambda: cluster(work, args.workers),
        ):
            with make() as layout:
                for _ in range(args.rounds):
                    rate, cpu, owners = run_load(layout, args)
                    results.setdefault(layout.name, []).append((rate, cpu))
                    spread = ", ".join(f"{u.rsplit(':', 1)[-1]}: {k}" for u, k in owners.items())
                    print(
                        f"{layout.name}: {rate:,.0f} msg/s, server CPU {cpu:,.0f} µs/msg "
                        f"(topics per owner port: {spread})",
                        flush=True,
                    )
    rows = [
        "| layout | produce + consume msg/s (median) | server CPU µs/msg (median) | rounds |",
        "|---|---:|---:|---|",
    ]
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        each = ", ".join(f"{r:,.0f}" for r, _ in runs)
        rows.append(f"| {name} | {rate:,.0f} | {cpu:,.0f} | {each} msg/s |")
    print()
    print("\n".join(rows))
    if args.record:
        record(rows, args)
    return 0


def record(rows: list[str], args: argparse.Namespace) -> None:
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    lines = [
        f"<!-- bench-peers section {SECTION} begin -->",
        "## Process layouts: standalone, broker, broker workers "
        "(`.venv/bin/python bench/broker_workers_bench.py --record`, issue 24)",
        "",
        "<!-- Generated by bench/broker_workers_bench.py --record; replaced by its next "
        "recorded run. Do not edit by hand. -->",
        "",
        f"* Finished {started} (UTC) at {head}; 1-min load average "
        f"{os.getloadavg()[0]:.2f} on the machine's {os.cpu_count()} cores, shared with other "
        "work: indicative.",
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
        'processes"). The setting defaults to 1 until the figures on a quiet machine show the '
        "gain.",
        "",
        *rows,
        "",
        f"<!-- bench-peers section {SECTION} end -->",
        "",
    ]
    DOC.write_text(report.put_section(DOC.read_text(), SECTION, "\n".join(lines)))


if __name__ == "__main__":
    sys.exit(main())
