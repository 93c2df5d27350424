"""Pulsar Functions throughput (issue 28): messages/s and CPU per message through an identity
function, beside the same work done by a hand-written official-client loop, and beside
Apache Pulsar's functions worker running its Java identity function.

A ``magnetar standalone`` on loopback ports; ``--messages`` messages of ``--size`` bytes are
produced (batching 1 ms) to an input topic and read back from the output topic. Through the
function: one instance (``python -m magnetar.functions.instance``, ATLEAST_ONCE, the default)
of a ``pulsar.Function`` returning its input. By hand: one process running the loop a user
would write with the official client (receive -> the same identity -> send_async -> ack on
the receipt). Apache Pulsar: its standalone (bench/peers/systems.py, jars from Maven Central)
with the functions worker on and ``ThreadRuntimeFactory`` (instances run as threads of the
worker: the process runtime needs the instance jar of Pulsar's binary distribution, and its
Python instance ships only there), running ``IdentityFunction`` from pulsar-functions-api,
bytes in and out, one instance, ATLEAST_ONCE, after one unmeasured warm-up round.
messages/s = messages / (first send to last output received); CPU/message = the consumer
process's (the instance's, or the loop's) user + system CPU time over the run / messages, and
the whole system's (the server's with it; Pulsar's instance is a thread of its JVM, so only
the whole JVM is measured there). Figures only: nothing passes or fails; on 2 shared cores
the servers, the producer and the consumer process share the CPU. ``--record`` writes the
figures as a section of docs/benchmarks.md.

    .venv/bin/python bench/functions_bench.py [--messages 20000] [--size 100] [--rounds 3]
        [--no-pulsar] [--record]
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
import systems as peer_systems
from tests.support.procs import started
from tests.support.standalone import StandaloneProc

from magnetar.client.admin import AdminClient, AdminError, FormField

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


WORKER_YML = """# Apache Pulsar's functions worker in its standalone, for bench/functions_bench.py:
# instances run as threads of the worker (no instance jar of the binary distribution needed).
# The standalone sets the worker's id, hostname, port, cluster and service URLs itself.
pulsarFunctionsNamespace: public/functions
functionMetadataTopicName: metadata
clusterCoordinationTopicName: coordinate
numFunctionPackageReplicas: 1
downloadDirectory: {download}
schedulerClassName: org.apache.pulsar.functions.worker.scheduler.RoundRobinScheduler
functionAssignmentTopicName: assignments
rebalanceCheckFreqSec: -1
authenticateMetricsEndpoint: false
functionRuntimeFactoryClassName: org.apache.pulsar.functions.runtime.thread.ThreadRuntimeFactory
functionRuntimeFactoryConfigs:
  threadGroupName: pulsar-functions
