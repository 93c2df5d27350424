"""Pulsar Functions throughput (issue 28): messages/s and CPU per message through an identity
function, beside the same work done by a hand-written official-client loop.

A ``magnetar standalone`` on loopback ports; ``--messages`` messages of ``--size`` bytes are
produced (batching 1 ms) to an input topic and read back from the output topic. Through the
function: one instance (``python -m magnetar.functions.instance``, ATLEAST_ONCE, the default)
of a ``pulsar.Function`` returning its input. By hand: one process running the loop a user
would write with the official client (receive -> the same identity -> send_async -> ack on
the receipt). messages/s = messages / (first send to last output received); CPU/message =
the consumer process's (the instance's, or the loop's) user + system CPU time over the run /
messages. Apache Pulsar's functions worker with its Java identity function is not measured
here (its Python instance ships only in Pulsar's binary distribution; see docs/benchmarks.md).
Figures only: nothing passes or fails; on 2 shared cores the standalone, the producer and the
consumer process share the CPU. ``--record`` writes the figures as a section of
docs/benchmarks.md.

    .venv/bin/python bench/functions_bench.py [--messages 20000] [--size 100] [--rounds 3]
        [--record]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import psutil
import pulsar
import report as peers_report
from tests.support.procs import started
from tests.support.standalone import StandaloneProc

from magnetar.client.admin import AdminClient, FormField

ROOT = Path(__file__).resolve().parents[1]

IDENTITY = """
from pulsar import Function


class Identity(Function):
    def process(self, input, context):
        return input
"""

HAND_LOOP = """
import sys, pulsar
from pulsar.functions import serde
url, source, sink, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = pulsar.Client(url)
consumer = client.subscribe(source, "hand", consumer_type=pulsar.ConsumerType.Shared,
                            initial_position=pulsar.InitialPosition.Earliest)
producer = client.create_producer(sink, batching_enabled=True, batching_max_publish_delay_ms=1,
                                  block_if_queue_full=True)
identity = serde.IdentitySerDe()
print("ready", file=sys.stderr, flush=True)
for _ in range(count):
    msg = consumer.receive()
    value = identity.deserialize(msg.data())
    producer.send_async(identity.serialize(value),
                        lambda res, _id, msg=msg: consumer.acknowledge(msg))
