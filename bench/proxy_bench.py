"""Proxy figures: the official client through a ``magnetar proxy`` next to the same client
straight to the broker, against a ``magnetar standalone`` this starts with the proxy in front.

    .venv/bin/python bench/proxy_bench.py [--messages 100000] [--size 1024] [--topics 100]
        [--lookups 2000] [--rounds 3] [--baseline-src DIR] [--server-src DIR]

Workloads, each run directly and through the proxy in turn, ``--rounds`` times, so that
the machine's load falls on both alike: *publish*, ``--messages`` messages of ``--size``
bytes with batching (msg/s; the proxy pipes the bytes), and *open*, a producer created on
each of ``--topics`` fresh topics (opens/s; each is a lookup the proxy answers by asking the
broker, then a connection it pipes). The summary gives each side's median and the ratio of
the medians (proxy / direct): the figure to compare across versions, as it does not depend on
how fast the machine is. A third workload, *lookups*, sends ``--lookups`` LOOKUPs of one
existing topic one after the other on one connection (lookups/s): the proxy's own request
path, with no topic created and nothing piped. Figures only, never pass/fail.

``--baseline-src DIR`` puts a second proxy in front of the same standalone, run from another
source tree (``DIR`` is its ``src/``: an exported older commit with its generated modules
copied in), to compare two versions of the proxy on one broker: the sides run in turn, the
order rotating from round to round, so the machine's load falls on each alike. The summary
then adds, per workload, the median of the per-round ratios proxy / baseline (each ratio from
runs seconds apart) and both proxies' CPU per message or per producer opened (read from
``/proc``: it depends less on the machine's load than a rate does). ``--server-src DIR`` runs
the standalone and the proxy themselves from another tree (the clients stay this tree's), to
compare two versions of the whole server side run after run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.procs import started
from tests.support.proxy import ProxyProc
from tests.support.raw_client import RawClient
from tests.support.standalone import StandaloneProc

from magnetar.wire import commands, pb

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


def lookups(url: str, n: int) -> float:
    """LOOKUPs per second of one existing topic, one at a time on one connection: the proxy
    answers each by asking the broker (no topic is created, nothing is piped)."""
    topic = "persistent://public/default/lookup-target"
    client = RawClient(int(url.rsplit(":", 1)[1]))
    try:
        client.handshake()
        start = time.perf_counter()
        for i in range(n):
            frame = client.request(commands.lookup(topic=topic, request_id=i))
            answer = frame.command.lookupTopicResponse
            if answer.response != pb.CommandLookupTopicResponse.Connect:
                raise RuntimeError(f"lookup answered {answer}")
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


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, help="a second proxy, from this src/ tree")
    parser.add_argument(
        "--server-src", type=Path, help="run the standalone and the proxy from this src/ tree"
    )
    args = parser.parse_args()
    if args.server_src is not None:
        # the children only: this process (the clients) keeps the modules it imported
        os.environ["PYTHONPATH"] = str(args.server_src.resolve())
    base = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    workloads: dict[str, tuple[Callable[[str], float], int]] = {
        "publish msg/s": (lambda u: publish(u, args.messages, args.size), args.messages),
        "open producers/s": (lambda u: open_producers(u, args.topics), args.topics),
        "lookups/s": (lambda u: lookups(u, args.lookups), args.lookups),
    }
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)  # (after the servers stop)
        broker = stack.enter_context(started(StandaloneProc(base / "data")))
        proxy_args = [
            "--broker-service-url", broker.service_url,
            "--broker-web-service-url", broker.http_url,
        ]  # fmt: skip
        proxies = {"proxy": stack.enter_context(started(ProxyProc(base, args=proxy_args)))}
        if args.baseline_src is not None:
            env = {"PYTHONPATH": str(args.baseline_src.resolve())}
            baseline = ProxyProc(base, args=proxy_args, env=env)
            proxies["baseline"] = stack.enter_context(started(baseline))
        sides = {"direct": broker.service_url} | {k: p.service_url for k, p in proxies.items()}
        pids = {k: p.proc.pid for k, p in proxies.items()}
        publish(broker.service_url, args.messages // 10, args.size)  # warm-up
        _client(broker.service_url).create_producer(
            "persistent://public/default/lookup-target"
        ).close()
        for url in sides.values():
            open_producers(url, 10)
            lookups(url, 100)
        rates: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        order = list(sides)
        for r in range(1, args.rounds + 1):
            turn = order[(r - 1) % len(order) :] + order[: (r - 1) % len(order)]
            for name, (run, ops) in workloads.items():
                for side in turn:
                    before = cpu_seconds(pids.get(side))
                    rate = run(sides[side])
                    used = cpu_seconds(pids.get(side)) - before
                    rates.setdefault((name, side), []).append(rate)
                    cpu.setdefault((name, side), []).append(used / ops * 1e6)
                    load = os.getloadavg()[0]
                    extra = f", proxy CPU {used / ops * 1e6:,.1f} us/op" if side in pids else ""
                    print(f"round {r}, {side}, {name}: {rate:,.0f}{extra} (load {load:.1f})")
        for name in workloads:
            direct = statistics.median(rates[(name, "direct")])
            line = f"{name}: direct median {direct:,.0f}"
            for side in proxies:
                median = statistics.median(rates[(name, side)])
                us = statistics.median(cpu[(name, side)])
                line += f"; {side} median {median:,.0f} ({side}/direct {median / direct:.2f}"
                line += f", CPU {us:,.1f} us/op)"
            print(line)
            if "baseline" in proxies:
                paired = [
                    a / b
                    for a, b in zip(rates[(name, "proxy")], rates[(name, "baseline")], strict=True)
                ]
                print(
                    f"{name}: proxy/baseline per round "
                    + " ".join(f"{x:.2f}" for x in paired)
                    + f", median {statistics.median(paired):.3f}"
                )


if __name__ == "__main__":
    main()
