"""What topic-level metrics cost (issue 23, acceptance 5): broker CPU per message with
``exposeTopicLevelMetricsInPrometheus`` on and off, Magnetar beside Apache Pulsar.

Each system is started fresh (bench/peers/systems.py: Magnetar standalone from the venv,
Apache Pulsar 4.0.7 standalone from .cache) once with the switch off and once on. The official
client then creates a producer and a consumer on each of ``--topics`` topics (outside the
measured window), and the window is: every producer sends ``--messages`` messages (100 B,
batching off, asynchronously) while every consumer receives and acknowledges them, with
``/metrics`` scraped every ``--scrape-interval`` seconds as Prometheus would. The figure is the
server's CPU time (user + system of the process and its children, psutil) over the window
divided by the messages; the last scrape's duration, size and series count show what a scrape
costs. The machine is shared, so the figures are indicative; the ratios between on and off,
measured back to back, are the point. A benchmark: it prints figures, it is not a test.

.venv/bin/python bench/metrics_cost_bench.py [--topics 100] [--messages 300] [--record]

``--record`` writes the table as a section of docs/benchmarks.md (replaced by the next
recorded run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pulsar

sys.path.insert(0, str(Path(__file__).with_name("peers")))

import report
import systems

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "metrics-cost"
PAYLOAD = b"m" * 100


class MagnetarMetrics(systems.MagnetarStandalone):
    def __init__(self, workdir: Path, *, topic_level: bool) -> None:
        super().__init__(workdir)
        self.topic_level = topic_level

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, env, cwd = super().argv()
        flag = "true" if self.topic_level else "false"
        return [*argv, "--expose-topic-level-metrics-in-prometheus", flag], env, cwd


class PulsarMetrics(systems.PulsarStandalone):
    def __init__(self, workdir: Path, *, topic_level: bool) -> None:
        super().__init__(workdir)
        self.extra_conf = {"exposeTopicLevelMetricsInPrometheus": str(topic_level).lower()}


@dataclass
class Result:
    system: str
    topic_level: bool
    messages: int
    window_s: float
    cpu_s: float
    scrapes: int
    scrape_ms: float
    scrape_bytes: int
    series: int

    @property
    def cpu_us_per_msg(self) -> float:
        return self.cpu_s / self.messages * 1e6


def _cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children."""
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


def _scrape(http_port: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=60) as r:
        body = r.read()
    ms = (time.perf_counter() - t0) * 1000
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return ms, len(body), series


