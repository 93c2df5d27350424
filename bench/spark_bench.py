"""Spark data source figures against a ``magnetar standalone`` it starts: rows/s of 1 KiB
messages for a batch read, a streaming read (AvailableNow, one micro-batch) and a batch
write, next to the official client consuming the same data in one process. Figures only,
never pass/fail; docs/benchmarks.md records them (issue 16's target: batch read >= 1.0x the
single-process client with 2 partitions).

    .venv/bin/python bench/spark_bench.py [--messages 100000] [--size 1024] [--partitions 2]
        [--rounds 3] [--warmup 3] [--read-paths protocol,client] [--loops-only]

First the executors' read loops alone, outside Spark (what a Spark Python worker runs: one
process reading every partition into Arrow batches), for each read path: CPU microseconds
per message of this process (the official client's receive threads included), next to the
official client's ``read_next``-only loop. Then the Spark figures, the batch read once per
read path (``--read-paths``); ``--loops-only`` stops after the loops.

Spark runs in local mode with as many cores as the machine has; the session's start-up is
not counted. Before the batch read is measured, ``--warmup`` queries read everything once
each, their rates printed but not counted: a new SparkSession's JVM compiles its per-row
code over its first queries (the JVM's CPU per row halves between the first and the fourth)
and the first also starts the Python workers. Then ``--rounds`` rounds each run the official
client's consume and the batch read of each read path, in turn (after a 2 s pause each), so
that the machine's load (it moves by 10-20% over a minute on a shared machine) falls on both
alike; the summary gives each one's best and median rate and, for the batch reads, the ratio
of the medians and each round's ratio to the client. Streaming read and write: the best of
``--rounds`` runs. Next to each rate: the CPU time the whole process tree spent per 100,000
rows (this process, the standalone, Spark's JVM and its Python workers) and the load
average; the CPU figure does not depend on what else runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.spark.conftest import admin_call, create_topic
from tests.support.spark import local_session
from tests.support.standalone import StandaloneProc

NS = "public/bench"
SETTLE_S = 2.0
"""Pause before each paired run: what the previous one left running (Spark's JVM finishing
its job, the broker its reads) settles first."""


def say(text: str) -> None:
    print(text, flush=True)  # Spark's JVM shares the terminal: no buffered lines lost


def _quiet() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def produce(service_url: str, topic: str, n: int, size: int) -> None:
    client = pulsar.Client(service_url, logger=_quiet())
    producer = client.create_producer(
        topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=10_000
    )
    payload = os.urandom(size)
    for i in range(n):
        producer.send_async(payload, None, partition_key=str(i))
    producer.flush()
    client.close()


def client_consume(service_url: str, partitions: list[str], n: int) -> Timed:
    """The official client reading the same partitions in one process (readers, in turn)."""
    client = pulsar.Client(service_url, logger=_quiet())
    got = 0
    with Timed() as t:
        for partition in partitions:
            reader = client.create_reader(
                partition, pulsar.MessageId.earliest, receiver_queue_size=5000
            )
            while reader.has_message_available():
                reader.read_next(10_000)
                got += 1
            reader.close()
    client.close()
    assert got == n, (got, n)
    return t


def loop_read(service_url: str, admin_url: str, partitions: list[str], path: str, n: int) -> str:
    """Every partition read by one executor read loop in this process, as a Spark task
    would: wall time and this process's CPU per message."""
    from magnetar.spark import protocol_read
    from magnetar.spark.admin import Admin
    from magnetar.spark.options import BEFORE_ALL, Position
    from magnetar.spark.read import Range, read_range

    admin = Admin.at(admin_url)
    ranges = []
    for partition in partitions:
        last = admin.state(partition).last
        assert last is not None
        ranges.append(Range(partition, BEFORE_ALL, last))

    def no_fallback(after: Position) -> Any:
        raise AssertionError(f"the protocol loop handed over to the client after {after}")

    rows = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for r in ranges:
        if path == "client":
            batches = read_range(service_url, r, poll_timeout_ms=30_000)
        else:
            batches = protocol_read.read_range(
                service_url, r, poll_timeout_ms=30_000, fallback=no_fallback
            )
        rows += sum(b.num_rows for b in batches)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert rows == n, (rows, n)
    return (
        f"{cpu / n * 1e6:.2f} us CPU per message, {n / wall:,.0f} rows/s, "
        f"load {os.getloadavg()[0]:.1f}"
    )


def client_loop(service_url: str, partitions: list[str], n: int) -> str:
    """The official client's ``read_next``-only loop: this process's CPU per message."""
    cpu, wall = time.process_time(), time.perf_counter()
    client_consume(service_url, partitions, n)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return (
        f"{cpu / n * 1e6:.2f} us CPU per message, {n / wall:,.0f} rows/s, "
        f"load {os.getloadavg()[0]:.1f}"
    )


