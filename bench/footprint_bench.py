"""What ``make run`` costs (issue 24, acceptance 4): start-up time and memory of a Magnetar
standalone beside Apache Pulsar 4.0.7's standalone.

    .venv/bin/python bench/footprint_bench.py [--rounds 3] [--messages 10000] [--size 1024]
        [--settle 5] [--system magnetar|pulsar|both] [--record]

``make run`` is ``magnetar standalone`` with its defaults; here the same command runs on free
loopback ports with a temporary ``--data-dir`` (``--advertised-address 127.0.0.1
--bind-address 127.0.0.1``), and nothing else changed (its log level included). Apache
Pulsar runs as bench/peers/systems.py starts it: ``PulsarStandaloneStarter`` from the jars
scripts/bench/install_pulsar.sh assembles, embedded bookie and metadata, functions worker and
stream storage off, heap 2 GiB (``-Xms`` = ``-Xmx``) and direct memory up to 2 GiB. Each
round starts every system fresh (systems alternating) and measures:

* start-up: seconds from the spawn until the readiness probe (``/admin/v2/brokers/health``)
  answers, and until a first produce + consume round trip on a fresh topic succeeds through
  the official Python client (client, consumer and producer created after the probe
  answered, one message sent, received and acknowledged);
* the server's CPU seconds (user + system) spent until it was ready;
* memory: the resident set size summed over the server process and all its descendants
  (psutil; shared pages counted once per process), with the count of processes and their
  threads: idle ``--settle`` seconds after the first round trip, then right after a fixed
  load (``--messages`` messages of ``--size`` bytes produced with batching, 1 ms, and
  consumed and acknowledged on a second fresh topic), and the peak of the sum sampled every
  0.1 s from the spawn to the end of the load.

Medians over the rounds and each round's figures. The machine is shared: the figures are
indicative; nothing passes or fails. ``--record`` writes the tables as a section of
docs/benchmarks.md (replaced by the next recorded run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pulsar

sys.path.insert(0, str(Path(__file__).with_name("peers")))

import report
import systems

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "footprint"
MIB = 1024 * 1024
SAMPLE_INTERVAL = 0.1
ROUND_TRIP_TIMEOUT = 120.0


@dataclass
class TreeStats:
    """A process and its descendants at one instant."""

    rss: int
    processes: int
    threads: int


def tree_stats(pid: int) -> TreeStats:
    """RSS (bytes), process count and thread count summed over ``pid`` and its descendants;
    a descendant that exits during the walk is left out."""
    root = psutil.Process(pid)
    rss, processes, threads = 0, 0, 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            with proc.oneshot():
                rss += proc.memory_info().rss
                threads += proc.num_threads()
        except psutil.NoSuchProcess:
            continue
        processes += 1
    return TreeStats(rss=rss, processes=processes, threads=threads)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants, with the children
    each of them has already waited for (a reaped child's time is in its parent's)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


class MagnetarRun(systems.MagnetarStandalone):
    """``magnetar standalone`` as ``make run`` starts it: the ports, addresses and data
    directory of bench/peers/systems.py, its log level left at the default."""

    poll_interval = 0.05

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, _env, cwd = super().argv()
        return argv, {}, cwd


class PulsarRun(systems.PulsarStandalone):
    """Apache Pulsar's standalone as bench/peers/systems.py starts it."""

    poll_interval = 0.05


class PeakSampler(threading.Thread):
    """The peak of :func:`tree_stats`'s RSS of ``system``'s process, sampled every
    :data:`SAMPLE_INTERVAL` seconds from the moment the process exists until :meth:`halt`."""

    def __init__(self, system: systems.System) -> None:
        super().__init__(daemon=True)
        self.system = system
        self.peak = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            proc = self.system.proc
            if proc is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    self.peak = max(self.peak, tree_stats(proc.pid).rss)
                    self.samples += 1
                self._stop_event.wait(SAMPLE_INTERVAL)
            else:
                self._stop_event.wait(0.005)

    def halt(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


@dataclass
class Round:
    ready_s: float
    first_round_trip_s: float
    cpu_to_ready_s: float
    idle: TreeStats
    loaded: TreeStats
    peak_rss: int
    load_s: float


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url,
        operation_timeout_seconds=30,
        io_threads=1,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )


def _topic(kind: str) -> str:
    return f"persistent://public/default/footprint-{kind}-{uuid.uuid4().hex[:12]}"


