"""Load-generator processes for the side-by-side benchmarks (issue 7).

One role per process, all through the official ``pulsar-client``::

    python bench/peers/loadgen.py '{"role": "publish", "url": ..., ...}'

The process prints one JSON object (its figures) as the last line of stdout. Roles that run
together (fan-out producer and consumers, catch-up producer and drain) start at the same
wall-clock instant (``start_at``). Every result carries the process's CPU use (``cpu``:
user + system seconds over wall seconds) so the report can say when the client, not the
broker, was the limit.
"""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pulsar

# Latency histograms: log buckets 1% wide, so percentiles merge across processes exactly
# and a result stays small whatever the message count.
_LOG_STEP = math.log(1.01)
_STAMP = struct.Struct("<d")


def bucket(ms: float) -> int:
    return int(math.log(max(ms, 0.001) * 1000.0) / _LOG_STEP)


def bucket_ms(b: int) -> float:
    return math.exp((b + 0.5) * _LOG_STEP) / 1000.0


def percentile(hist: dict[int, int], p: float) -> float | None:
    total = sum(hist.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(total * p))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bucket_ms(b)
    return bucket_ms(max(hist))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _client(cfg: dict[str, Any]) -> pulsar.Client:
    secured: dict[str, Any] = {}
    if cfg.get("tls_trust_certs"):
        secured["tls_trust_certs_file_path"] = cfg["tls_trust_certs"]
        secured["tls_validate_hostname"] = True
    if cfg.get("token"):
        secured["authentication"] = pulsar.AuthenticationToken(cfg["token"])
    return pulsar.Client(
        cfg["url"],
        **secured,
        operation_timeout_seconds=60,
        io_threads=1,
        message_listener_threads=1,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _wait_start(cfg: dict[str, Any]) -> None:
    start_at = cfg.get("start_at")
    if start_at:
        delay = float(start_at) - time.time()
        if delay > 0:
            time.sleep(delay)


def _payload(size: int) -> bytes:
    return os.urandom(size)


# --- roles -------------------------------------------------------------------------------


def publish(cfg: dict[str, Any]) -> dict[str, Any]:
    """Max publish rate for ``seconds`` (or until ``bytes`` are sent): async sends, no
    per-message Python callback (one would make the client's callback thread the limit)."""
    client = _client(cfg)
    batching = bool(cfg.get("batching", True))
    producer = client.create_producer(
        cfg["topic"],
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,
        batching_max_publish_delay_ms=int(cfg.get("batch_delay_ms", 1)),
        max_pending_messages=int(cfg.get("outstanding", 10_000)),
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    size = int(cfg["size"])
    payload = _payload(size)
    seconds = float(cfg.get("seconds", 0) or 0)
    limit = int(cfg.get("messages", 0) or 0)
    _wait_start(cfg)
    cpu0 = _cpu()
    n = 0
    start = time.perf_counter()
    end = start + seconds if seconds else math.inf
    chunk = 200
    while True:
        if limit and n >= limit:
            break
        if time.perf_counter() >= end:
            break
        k = min(chunk, limit - n) if limit else chunk
        for _ in range(k):
            producer.send_async(payload, None)
        n += k
    producer.flush()
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    producer.close()
    client.close()
    return {"messages": n, "seconds": elapsed, "bytes": n * size, "cpu": cpu / elapsed}


def consume(cfg: dict[str, Any]) -> dict[str, Any]:
    """Drain ``messages`` from an existing subscription (from its start); cumulative acks."""
    client = _client(cfg)
    consumer = client.subscribe(
        cfg["topic"],
        cfg["subscription"],
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=int(cfg.get("receiver_queue", 5000)),
    )
    want = int(cfg["messages"])
    timeout_s = float(cfg.get("timeout", 600))
    _wait_start(cfg)
    cpu0 = _cpu()
    got = 0
    nbytes = 0
    start = time.perf_counter()
    first: float | None = None
    deadline = start + timeout_s
    msg = None
    while got < want and time.perf_counter() < deadline:
        try:
            msg = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            continue
        if first is None:
            first = time.perf_counter()
        got += 1
        nbytes += len(msg.data())
        if got % 1000 == 0:
            consumer.acknowledge_cumulative(msg)
    elapsed = time.perf_counter() - start
    if msg is not None:
        consumer.acknowledge_cumulative(msg)
    cpu = _cpu() - cpu0
    consumer.close()
    client.close()
    return {
        "messages": got,
        "wanted": want,
        "bytes": nbytes,
        "seconds": elapsed,
        "first_message_s": (first - start) if first else None,
        "cpu": cpu / elapsed,
    }


def sync_latency(cfg: dict[str, Any]) -> dict[str, Any]:
    """One outstanding message at a time (``send``), batching off: latency histogram."""
    client = _client(cfg)
    producer = client.create_producer(cfg["topic"], batching_enabled=False)
    payload = _payload(int(cfg["size"]))
    for _ in range(int(cfg.get("warmup", 200))):
        producer.send(payload)
    hist: Counter[int] = Counter()
    count = int(cfg["count"])
    cpu0 = _cpu()
    start = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        producer.send(payload)
        hist[bucket((time.perf_counter() - t) * 1000.0)] += 1
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    producer.close()
    client.close()
    return {"messages": count, "seconds": elapsed, "hist": dict(hist), "cpu": cpu / elapsed}


def paced_publish(cfg: dict[str, Any]) -> dict[str, Any]:
    """Publish at ``rate`` msg/s for ``seconds`` (or until ``stop_file`` appears), each
    payload stamped with its send time (wall clock, for end-to-end latency in other
    processes); with ``measure`` the publish latency of every message is kept (a callback
    per message: fine at the few thousand msg/s this role runs at)."""
    client = _client(cfg)
    producer = client.create_producer(
        cfg["topic"],
        batching_enabled=bool(cfg.get("batching", True)),
        batching_max_messages=1000,
        batching_max_publish_delay_ms=int(cfg.get("batch_delay_ms", 1)),
        max_pending_messages=int(cfg.get("outstanding", 10_000)),
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    size = max(int(cfg["size"]), _STAMP.size)
    filler = _payload(size - _STAMP.size)
    rate = float(cfg["rate"])
    seconds = float(cfg.get("seconds", 0) or 0)
    stop_file = cfg.get("stop_file")
    measure = bool(cfg.get("measure", False))
    hist: Counter[int] = Counter()
    lock = threading.Lock()
    failures = [0]

    def on_sent(sent_at: float) -> Callable[[Any, Any], None]:
        def done(res: Any, _msg_id: Any) -> None:
            ms = (time.perf_counter() - sent_at) * 1000.0
            with lock:
                if res == pulsar.Result.Ok:
                    hist[bucket(ms)] += 1
                else:
                    failures[0] += 1

        return done

    _wait_start(cfg)
    cpu0 = _cpu()
    start = time.perf_counter()
    n = 0
    last_check = start
    while True:
        now = time.perf_counter()
        elapsed = now - start
        if seconds and elapsed >= seconds:
            break
        if stop_file and now - last_check > 0.05:
            last_check = now
            if os.path.exists(stop_file):
                break
        due = int(elapsed * rate) + 1
        if n >= due:
            time.sleep(min(0.0005, (n + 1) / rate - elapsed))
            continue
        for _ in range(min(due - n, 1000)):
            body = _STAMP.pack(time.time()) + filler
            if measure:
                producer.send_async(body, on_sent(time.perf_counter()))
            else:
                producer.send_async(body, None)
            n += 1
    producer.flush()
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    producer.close()
    client.close()
    out: dict[str, Any] = {
        "messages": n,
        "seconds": elapsed,
        "rate": n / elapsed,
        "cpu": cpu / elapsed,
        "failures": failures[0],
    }
    if measure:
        out["hist"] = dict(hist)
    return out


def e2e_consume(cfg: dict[str, Any]) -> dict[str, Any]:
    """``consumers`` consumers (threads) on one subscription of ``sub_type``; each message's
    end-to-end latency from the stamp in its payload. Stops when ``messages`` arrived in all
    or ``timeout`` seconds after the start."""
    client = _client(cfg)
    sub_type = {"exclusive": pulsar.ConsumerType.Exclusive, "shared": pulsar.ConsumerType.Shared}[
        cfg["sub_type"]
    ]
    consumers = [
        client.subscribe(
            cfg["topic"],
            cfg["subscription"],
            consumer_type=sub_type,
            receiver_queue_size=1000,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for _ in range(int(cfg.get("consumers", 1)))
    ]
    want = int(cfg["messages"])
    deadline = float(cfg["deadline"])  # wall clock
    hist: Counter[int] = Counter()
    lock = threading.Lock()
    got = [0]
    cumulative = sub_type == pulsar.ConsumerType.Exclusive

    def run(consumer: pulsar.Consumer) -> None:
        local: Counter[int] = Counter()
        n = 0
        msg = None
        while time.time() < deadline:
            with lock:
                if got[0] >= want:
                    break
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            (sent,) = _STAMP.unpack_from(msg.data())
            local[bucket((time.time() - sent) * 1000.0)] += 1
            n += 1
            with lock:
                got[0] += 1
            if not cumulative:
                consumer.acknowledge(msg)
            elif n % 100 == 0:
                consumer.acknowledge_cumulative(msg)
        if msg is not None and cumulative:
            consumer.acknowledge_cumulative(msg)
        with lock:
            hist.update(local)

    cpu0 = _cpu()
    start = time.perf_counter()
    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    for c in consumers:
        c.close()
    client.close()
    return {
        "messages": sum(hist.values()),
        "wanted": want,
        "hist": dict(hist),
        "seconds": elapsed,
        "cpu": cpu / elapsed,
    }


def subscribe_only(cfg: dict[str, Any]) -> dict[str, Any]:
    """Create durable subscriptions (so a backlog is kept), then leave."""
    client = _client(cfg)
    shared = set(cfg.get("shared", []))
    for name in cfg["subscriptions"]:
        # created with the type its consumers will use (pulsar-lite refuses a Shared
        # consumer on a subscription first created Exclusive)
        kind = pulsar.ConsumerType.Shared if name in shared else pulsar.ConsumerType.Exclusive
        client.subscribe(
            cfg["topic"],
            name,
            consumer_type=kind,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
    client.close()
    return {"ok": True}


ROLES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "publish": publish,
    "consume": consume,
    "sync_latency": sync_latency,
    "paced_publish": paced_publish,
    "e2e_consume": e2e_consume,
    "subscribe": subscribe_only,
}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    result = ROLES[cfg["role"]](cfg)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