def cpu_seconds() -> float:
    """CPU time of this process and every process under it, reaped ones included."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue  # ended meanwhile
        total += t.user + t.system + t.children_user + t.children_system
    return total


class Timed:
    """Wall and CPU time (``cpu_seconds``) of the ``with`` block."""

    def __enter__(self) -> Timed:
        self.cpu = cpu_seconds()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.start
        self.cpu = cpu_seconds() - self.cpu


def best(rounds: int, n: int, run: Any) -> tuple[float, float, str]:
    """The best and the median rate of ``rounds`` runs (each returns its ``Timed``), with the
    best run's CPU time per 100,000 rows and the load average."""
    results = []
    for _ in range(rounds):
        t = run()
        per = t.cpu / n * 100_000
        load = os.getloadavg()[0]
        results.append((n / t.wall, f"{per:.2f} CPU s per 100k rows, load {load:.1f}"))
    results.sort()
    rate, cost = results[-1]
    return rate, results[len(results) // 2][0], cost


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def paired(rounds: int, n: int, runs: dict[str, Callable[[], Timed]]) -> dict[str, list[Timed]]:
    """``rounds`` rounds, each running every one of ``runs`` once in turn, so that a change in
    the machine's load falls on all of them alike; each run's figures are printed."""
    out: dict[str, list[Timed]] = {name: [] for name in runs}
    for r in range(rounds):
        for name, run in runs.items():
            time.sleep(SETTLE_S)
            t = run()
            out[name].append(t)
            cost = f"{t.cpu / n * 100_000:.2f} CPU s per 100k rows"
            say(f"round {r + 1}, {name}: {n / t.wall:,.0f} rows/s ({cost}, load {_load()})")
    return out


def report(results: dict[str, list[Timed]], n: int) -> float:
    """Per run kind: best and median rate, median CPU per 100k rows; against the first kind
    (the reference): the ratio of the medians and the median of the rounds' ratios. Returns
    the reference's median rate."""
    names = list(results)
    reference = [n / t.wall for t in results[names[0]]]
    for name in names:
        rates = [n / t.wall for t in results[name]]
        cpu = statistics.median(t.cpu / n * 100_000 for t in results[name])
        line = (
            f"{name}: best {max(rates):,.0f} rows/s, median {statistics.median(rates):,.0f} "
            f"({cpu:.2f} CPU s per 100k rows)"
        )
        if name != names[0]:
            ratios = [a / b for a, b in zip(rates, reference, strict=True)]
            line += (
                f"; {statistics.median(rates) / statistics.median(reference):.2f}x the "
                f"client's median, rounds {' '.join(f'{x:.2f}' for x in ratios)} "
                f"(median {statistics.median(ratios):.2f}x)"
            )
        say(line)
    return statistics.median(reference)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--read-paths", default="protocol,client")
    ap.add_argument("--loops-only", action="store_true")
    args = ap.parse_args()
    paths = [p.strip() for p in args.read_paths.split(",") if p.strip()]
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        proc = StandaloneProc(Path(tmp) / "data").start()
        try:
            admin_call(proc.http_url, "PUT", f"/namespaces/{NS}", {})
            infinite = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
            admin_call(proc.http_url, "POST", f"/namespaces/{NS}/retention", infinite)
            topic = f"persistent://{NS}/in"
            create_topic(proc, f"{NS}/in", args.partitions)
            parts = [f"{topic}-partition-{p}" for p in range(args.partitions)]
            t0 = time.perf_counter()
            produce(proc.service_url, topic, n, args.size)
            say(f"produced {n} x {args.size} B in {time.perf_counter() - t0:.1f} s")

            for r in range(args.rounds):
                say(f"loop, official client read_next only (round {r + 1}): "
                    + client_loop(proc.service_url, parts, n))  # fmt: skip
                for path in paths:
                    say(f"loop, readPath={path} (round {r + 1}): "
                        + loop_read(proc.service_url, proc.http_url, parts, path, n))  # fmt: skip
            if args.loops_only:
                return

            spark = local_session("magnetar-spark-bench", cores=os.cpu_count() or 2)
            options = {"serviceUrl": proc.service_url, "adminUrl": proc.http_url, "topic": topic}

            def batch_read(path: str) -> Timed:
                df = spark.read.format("magnetar").options(**options, readPath=path).load()
                with Timed() as t:
                    df.write.format("noop").mode("overwrite").save()  # every row, in the JVM
                assert df.count() == n  # (outside the timing)
                return t

            for w in range(args.warmup):  # the JVM compiles its hot paths over a few queries
                t = batch_read(paths[0])
                say(f"spark batch read, readPath={paths[0]}, warm-up query {w + 1} of a new "
                    f"SparkSession: {n / t.wall:,.0f} rows/s (not counted)")  # fmt: skip
            runs: dict[str, Callable[[], Timed]] = {
                "official client, one process": lambda: client_consume(proc.service_url, parts, n)
            }
            for path in paths:
                runs[f"spark batch read, readPath={path}"] = lambda p=path: batch_read(p)
            client_rate = report(paired(args.rounds, n, runs), n)

            def stream_read() -> Timed:
                with tempfile.TemporaryDirectory(prefix="ckpt-") as ckpt, Timed() as t:
                    query = (
                        spark.readStream.format("magnetar")
                        .options(**options, startingOffsets="earliest")
                        .load()
                        .select("value")
                        .writeStream.format("noop")
                        .option("checkpointLocation", ckpt)
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                rows = sum(p["numInputRows"] for p in query.recentProgress)
                assert rows == n, rows
                return t

            stream_rate, _, cost = best(args.rounds, n, stream_read)
            say(
                f"spark stream read: {stream_rate:,.0f} rows/s "
                f"({stream_rate / client_rate:.2f}x the client's median; includes query start and "
                f"commit; {cost})"
            )

            def write() -> Timed:
                sink = f"persistent://{NS}/out-{time.monotonic_ns()}"
                create_topic(proc, sink.split("://")[1], args.partitions)
                df = spark.read.format("magnetar").options(**options).load().select("key", "value")
                df = df.cache()
                df.count()
                with Timed() as t:
                    df.write.format("magnetar").option("serviceUrl", proc.service_url).option(
                        "topic", sink
                    ).mode("append").save()
                df.unpersist()
                return t

            write_rate, _, cost = best(args.rounds, n, write)
            say(f"spark batch write: {write_rate:,.0f} rows/s ({cost})")
            spark.stop()
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