def first_round_trip(url: str) -> tuple[float, pulsar.Client]:
    """Create a client, a consumer and a producer on a fresh topic and carry one message
    through; retried until it succeeds or :data:`ROUND_TRIP_TIMEOUT`. Returns the monotonic
    time of the acknowledgement and the (open) client."""
    deadline = time.monotonic() + ROUND_TRIP_TIMEOUT
    while True:
        client = _client(url)
        try:
            topic = _topic("first")
            consumer = client.subscribe(topic, "footprint")
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"first")
            msg = consumer.receive(timeout_millis=10_000)
            consumer.acknowledge(msg)
            done = time.monotonic()
            if msg.data() != b"first":
                raise RuntimeError(f"first round trip: received {msg.data()[:40]!r}")
            producer.close()
            consumer.close()
            return done, client
        except pulsar.PulsarException as err:
            client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no produce + consume round trip: {err}") from err
            time.sleep(0.05)


def run_load(client: pulsar.Client, messages: int, size: int) -> float:
    """``messages`` messages of ``size`` bytes produced with batching (1 ms) and consumed and
    acknowledged on a fresh topic; the seconds it took."""
    topic = _topic("load")
    consumer = client.subscribe(topic, "footprint", receiver_queue_size=1000)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=1,
        max_pending_messages=1000,
        block_if_queue_full=True,
    )
    payload = b"f" * size
    failures: list[str] = []
    received = 0

    def drain() -> None:
        nonlocal received
        while received < messages:
            try:
                msg = consumer.receive(timeout_millis=60_000)
            except pulsar.Timeout:
                return
            consumer.acknowledge(msg)
            received += 1

    def sent(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        if res != pulsar.Result.Ok:
            failures.append(str(res))

    t0 = time.monotonic()
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    for _ in range(messages):
        producer.send_async(payload, sent)
    producer.flush()
    reader.join(timeout=300)
    took = time.monotonic() - t0
    producer.close()
    consumer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, first: {failures[0]}")
    if received != messages:
        raise RuntimeError(f"{received:,} of {messages:,} messages received")
    return took


def measure(system: systems.System, args: argparse.Namespace) -> Round:
    sampler = PeakSampler(system)
    sampler.start()
    try:
        system.start()
        ready = time.monotonic()
        pid = system.pid()
        assert pid is not None
        cpu_to_ready = tree_cpu(pid)
        spawn = ready - system.startup_seconds
        acked, client = first_round_trip(system.url)
        try:
            time.sleep(args.settle)
            idle = tree_stats(pid)
            load_s = run_load(client, args.messages, args.size)
            loaded = tree_stats(pid)
        finally:
            client.close()
        peak = sampler.halt()
        return Round(
            ready_s=system.startup_seconds,
            first_round_trip_s=acked - spawn,
            cpu_to_ready_s=cpu_to_ready,
            idle=idle,
            loaded=loaded,
            peak_rss=max(peak, idle.rss, loaded.rss),
            load_s=load_s,
        )
    finally:
        sampler.halt()
        system.stop()


METRICS: list[tuple[str, str]] = [
    ("ready_s", "start-up until ready, s"),
    ("first_round_trip_s", "start-up until the first produce + consume, s"),
    ("cpu_to_ready_s", "server CPU until ready, s"),
    ("idle_rss", "RSS idle, MiB"),
    ("loaded_rss", "RSS after the load, MiB"),
    ("peak_rss", "RSS peak, MiB"),
    ("idle_processes", "processes (idle / after the load)"),
    ("idle_threads", "threads idle"),
    ("loaded_threads", "threads after the load"),
    ("load_s", "the load's produce + consume, s"),
]


def figure(r: Round, key: str) -> float:
    values: dict[str, float] = {
        "ready_s": r.ready_s,
        "first_round_trip_s": r.first_round_trip_s,
        "cpu_to_ready_s": r.cpu_to_ready_s,
        "idle_rss": r.idle.rss / MIB,
        "loaded_rss": r.loaded.rss / MIB,
        "peak_rss": r.peak_rss / MIB,
        "idle_processes": r.idle.processes,
        "idle_threads": r.idle.threads,
        "loaded_threads": r.loaded.threads,
        "load_s": r.load_s,
    }
    return values[key]


def fmt(key: str, value: float) -> str:
    if key.endswith("_s"):
        return f"{value:,.2f}"
    return f"{value:,.0f}"


def cell(key: str, rounds: list[Round], pick: str = "median") -> str:
    if key == "idle_processes":  # "idle / after the load"
        idle = [float(r.idle.processes) for r in rounds]
        loaded = [float(r.loaded.processes) for r in rounds]
        return f"{statistics.median(idle):.0f} / {statistics.median(loaded):.0f}"
    return fmt(key, statistics.median(figure(r, key) for r in rounds))


def summary(results: dict[str, list[Round]]) -> list[str]:
    names = list(results)
    both = len(names) == 2
    head = "| | " + " | ".join(f"{n} (median)" for n in names) + " |"
    if both:
        head += f" {names[1]} / {names[0]} |"
    rows = [head, "|---|" + "---:|" * (len(names) + (1 if both else 0))]
    for key, label in METRICS:
        line = f"| {label} | " + " | ".join(cell(key, results[n]) for n in names) + " |"
        if both:
            a, b = (statistics.median(figure(r, key) for r in results[n]) for n in names)
            line += f" {b / a:,.1f}x |" if a else " |"
        rows.append(line)
    return rows


def per_round(results: dict[str, list[Round]]) -> list[str]:
    count = max(len(v) for v in results.values())
    rows = [
        "| | " + " | ".join(f"round {i + 1}" for i in range(count)) + " | median |",
        "|---|" + "---:|" * (count + 1),
    ]
    for key, label in METRICS:
        for name, rounds in results.items():
            if key == "idle_processes":
                each = [f"{r.idle.processes} / {r.loaded.processes}" for r in rounds]
            else:
                each = [fmt(key, figure(r, key)) for r in rounds]
            each += [""] * (count - len(each))
            rows.append(f"| {name}: {label} | " + " | ".join(each) + f" | {cell(key, rounds)} |")
    return rows


def record(
    results: dict[str, list[Round]],
    args: argparse.Namespace,
    versions: dict[str, str],
    load: tuple[float, float],
) -> None:
    finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    head = systems.git_head()
    lines = [
        f"<!-- bench-peers section {SECTION} begin -->",
        "## What `make run` costs: start-up and memory beside Apache Pulsar "
        "(`.venv/bin/python bench/footprint_bench.py --record`, issue 24)",
        "",
        "<!-- Generated by bench/footprint_bench.py --record; replaced by its next recorded "
        "run. Do not edit by hand. -->",
        "",
        f"* Finished {finished} (UTC) at {head}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f"; 1-min load average {load[0]:.2f} at the start, {load[1]:.2f} at the end, on "
        f"the machine's {os.cpu_count()} cores, shared with other work: indicative.",
        "* Magnetar: `magnetar standalone` with its defaults (what `make run` starts) on free "
        "loopback ports and a temporary `--data-dir`. Apache Pulsar: `PulsarStandaloneStarter` "
        "as bench/peers/systems.py starts it (embedded bookie and metadata, functions worker "
        "and stream storage off, `-Xms2g -Xmx2g`, direct memory up to 2 GiB: the heap is "
        "reserved, RSS counts the pages touched).",
        f"* {args.rounds} fresh starts per system, alternating. Ready: spawn to the health "
        "probe answering (polled every 0.05 s). First produce + consume: spawn to one message "
        "sent and received on a fresh topic through the official Python client, created after "
        "the probe answered. Server CPU: user + system of the process and its descendants. "
        "RSS: summed over the process and all its descendants; idle "
        f"{args.settle:g} s after the first round trip, after the load ({args.messages:,} "
        f"messages of {args.size:,} B, batching 1 ms, produced and consumed), and the peak "
        f"of the sum sampled every {SAMPLE_INTERVAL:g} s from the spawn to the end of the load.",
        "",
        *summary(results),
        "",
        "Each round:",
        "",
        *per_round(results),
        "",
        f"<!-- bench-peers section {SECTION} end -->",
        "",
    ]
    DOC.write_text(report.put_section(DOC.read_text(), SECTION, "\n".join(lines)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument(
        "--settle", type=float, default=5.0, help="idle seconds before the idle RSS is read"
    )
    ap.add_argument("--system", choices=["magnetar", "pulsar", "both"], default="both")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    if args.rounds < 1 or args.messages < 1 or args.size < 1 or args.settle < 0:
        ap.error("--rounds, --messages and --size must be positive, --settle not negative")
    kinds: list[type[systems.System]] = []
    if args.system in ("magnetar", "both"):
        kinds.append(MagnetarRun)
    if args.system in ("pulsar", "both"):
        kinds.append(PulsarRun)
    load_start = os.getloadavg()[0]
    results: dict[str, list[Round]] = {}
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="footprint-bench-") as tmp:
        work = Path(tmp)
        installed = []
        for kind in kinds:
            system = kind(work)
            system.install()
            versions[system.name] = system.version
            installed.append(system)
        for i in range(args.rounds):
            for system in installed:
                r = measure(system, args)
                results.setdefault(system.name, []).append(r)
                print(
                    f"round {i + 1} {system.name}: ready {r.ready_s:.2f} s, first produce + "
                    f"consume {r.first_round_trip_s:.2f} s, CPU to ready {r.cpu_to_ready_s:.2f}"
                    f" s; RSS idle {r.idle.rss / MIB:,.0f} MiB ({r.idle.processes} processes, "
                    f"{r.idle.threads} threads), after the load {r.loaded.rss / MIB:,.0f} MiB "
                    f"({r.loaded.processes} processes, {r.loaded.threads} threads), peak "
                    f"{r.peak_rss / MIB:,.0f} MiB; load {r.load_s:.2f} s",
                    flush=True,
                )
    print()
    print("\n".join(summary(results)))
    print()
    print("\n".join(per_round(results)))
    if args.record:
        record(results, args, versions, (load_start, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