producer.flush()
client.close()
"""


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def pump(client: pulsar.Client, source: str, sink: str, args: argparse.Namespace) -> float:
    """Send the messages to ``source``; the seconds until all came out of ``sink``."""
    out = client.subscribe(sink, "bench", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        source, batching_enabled=True, batching_max_publish_delay_ms=1, block_if_queue_full=True
    )
    payload = b"x" * args.size
    started_at = time.perf_counter()
    for _ in range(args.messages):
        producer.send_async(payload, None)
    producer.flush()
    for _ in range(args.messages):
        out.acknowledge(out.receive(timeout_millis=120_000))
    elapsed = time.perf_counter() - started_at
    producer.close()
    out.close()
    return elapsed


def through_function(proc: StandaloneProc, work: Path, n: int, args: argparse.Namespace) -> dict:
    name = f"identity{n}"
    code = work / "identity.py"
    code.write_text(IDENTITY)
    config = {
        "tenant": "public", "namespace": "default", "name": name,
        "className": "identity.Identity", "inputs": [f"fn-in-{n}"], "output": f"fn-out-{n}",
        "subscriptionPosition": "Earliest", "runtime": "PYTHON", "py": "identity.py",
    }  # fmt: skip
    admin = AdminClient(proc.http_url, timeout=30.0)
    admin.call(
        "POST",
        f"/admin/v3/functions/public/default/{name}",
        form=(
            FormField("functionConfig", json.dumps(config).encode()),
            FormField("data", code.read_bytes(), "identity.py", "application/octet-stream"),
        ),
    )
    report = proc.data_dir / f"functions/public/default/{name}/0/metrics.json"
    deadline = time.monotonic() + 60
    while not (report.exists() and json.loads(report.read_text()).get("pid")):
        if time.monotonic() > deadline:
            raise SystemExit(f"the instance of {name} did not start")
        time.sleep(0.2)
    pid = json.loads(report.read_text())["pid"]
    client = pulsar.Client(proc.service_url)
    try:
        before = cpu_seconds(pid)
        elapsed = pump(client, f"fn-in-{n}", f"fn-out-{n}", args)
        cpu = cpu_seconds(pid) - before
    finally:
        client.close()
    admin.call("DELETE", f"/admin/v3/functions/public/default/{name}")
    return {"rate": args.messages / elapsed, "cpu_us": cpu / args.messages * 1e6}


def by_hand(proc: StandaloneProc, n: int, args: argparse.Namespace) -> dict:
    source, sink = f"hand-in-{n}", f"hand-out-{n}"
    loop = subprocess.Popen(
        [sys.executable, "-c", HAND_LOOP, proc.service_url, source, sink, str(args.messages)],
        stdout=subprocess.DEVNULL,  # (the client's log)
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert loop.stderr is not None
        if loop.stderr.readline().strip() != "ready":
            raise SystemExit("the hand-written loop did not start")
        client = pulsar.Client(proc.service_url)
        try:
            before = cpu_seconds(loop.pid)
            elapsed = pump(client, source, sink, args)
            cpu = cpu_seconds(loop.pid) - before
        finally:
            client.close()
        loop.wait(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    return {"rate": args.messages / elapsed, "cpu_us": cpu / args.messages * 1e6}


def section(args: argparse.Namespace, rows: list[dict], loads: str) -> str:
    finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lines = [
        "<!-- bench-peers section functions begin -->",
        "## Pulsar Functions (`.venv/bin/python bench/functions_bench.py --record`, issue 28)",
        "",
        "<!-- Generated by bench/functions_bench.py --record; replaced by its next recorded "
        "run. Do not edit by hand. -->",
        "",
        f"* Finished {finished} (UTC): {args.messages:,} messages of {args.size} B through an "
        "identity function (one instance, ATLEAST_ONCE) and through a hand-written "
        f"official-client loop, on a standalone; {len(rows)} rounds, medians below.",
        f"* 1-min load average {loads}; the machine's 2 cores are shared with other work.",
        "* messages/s = messages / (first send to last output received); CPU/message = the "
        "instance's (or the loop's) process CPU time / messages.",
        "* Apache Pulsar's functions worker (its Java identity function) is not measured: "
        "not run here.",
        "",
        "| | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " | median |",
        "| --- | " + " | ".join("---:" for _ in rows) + " | ---: |",
    ]
    for key, label, fmt in (
        ("fn_rate", "function instance, messages/s", "{:,.0f}"),
        ("hand_rate", "hand-written loop, messages/s", "{:,.0f}"),
        ("fn_cpu_us", "function instance, CPU µs/message", "{:.0f}"),
        ("hand_cpu_us", "hand-written loop, CPU µs/message", "{:.0f}"),
    ):
        cells = " | ".join(fmt.format(r[key]) for r in rows)
        median = fmt.format(statistics.median(r[key] for r in rows))
        lines.append(f"| {label} | {cells} | {median} |")
    lines += ["", "<!-- bench-peers section functions end -->", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100, help="message size in bytes")
    ap.add_argument("--rounds", type=int, default=3)
    peers_report.add_record_option(ap, ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="functions-bench-") as tmp:
        work = Path(tmp)
        with started(StandaloneProc(work / "data")) as proc:
            for n in range(args.rounds):
                fn = through_function(proc, work, n, args)
                hand = by_hand(proc, n, args)
                row = {
                    "fn_rate": fn["rate"],
                    "fn_cpu_us": fn["cpu_us"],
                    "hand_rate": hand["rate"],
                    "hand_cpu_us": hand["cpu_us"],
                }
                rows.append(row)
                print(
                    f"round {n + 1}: function {row['fn_rate']:,.0f} msg/s "
                    f"({row['fn_cpu_us']:.0f} µs CPU/msg), by hand {row['hand_rate']:,.0f} "
                    f"msg/s ({row['hand_cpu_us']:.0f} µs CPU/msg)",
                    flush=True,
                )
    if args.record:
        loads = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        peers_report.record_section(Path(args.record), "functions", section(args, rows, loads))


if __name__ == "__main__":
    main()