failureCheckFreqMs: 30000
rescheduleTimeoutMs: 60000
initialBrokerReconnectMaxRetries: 60
assignmentWriteMaxRetries: 60
instanceLivenessCheckFreqMs: 30000
topicCompactionFrequencySec: 1800
"""

JAVA_IDENTITY = "org.apache.pulsar.functions.api.utils.IdentityFunction"
"""Pulsar's own identity function, in pulsar-functions-api (one of the standalone's jars)."""


class PulsarFunctions(peer_systems.PulsarStandalone):
    """Apache Pulsar's standalone (bench/peers/systems.py) with its functions worker on,
    running instances in its own JVM (``ThreadRuntimeFactory``)."""

    key = "pulsar-functions"
    heap = "1g"
    direct = "1g"
    startup_timeout = 240.0

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        self.extra_conf = {"functionsWorkerEnabled": "true"}
        argv, env, cwd = super().argv()
        worker = self.data_dir / "functions_worker.yml"
        worker.write_text(WORKER_YML.format(download=self.data_dir / "download"))
        at = argv.index("--no-functions-worker")
        argv[at : at + 1] = ["--functions-worker-conf", str(worker)]
        return argv, env, cwd

    def ready(self) -> bool:
        # the worker answers 503 until it has initialized; public/default comes after it
        base = f"http://127.0.0.1:{self.http_port}/admin"
        return peer_systems._http_ok(f"{base}/v3/functions/public/default") and (
            peer_systems._http_ok(f"{base}/v2/namespaces/public/default")
        )


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
    server = proc.pid
    assert server is not None
    client = pulsar.Client(proc.service_url)
    try:
        before, server_before = cpu_seconds(pid), cpu_seconds(server)
        elapsed = pump(client, f"fn-in-{n}", f"fn-out-{n}", args)
        cpu, server_cpu = cpu_seconds(pid) - before, cpu_seconds(server) - server_before
    finally:
        client.close()
    admin.call("DELETE", f"/admin/v3/functions/public/default/{name}")
    return {
        "rate": args.messages / elapsed,
        "cpu_us": cpu / args.messages * 1e6,
        "system_cpu_us": (cpu + server_cpu) / args.messages * 1e6,
    }


def pulsar_through_function(system: PulsarFunctions, n: int, args: argparse.Namespace) -> dict:
    """The identity function on Apache Pulsar: its Java ``IdentityFunction``, one instance
    (a thread of the worker, in the standalone's JVM), ATLEAST_ONCE. CPU: the whole JVM
    (broker, bookie, worker and instance) over the run."""
    jar = next(system.lib.glob("pulsar-functions-api-[0-9]*.jar"))
    source, sink = (
        f"persistent://public/default/pfn-in-{n}",
        f"persistent://public/default/pfn-out-{n}",
    )
    admin = AdminClient(f"http://127.0.0.1:{system.http_port}", timeout=60.0)
    # Until its leader is ready the functions worker answers 503 "Leader not yet ready",
    # after it stored the package under the name: the next attempt takes another name.
    deadline = time.monotonic() + 120
    for attempt in range(1000):
        name = f"identity{n}" + (f"-{attempt}" if attempt else "")
        config = {
            "tenant": "public", "namespace": "default", "name": name,
            # the function is Object -> Object: without a schema type Pulsar would give it
            # JSON; NONE (Pulsar's TopicSchema: Schema.BYTES) in and out, as the Python
            # identity does
            "className": JAVA_IDENTITY, "inputSpecs": {source: {"schemaType": "NONE"}},
            "output": sink, "outputSchemaType": "NONE",
            "subscriptionPosition": "Earliest", "runtime": "JAVA", "jar": jar.name,
            "parallelism": 1, "processingGuarantees": "ATLEAST_ONCE",
        }  # fmt: skip
        try:
            admin.call(
                "POST",
                f"/admin/v3/functions/public/default/{name}",
                form=(
                    FormField("functionConfig", json.dumps(config).encode()),
                    FormField("data", jar.read_bytes(), jar.name, "application/octet-stream"),
                ),
            )
            break
        except AdminError as err:
            if err.status != 503 or time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    status_path = f"/admin/v3/functions/public/default/{name}/status"
    deadline = time.monotonic() + 120
    while not admin.call("GET", status_path).get("numRunning"):
        if time.monotonic() > deadline:
            raise SystemExit(
                f"Pulsar's instance of {name} did not start: {admin.call('GET', status_path)}"
            )
        time.sleep(0.5)
    pid = system.pid()
    assert pid is not None
    client = pulsar.Client(system.url)
    try:
        before = cpu_seconds(pid)
        elapsed = pump(client, source, sink, args)
        cpu = cpu_seconds(pid) - before
    finally:
        client.close()
    admin.call("DELETE", f"/admin/v3/functions/public/default/{name}")
    return {"rate": args.messages / elapsed, "system_cpu_us": cpu / args.messages * 1e6}


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
        server = proc.pid
        assert server is not None
        try:
            before, server_before = cpu_seconds(loop.pid), cpu_seconds(server)
            elapsed = pump(client, source, sink, args)
            cpu, server_cpu = cpu_seconds(loop.pid) - before, cpu_seconds(server) - server_before
        finally:
            client.close()
        loop.wait(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    return {
        "rate": args.messages / elapsed,
        "cpu_us": cpu / args.messages * 1e6,
        "system_cpu_us": (cpu + server_cpu) / args.messages * 1e6,
    }


ROWS = (
    ("fn_rate", "Magnetar function instance, messages/s", "{:,.0f}"),
    ("hand_rate", "Magnetar + hand-written loop, messages/s", "{:,.0f}"),
    (
        "pulsar_rate",
        "Apache Pulsar function (Java identity, thread runtime), messages/s",
        "{:,.0f}",
    ),
    ("fn_cpu_us", "Magnetar function instance process, CPU µs/message", "{:.0f}"),
    ("hand_cpu_us", "hand-written loop process, CPU µs/message", "{:.0f}"),
    ("fn_system_cpu_us", "Magnetar standalone + instance, CPU µs/message", "{:.0f}"),
    ("hand_system_cpu_us", "Magnetar standalone + hand-written loop, CPU µs/message", "{:.0f}"),
    (
        "pulsar_system_cpu_us",
        "Apache Pulsar standalone JVM (broker, bookie, worker, instance), CPU µs/message",
        "{:.0f}",
    ),
)


def section(args: argparse.Namespace, rows: list[dict], loads: str, pulsar_note: str) -> str:
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
        "official-client loop on a Magnetar standalone, and through Apache Pulsar's own Java "
        "identity function (`IdentityFunction`, one instance, ATLEAST_ONCE, bytes in and out) "
        "in Pulsar 4.0.7's standalone with its functions worker running instances as threads "
        f"(`ThreadRuntimeFactory`); {len(rows)} rounds, medians below.",
        f"* {pulsar_note}",
        f"* 1-min load average {loads}; the machine's 2 cores are shared with other work "
        "(other sessions' builds and tests): compare ratios within one run.",
        "* messages/s = messages / (first send to last output received); CPU/message = the "
        "process CPU time over the run / messages: the instance's or the loop's own, and the "
        "whole system's (the server with the instance or loop; in Pulsar the instance is a "
        "thread of the standalone's JVM, so only the whole JVM can be measured).",
        "",
        "| | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " | median |",
        "| --- | " + " | ".join("---:" for _ in rows) + " | ---: |",
    ]
    for key, label, fmt in ROWS:
        values = [r.get(key) for r in rows]
        if all(v is None for v in values):
            continue
        cells = " | ".join("—" if v is None else fmt.format(v) for v in values)
        present = [v for v in values if v is not None]
        median = fmt.format(statistics.median(present))
        lines.append(f"| {label} | {cells} | {median} |")
    lines += ["", "<!-- bench-peers section functions end -->", ""]
    return "\n".join(lines)


def magnetar_rounds(args: argparse.Namespace) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="functions-bench-") as tmp:
        work = Path(tmp)
        with started(StandaloneProc(work / "data")) as proc:
            for n in range(args.rounds):
                fn = through_function(proc, work, n, args)
                hand = by_hand(proc, n, args)
                row = {f"fn_{k}": v for k, v in fn.items()}
                row.update({f"hand_{k}": v for k, v in hand.items()})
                rows.append(row)
                print(
                    f"Magnetar round {n + 1}: function {row['fn_rate']:,.0f} msg/s "
                    f"({row['fn_cpu_us']:.0f} µs CPU/msg, {row['fn_system_cpu_us']:.0f} with the "
                    f"standalone), by hand {row['hand_rate']:,.0f} msg/s "
                    f"({row['hand_cpu_us']:.0f} µs CPU/msg, {row['hand_system_cpu_us']:.0f})",
                    flush=True,
                )
    return rows


def pulsar_rounds(args: argparse.Namespace) -> tuple[list[dict], str]:
    """Apache Pulsar's rounds, after one unmeasured warm-up round (its JVM compiles the hot
    paths during the first thousands of messages); or no rounds and why."""
    with tempfile.TemporaryDirectory(prefix="functions-bench-pulsar-") as tmp:
        system = PulsarFunctions(Path(tmp))
        try:
            system.install()
            system.start()
        except peer_systems.StartError as err:
            return [], f"Apache Pulsar was not measured: {err}"
        try:
            pulsar_through_function(system, 0, args)  # warm-up, not measured
            rows = []
            for n in range(args.rounds):
                got = pulsar_through_function(system, n + 1, args)
                rows.append({f"pulsar_{k}": v for k, v in got.items()})
                print(
                    f"Apache Pulsar round {n + 1}: function {got['rate']:,.0f} msg/s "
                    f"({got['system_cpu_us']:.0f} µs CPU/msg, whole JVM)",
                    flush=True,
                )
        finally:
            system.stop()
    note = (
        f"Apache Pulsar {system.version}: `PulsarStandaloneStarter` from Maven Central's jars "
        "(scripts/bench/install_pulsar.sh, bench/peers/systems.py) with `--functions-worker-conf` "
        "(the worker settings are in bench/functions_bench.py), heap 1 GiB; the jar uploaded is "
        "pulsar-functions-api, which holds `IdentityFunction`; one unmeasured warm-up round "
        "first. Its Python runtime is not used: the Python instance ships only in Pulsar's "
        "binary distribution."
    )
    return rows, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100, help="message size in bytes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--no-pulsar", action="store_true", help="skip Apache Pulsar (Java and Maven needed)"
    )
    peers_report.add_record_option(ap, ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    rows = magnetar_rounds(args)
    note = "Apache Pulsar was not measured (--no-pulsar)."
    if not args.no_pulsar:
        pulsar_rows, note = pulsar_rounds(args)
        print(note, flush=True)
        for row, extra in zip(rows, pulsar_rows, strict=False):
            row.update(extra)
    if args.record:
        loads = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        peers_report.record_section(
            Path(args.record), "functions", section(args, rows, loads, note)
        )


if __name__ == "__main__":
    main()
