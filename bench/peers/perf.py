"""Apache Pulsar's pulsar-perf as a load generator (issue 11): a JVM client is not bound by one
Python process, so differences between the brokers show where the Python client would be the
limit.

``w1p`` is workload 1 with pulsar-perf: one topic, 1 KiB messages, batching on (1 ms), a
consumer (``pulsar-perf consume``) and a producer at its maximum rate (``pulsar-perf
produce``) running together for ``w1_seconds``. ``run_pair`` is also the 60-second check of
``bench/pulsar_perf_bench.py``: it reads pulsar-perf's own summary lines and counts failures,
so a run with send errors, exceptions or fewer messages received than sent is reported as
such, never as a figure.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from systems import ROOT, die_with_parent

PERF = ROOT / "scripts" / "bench" / "pulsar-perf"
KIB = 1024

_SENT = re.compile(r"Aggregated throughput stats --- (\d+) records sent --- ([\d.]+) msg/s")
_RECEIVED = re.compile(
    r"Aggregated throughput stats --- (\d+) records received --- ([\d.]+) msg/s"
    r".*?ack failed (\d+) msg"
)
_LATENCY = re.compile(
    r"Aggregated latency stats --- Latency: mean:\s*([\d.]+) ms - med:\s*([\d.]+) - "
    r"95pct:\s*([\d.]+) - 99pct:\s*([\d.]+) - 99.9pct:\s*([\d.]+)"
)
_FAILURE_RATE = re.compile(r"--- failure\s+([\d.]+) msg/s")
_PROBLEMS = re.compile(r"\bERROR\b|Exception")


@dataclass
class PerfRun:
    """What one produce + consume pair reported."""

    sent: int = 0
    send_rate: float = 0.0
    received: int = 0
    receive_rate: float = 0.0
    ack_failures: int = 0
    publish_latency_ms: dict[str, float] = field(default_factory=dict)
    e2e_latency_ms: dict[str, float] = field(default_factory=dict)
    failure_rate_max: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.sent > 0
            and self.received >= self.sent
            and self.ack_failures == 0
            and self.failure_rate_max == 0
            and not self.problems
        )


def _latency(text: str) -> dict[str, float]:
    m = _LATENCY.search(text)
    if m is None:
        return {}
    return dict(zip(("mean", "p50", "p95", "p99", "p999"), map(float, m.groups()), strict=True))


def parse(producer_log: str, consumer_log: str) -> PerfRun:
    run = PerfRun()
    if m := _SENT.search(producer_log):
        run.sent, run.send_rate = int(m[1]), float(m[2])
    else:
        run.problems.append("pulsar-perf produce printed no summary")
    if m := _RECEIVED.search(consumer_log):
        run.received, run.receive_rate, run.ack_failures = int(m[1]), float(m[2]), int(m[3])
    else:
        run.problems.append("pulsar-perf consume printed no summary")
    run.publish_latency_ms = _latency(producer_log)
    run.e2e_latency_ms = _latency(consumer_log)
    run.failure_rate_max = max((float(x) for x in _FAILURE_RATE.findall(producer_log)), default=0)
    for name, text in (("produce", producer_log), ("consume", consumer_log)):
        run.problems += [
            f"{name}: {line.strip()}" for line in text.splitlines() if _PROBLEMS.search(line)
        ][:5]
    return run


def run_pair(
    url: str,
    topic: str,
    *,
    seconds: float,
    workdir: Path,
    size: int = KIB,
    rate: int = 10_000_000,
    batch_ms: float = 1.0,
) -> PerfRun:
    """pulsar-perf consume and produce on ``topic`` for ``seconds``; the consumer keeps
    running until it received everything sent (or 60 s more)."""
    workdir.mkdir(parents=True, exist_ok=True)
    clog, plog = workdir / "perf-consume.log", workdir / "perf-produce.log"
    subprocess.run([str(PERF), "--help"], capture_output=True, check=True, timeout=600)  # install
    with clog.open("wb") as cout:
        consumer = subprocess.Popen(
            [str(PERF), "consume", "-u", url, "-ss", "perf", "-st", "Exclusive",
             "-time", str(int(seconds + 90)), topic],
            stdout=cout, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )  # fmt: skip
        try:
            time.sleep(5)  # the subscription exists before the first message
            with plog.open("wb") as pout:
                subprocess.run(
                    [str(PERF), "produce", "-u", url, "-s", str(size), "-r", str(rate),
                     "-b", str(batch_ms), "-time", str(int(seconds)), "-o", "10000", topic],
                    stdout=pout, stderr=subprocess.STDOUT, timeout=seconds + 120, check=False,
                    preexec_fn=die_with_parent,
                )  # fmt: skip
            sent = _SENT.search(plog.read_text(errors="replace"))
            target = int(sent[1]) if sent else 0
            deadline = time.monotonic() + 60
            while consumer.poll() is None and time.monotonic() < deadline:
                done = re.findall(
                    r"Throughput received:\s+(\d+) msg", clog.read_text(errors="replace")
                )
                if done and int(done[-1]) >= target:
                    break
                time.sleep(1)
        finally:
            if consumer.poll() is None:
                consumer.terminate()  # pulsar-perf prints its aggregated summary on SIGTERM
            consumer.wait(30)
    return parse(plog.read_text(errors="replace"), clog.read_text(errors="replace"))


def w1p(url: str, prefix: str, p: Any) -> dict[str, Any]:
    """Workload 1 with pulsar-perf as the load generator (see the module docstring)."""
    topic = f"persistent://public/default/{prefix}-w1p"
    run = run_pair(
        url, topic, seconds=p.w1_seconds, workdir=ROOT / ".cache" / "bench-peers" / prefix
    )
    if not run.ok:
        from workloads import WorkloadError

        raise WorkloadError(
            f"pulsar-perf: sent {run.sent}, received {run.received}, ack failures "
            f"{run.ack_failures}, failure rate {run.failure_rate_max}/s; {run.problems[:3]}"
        )
    return {
        "publish_msgs": run.send_rate,
        "publish_mbs": run.send_rate * KIB / 1e6,
        "consume_msgs": run.receive_rate,
        "publish_p50_ms": run.publish_latency_ms.get("p50"),
        "publish_p99_ms": run.publish_latency_ms.get("p99"),
        "published": run.sent,
        "consumed": run.received,
    }
