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

import datetime as dt
import itertools
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from systems import ROOT, die_with_parent

PERF = ROOT / "scripts" / "bench" / "pulsar-perf"
POM = ROOT / "bench" / "peers" / "pulsar-perf-pom.xml"
KIB = 1024


def version() -> str:
    """pulsar-testclient's version, from the pom that installs it."""
    m = re.search(r"<testclient.version>(.*?)</", POM.read_text())
    return m[1] if m else "?"


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
# Errors, exceptions and failed sends; the consumer's summary says "ack failed 0 msg" (counted
# apart) and every producer line "failure 0.0 msg/s" (likewise), so neither is matched here.
_PROBLEMS = re.compile(r"\bERROR\b|Exception|\bFailed\b|[Ff]ailed to")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3})")
_STARTED = re.compile(r"PerformanceProducer - Created \d+ producers")
_DONE = re.compile(r"DONE \(reached the maximum duration")
_PERIODIC = re.compile(r"Throughput received:\s+(\d+) msg")


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    return dt.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S,%f").timestamp()


def _first(text: str, pattern: re.Pattern[str]) -> float | None:
    for line in text.splitlines():
        if pattern.search(line):
            return _stamp(line)
    return None


@dataclass
class PerfRun:
    """What one produce + consume pair reported.

    pulsar-perf's own aggregated msg/s divides by the process's whole life (the producer's
    includes 10 s of idling after its last send, the consumer's the wait for it), so the rates
    here come from its log's timestamps instead: ``send_rate`` is the count sent over the
    production window (producers created -> DONE); ``receive_rate`` the consumer's rate over
    its 10-second report intervals that lie inside that window (what it keeps up with while
    the producer runs); ``drained_s`` when the consumer had everything, counted from the
    producer's end (to 10 s, pulsar-perf reports every 10 s).
    """

    sent: int = 0
    received: int = 0
    ack_failures: int = 0
    window_s: float = 0.0
    send_rate: float = 0.0
    receive_rate: float = 0.0
    drained_s: float | None = None
    publish_latency_ms: dict[str, float] = field(default_factory=dict)
    e2e_latency_ms: dict[str, float] = field(default_factory=dict)
    failure_rate_max: float = 0.0
    warnings: int = 0
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
        run.sent = int(m[1])
    else:
        run.problems.append("pulsar-perf produce printed no summary")
    if m := _RECEIVED.search(consumer_log):
        run.received, run.ack_failures = int(m[1]), int(m[3])
    else:
        run.problems.append("pulsar-perf consume printed no summary")
    start, done = _first(producer_log, _STARTED), _first(producer_log, _DONE)
    if start is not None and done is not None and done > start:
        run.window_s = done - start
        run.send_rate = run.sent / run.window_s
        samples = [(start, 0)] + [
            (t, int(c[1]))
            for line in consumer_log.splitlines()
            if (c := _PERIODIC.search(line)) and (t := _stamp(line)) is not None
        ]
        n = secs = 0.0
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if t0 >= start and t1 <= done:
                n, secs = n + c1 - c0, secs + t1 - t0
            if run.drained_s is None and run.sent and c1 >= run.sent:
                run.drained_s = max(0.0, t1 - done)
        if secs == 0:  # a run shorter than two report intervals: the whole window, drain included
            last = next((t for t, c in samples if run.sent and c >= run.sent), None)
            n, secs = run.received, (last or done) - start
        run.receive_rate = n / secs if secs > 0 else 0.0
    else:
        run.problems.append("pulsar-perf produce logged no start or no DONE")
    run.publish_latency_ms = _latency(producer_log)
    run.e2e_latency_ms = _latency(consumer_log)
    run.failure_rate_max = max((float(x) for x in _FAILURE_RATE.findall(producer_log)), default=0)
    for name, text in (("produce", producer_log), ("consume", consumer_log)):
        lines = text.splitlines()
        run.warnings += sum(" WARN " in line for line in lines)
        run.problems += [f"{name}: {x.strip()}" for x in lines if _PROBLEMS.search(x)][:5]
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
    client_args: tuple[str, ...] = (),
) -> PerfRun:
    """pulsar-perf consume and produce on ``topic`` for ``seconds``; the consumer keeps
    running until it received everything sent (or 60 s more). ``client_args``: pulsar-perf's
    authentication and TLS options (:func:`client_args`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    clog, plog = workdir / "perf-consume.log", workdir / "perf-produce.log"
    subprocess.run([str(PERF), "--help"], capture_output=True, check=True, timeout=600)  # install
    with clog.open("wb") as cout:
        consumer = subprocess.Popen(
            [str(PERF), "consume", "-u", url, *client_args, "-ss", "perf", "-st", "Exclusive",
             "-time", str(int(seconds + 300)), topic],
            stdout=cout, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )  # fmt: skip
        try:
            # The subscription (at the latest position) must exist before the first message:
            # wait for the consumer to say so (a JVM on a loaded machine may take a while).
            ready = time.monotonic() + 120
            while "Start receiving" not in clog.read_text(errors="replace"):
                if consumer.poll() is not None or time.monotonic() > ready:
                    break  # parse() reports the missing summary / short count
                time.sleep(0.5)
            with plog.open("wb") as pout:
                subprocess.run(
                    [str(PERF), "produce", "-u", url, *client_args, "-s", str(size),
                     "-r", str(rate), "-b", str(batch_ms), "-time", str(int(seconds)),
                     "-o", "10000", topic],
                    stdout=pout, stderr=subprocess.STDOUT, timeout=seconds + 120, check=False,
                    preexec_fn=die_with_parent,
                )  # fmt: skip
            sent = _SENT.search(plog.read_text(errors="replace"))
            target = int(sent[1]) if sent else 0
            deadline = time.monotonic() + 60
            while consumer.poll() is None and time.monotonic() < deadline:
                done = _PERIODIC.findall(clog.read_text(errors="replace"))
                if done and int(done[-1]) >= target:
                    break
                time.sleep(1)
        finally:
            if consumer.poll() is None:
                consumer.terminate()  # pulsar-perf prints its aggregated summary on SIGTERM
            consumer.wait(30)
    return parse(plog.read_text(errors="replace"), clog.read_text(errors="replace"))


def client_args(conn: dict[str, str]) -> tuple[str, ...]:
    """pulsar-perf's options for a secured system's ``conn`` (workloads.Conn)."""
    args: list[str] = []
    if conn.get("tls_trust_certs"):
        args += ["--trust-cert-file", conn["tls_trust_certs"], "--tls-enable-hostname-verification"]
    if conn.get("token"):
        args += ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                 "--auth-params", f"token:{conn['token']}"]  # fmt: skip
    return tuple(args)


def w1p(conn: dict[str, str], prefix: str, p: Any) -> dict[str, Any]:
    """Workload 1 with pulsar-perf as the load generator (see the module docstring)."""
    topic = f"persistent://public/default/{prefix}-w1p"
    run = run_pair(
        conn["url"], topic, seconds=p.w1_seconds,
        workdir=ROOT / ".cache" / "bench-peers" / prefix, client_args=client_args(conn),
    )  # fmt: skip
    if not run.ok:
        from workloads import WorkloadError

        raise WorkloadError(
            f"pulsar-perf: sent {run.sent}, received {run.received}, ack failures "
            f"{run.ack_failures}, failure rate {run.failure_rate_max}/s; {run.problems[:3]}"
        )
    return summary(run)


def summary(run: PerfRun) -> dict[str, Any]:
    """The figures of one run, under the report's keys."""
    return {
        "publish_msgs": run.send_rate,
        "publish_mbs": run.send_rate * KIB / 1e6,
        "consume_msgs": run.receive_rate,
        "publish_p50_ms": run.publish_latency_ms.get("p50"),
        "publish_p99_ms": run.publish_latency_ms.get("p99"),
        "e2e_p50_ms": run.e2e_latency_ms.get("p50"),
        "e2e_p99_ms": run.e2e_latency_ms.get("p99"),
        "drained_s": run.drained_s,
        "published": run.sent,
        "consumed": run.received,
        "server_msgs": run.sent,
        "window_s": run.window_s,
        "warnings": run.warnings,
    }
