"""Proxy figures: the official client through a ``magnetar proxy`` next to the same client
straight to the broker, against a ``magnetar standalone`` this starts with the proxy in front.

    .venv/bin/python bench/proxy_bench.py [--messages 100000] [--size 1024] [--topics 100]
        [--rounds 3]

Two workloads, each run directly and through the proxy in turn, ``--rounds`` times, so that
the machine's load falls on both alike: *publish*, ``--messages`` messages of ``--size``
bytes with batching (msg/s; the proxy pipes the bytes), and *open*, a producer created on
each of ``--topics`` fresh topics (opens/s; each is a lookup the proxy answers by asking the
broker, then a connection it pipes). The summary gives each side's median and the ratio of
the medians (proxy / direct): the figure to compare across versions, as it does not depend on
how fast the machine is. Figures only, never pass/fail.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.procs import started
from tests.support.proxy import ProxyProc
from tests.support.standalone import StandaloneProc

_topics = itertools.count()


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def publish(url: str, n: int, size: int) -> float:
    """msg/s of ``n`` batched sends to a fresh topic, flushed."""
    client = _client(url)
    try:
        producer = client.create_producer(
            f"persistent://public/default/publish-{next(_topics)}",
            batching_enabled=True,
            block_if_queue_full=True,
            max_pending_messages=10_000,
        )
        payload = os.urandom(size)
        start = time.perf_counter()
        for _ in range(n):
            producer.send_async(payload, None)
        producer.flush()
        return n / (time.perf_counter() - start)
    finally:
        client.close()


def open_producers(url: str, topics: int) -> float:
    """Producers opened per second, each on a topic of its own (a lookup each)."""
    client = _client(url)
    try:
        batch = next(_topics)
        start = time.perf_counter()
        for i in range(topics):
            client.create_producer(f"persistent://public/default/open-{batch}-{i}")
        return topics / (time.perf_counter() - start)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    with started(StandaloneProc(base / "data")) as broker:
        proxy_args = [
            "--broker-service-url", broker.service_url,
            "--broker-web-service-url", broker.http_url,
        ]  # fmt: skip
        with started(ProxyProc(base, args=proxy_args)) as proxy:
            sides = {"direct": broker.service_url, "proxy": proxy.service_url}
            publish(broker.service_url, args.messages // 10, args.size)  # warm-up
            rates: dict[tuple[str, str], list[float]] = {}
            for r in range(1, args.rounds + 1):
                for side, url in sides.items():
                    for name, run in (
                        ("publish msg/s", lambda u: publish(u, args.messages, args.size)),
                        ("open producers/s", lambda u: open_producers(u, args.topics)),
                    ):
                        rate = run(url)
                        rates.setdefault((name, side), []).append(rate)
                        load = os.getloadavg()[0]
                        print(f"round {r}, {side}, {name}: {rate:,.0f} (load {load:.1f})")
            for name in ("publish msg/s", "open producers/s"):
                direct = statistics.median(rates[(name, "direct")])
                proxied = statistics.median(rates[(name, "proxy")])
                print(
                    f"{name}: direct median {direct:,.0f}, proxy median {proxied:,.0f}, "
                    f"proxy/direct {proxied / direct:.2f}"
                )


if __name__ == "__main__":
    main()