def measure(system: systems.System, args: argparse.Namespace, *, topic_level: bool) -> Result:
    system.start()
    pid = system.pid()
    assert pid is not None
    http_port = int(system.http_port)
    client = pulsar.Client(
        system.url,
        operation_timeout_seconds=60,
        io_threads=2,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        run = f"mc-{int(time.time())}"
        topics = [f"persistent://public/default/{run}-{i}" for i in range(args.topics)]
        consumers = [client.subscribe(t, "sub", receiver_queue_size=1000) for t in topics]
        producers = [
            client.create_producer(t, batching_enabled=False, max_pending_messages=1000)
            for t in topics
        ]
        total = args.topics * args.messages
        received = 0
        lock = threading.Lock()
        done = threading.Event()

        def drain(consumer: pulsar.Consumer) -> None:
            nonlocal received
            for _ in range(args.messages):
                consumer.acknowledge(consumer.receive(timeout_millis=120_000))
                with lock:
                    received += 1
                    if received == total:
                        done.set()

        scrape = {"n": 0, "ms": 0.0, "bytes": 0, "series": 0}
        stop_scraping = threading.Event()

        def scraper() -> None:
            while not stop_scraping.wait(args.scrape_interval):
                scrape["ms"], scrape["bytes"], scrape["series"] = _scrape(http_port)
                scrape["n"] += 1

        time.sleep(2.0)  # let start-up work (topic loads, first stats period) settle
        cpu0, t0 = _cpu(pid), time.monotonic()
        readers = [threading.Thread(target=drain, args=(c,), daemon=True) for c in consumers]
        scraping = threading.Thread(target=scraper, daemon=True)
        for thread in (*readers, scraping):
            thread.start()
        for i in range(args.messages):
            for p in producers:
                p.send_async(PAYLOAD, None)
            if i % 50 == 49:
                for p in producers:
                    p.flush()
        for p in producers:
            p.flush()
        if not done.wait(300):
            raise RuntimeError(f"{system.name}: {received:,} of {total:,} received")
        stop_scraping.set()
        scraping.join()
        window, cpu = time.monotonic() - t0, _cpu(pid) - cpu0
        if scrape["n"] == 0:  # a run shorter than one interval: scrape once
            scrape["ms"], scrape["bytes"], scrape["series"] = _scrape(http_port)
            scrape["n"] = 1
        return Result(
            system=system.name,
            topic_level=topic_level,
            messages=total,
            window_s=window,
            cpu_s=cpu,
            scrapes=int(scrape["n"]),
            scrape_ms=float(scrape["ms"]),
            scrape_bytes=int(scrape["bytes"]),
            series=int(scrape["series"]),
        )
    finally:
        client.close()
        system.stop()


def table(results: list[Result]) -> list[str]:
    rows = [
        "| system | topic-level metrics | broker CPU µs/msg | on / off | msg/s | "
        "last scrape ms | scrape KiB | series |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    off = {r.system: r.cpu_us_per_msg for r in results if not r.topic_level}
    for r in results:
        ratio = f"{r.cpu_us_per_msg / off[r.system]:.2f}x" if r.system in off else ""
        rows.append(
            f"| {r.system} | {'on' if r.topic_level else 'off'} | {r.cpu_us_per_msg:,.0f} | "
            f"{ratio} | {r.messages / r.window_s:,.0f} | {r.scrape_ms:,.1f} | "
            f"{r.scrape_bytes / 1024:,.0f} | {r.series:,} |"
        )
    by = {(r.system, r.topic_level): r.cpu_us_per_msg for r in results}
    for on in (False, True):
        m, p = by.get(("Magnetar", on)), by.get(("Apache Pulsar", on))
        if m and p:
            rows.append("")
            rows.append(
                f"With topic-level metrics {'on' if on else 'off'}: Apache Pulsar spends "
                f"{p / m:.1f}x Magnetar's broker CPU per message."
            )
    return rows


def record(results: list[Result], args: argparse.Namespace, versions: dict[str, str]) -> None:
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    load = f"{os.getloadavg()[0]:.2f}"
    lines = [
        f"<!-- bench-peers section {SECTION} begin -->",
        "## What topic-level metrics cost (`.venv/bin/python bench/metrics_cost_bench.py "
        "--record`, issue 23)",
        "",
        "<!-- Generated by bench/metrics_cost_bench.py --record; replaced by its next recorded "
        "run. Do not edit by hand. -->",
        "",
        f"* Finished {started} (UTC); "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f"; 1-min load average {load} (2 cores shared with other work: indicative).",
        f"* {args.topics} topics, one producer (100 B, batching off) and one consumer each, "
        f"{args.messages} messages per topic; `/metrics` scraped every "
        f"{args.scrape_interval:g} s during the window. Broker CPU = user + system time of the "
        "server process (and its children) over the window, per message. Last scrape ms: "
        "the wall time of the window's last scrape, answered under the load.",
        "",
        *table(results),
        "",
        f"<!-- bench-peers section {SECTION} end -->",
        "",
    ]
    DOC.write_text(report.put_section(DOC.read_text(), SECTION, "\n".join(lines)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--messages", type=int, default=300, help="per topic")
    ap.add_argument("--scrape-interval", type=float, default=2.0, metavar="SECONDS")
    ap.add_argument("--system", choices=["magnetar", "pulsar", "both"], default="both")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    results: list[Result] = []
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="metrics-cost-") as tmp:
        work = Path(tmp)
        kinds: list[type[MagnetarMetrics] | type[PulsarMetrics]] = []
        if args.system in ("magnetar", "both"):
            kinds.append(MagnetarMetrics)
        if args.system in ("pulsar", "both"):
            kinds.append(PulsarMetrics)
        for kind in kinds:
            for on in (False, True):
                system = kind(work, topic_level=on)
                system.install()
                versions[system.name] = system.version
                result = measure(system, args, topic_level=on)
                results.append(result)
                print(
                    f"{result.system} topic-level {'on' if on else 'off'}: "
                    f"{result.cpu_us_per_msg:,.0f} µs CPU/msg, "
                    f"{result.messages / result.window_s:,.0f} msg/s, scrape "
                    f"{result.scrape_ms:,.1f} ms {result.scrape_bytes / 1024:,.0f} KiB "
                    f"{result.series:,} series",
                    flush=True,
                )
    print("\n".join(table(results)))
    if args.record:
        record(results, args, versions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
