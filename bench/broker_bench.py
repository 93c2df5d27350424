"""Broker figures with the official client against a ``magnetar standalone`` it starts.

Prints, for 1 KiB messages: publish msg/s and MB/s with batching, sync-send latency p50/p99,
consume msg/s (draining the published backlog), and end-to-end latency p50/p99 at a fixed
rate. Figures only, never pass/fail; issue 7 compares them with Apache Pulsar on the same
machine and workload.

    .venv/bin/python bench/broker_bench.py [--seconds 10] [--size 1024] [--url pulsar://...]

With ``--url`` it measures an already running broker instead of starting one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar

from magnetar.common.ports import free_port


@contextlib.contextmanager
def standalone() -> Iterator[str]:
    data = Path(tempfile.mkdtemp(prefix="broker-bench-"))
    port, http_port = free_port(), free_port()
    log = open(data / "standalone.log", "wb")
    argv = [
        sys.executable, "-m", "magnetar.cli", "standalone",
        "--data-dir", str(data / "data"), "--port", str(port),
        "--http-port", str(http_port), "--bind-address", "127.0.0.1",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MAGNETAR_LOG_LEVEL": "WARNING"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{http_port}/admin/v2/brokers/health"
                with urllib.request.urlopen(url, timeout=0.5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"standalone did not start; see {data / 'standalone.log'}")
            time.sleep(0.1)
        yield f"pulsar://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def publish(client: pulsar.Client, topic: str, size: int, seconds: float) -> int:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=20_000,
        block_if_queue_full=True,
    )
    payload = os.urandom(size)
    # No per-message Python callback: with one, the client's GIL-bound callback thread is the
    # bottleneck (~38k msg/s on this machine whatever the broker), not the broker. flush()
    # raises if any send failed.
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            producer.send_async(payload, None)
        n += 1000
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    rate = n / elapsed
    print(
        f"publish (batching)     {rate:12,.0f} msg/s   {rate * size / 1e6:8.1f} MB/s   ({n} msgs)"
    )
    return n


def sync_latency(client: pulsar.Client, topic: str, size: int, count: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    payload = os.urandom(size)
    lat = []
    for _ in range(count):
        t = time.perf_counter()
        producer.send(payload)
        lat.append((time.perf_counter() - t) * 1000)
    producer.close()
    print(
        f"sync send latency      p50 {pct(lat, 0.5):7.2f} ms   p99 {pct(lat, 0.99):7.2f} ms"
        f"   ({count} sends)"
    )


def consume(client: pulsar.Client, topic: str, n: int) -> None:
    consumer = client.subscribe(
        topic,
        "bench-drain",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5000,
    )
    got = 0
    start = time.perf_counter()
    with contextlib.suppress(pulsar.Timeout):
        while got < n:
            msg = consumer.receive(timeout_millis=10_000)
            got += 1
            if got % 1000 == 0:
                consumer.acknowledge_cumulative(msg)
    elapsed = time.perf_counter() - start
    consumer.close()
    print(f"consume (backlog)      {got / elapsed:12,.0f} msg/s   ({got} of {n} msgs)")


def end_to_end(client: pulsar.Client, topic: str, size: int, rate: int, seconds: float) -> None:
    consumer = client.subscribe(topic, "bench-e2e", receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1)
    lat: list[float] = []
    total = int(rate * seconds)

    def receive() -> None:
        with contextlib.suppress(pulsar.Timeout):
            while len(lat) < total:
                msg = consumer.receive(timeout_millis=10_000)
                sent = float(msg.properties()["t"])
                lat.append((time.perf_counter() - sent) * 1000)
                consumer.acknowledge(msg)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    payload = os.urandom(size)
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(payload, None, properties={"t": repr(time.perf_counter())})
    producer.flush()
    thread.join(timeout=30)
    consumer.close()
    producer.close()
    if lat:
        print(
            f"end-to-end @{rate}/s     p50 {pct(lat, 0.5):7.2f} ms   p99 {pct(lat, 0.99):7.2f} ms"
            f"   ({len(lat)} msgs)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="measure this broker instead of starting standalone")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sync-sends", type=int, default=2000)
    parser.add_argument("--e2e-rate", type=int, default=2000)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(standalone())
        print(f"broker {url}, {args.size} B messages, {os.cpu_count()} CPUs")
        client = pulsar.Client(url, operation_timeout_seconds=30, logger=_quiet_logger())
        stack.callback(client.close)
        tag = int(time.time())
        backlog = f"bench-publish-{tag}"
        # the subscription exists before publishing, so the backlog is kept for consume()
        client.subscribe(
            backlog, "bench-drain", initial_position=pulsar.InitialPosition.Earliest
        ).close()
        n = publish(client, backlog, args.size, args.seconds)
        sync_latency(client, f"bench-sync-{tag}", args.size, args.sync_sends)
        consume(client, backlog, n)
        end_to_end(client, f"bench-e2e-{tag}", args.size, args.e2e_rate, args.seconds / 2)


def _quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


if __name__ == "__main__":
    main()
