"""The four workloads of issue 7, driven from the harness process; the load itself runs in
``loadgen.py`` processes (one role each) so that no Python client shares a GIL with another.

Each ``wN`` function takes the broker URL, a unique topic prefix and the run's ``Params`` and
returns a flat dict of figures (the keys ``report.py`` tabulates).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen import percentile
from systems import die_with_parent

LOADGEN = Path(__file__).with_name("loadgen.py")
KIB = 1024

Conn = dict[str, str]
"""How a load generator reaches the system: ``url``, and for a secured system
``tls_trust_certs`` (the CA file, hostname verified) and ``token``
(``systems.System.conn``)."""

ServerCpu = Callable[[], float]
"""The system's CPU seconds so far over all its processes (``systems.System.cpu_seconds``):
a workload that steps its rate reads it around each step."""


@dataclass
class Params:
    warmup_seconds: float = 10.0
    w1_seconds: float = 30.0
    w1_publishers: int = 1
    w2_sync_count: int = 20_000
    w2_seconds: float = 30.0
    w3_step_seconds: float = 10.0
    w3_rates: tuple[int, ...] = (1000, 2000, 4000, 8000, 16000, 32000, 64000)
    w4_backlog_bytes: int = 2 * 1024**3
    w4_rate: int = 5000
    w4_timeout: float = 900.0


class WorkloadError(Exception):
    pass


def _spawn(cfg: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(LOADGEN), json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )


def _collect(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise WorkloadError(f"load generator timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = " | ".join(err.strip().splitlines()[-3:])
        raise WorkloadError(f"load generator failed ({proc.returncode}): {tail}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _run(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    return _collect(_spawn(cfg), timeout)


def _run_all(cfgs: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    procs = [_spawn(c) for c in cfgs]
    results: list[dict[str, Any]] = []
    error: WorkloadError | None = None
    for p in procs:
        try:
            results.append(_collect(p, timeout))
        except WorkloadError as err:
            error = error or err
    if error:
        raise error
    return results


def _merge(hists: list[dict[str, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for k, v in h.items():
            out[int(k)] = out.get(int(k), 0) + int(v)
    return out


# --- warm-up --------------------------------------------------------------------------------


def warmup(conn: Conn, prefix: str, p: Params) -> None:
    """Max-rate publishing to a topic of its own before the first workload, not measured:
    the JVM's JIT (and every system's caches and allocators) start warm, the same for all."""
    if p.warmup_seconds <= 0:
        return
    _run(
        {
            "role": "publish",
            **conn,
            "topic": f"persistent://public/default/{prefix}-warmup",
            "size": KIB,
            "batching": True,
            "batch_delay_ms": 1,
            "seconds": p.warmup_seconds,
        },
        p.warmup_seconds + 120,
    )


# --- workload 1 -----------------------------------------------------------------------------


def w1(conn: Conn, prefix: str, p: Params) -> dict[str, Any]:
    """1 topic, 1 KiB, batching on (1 ms): max publish rate for ``w1_seconds``, then consume
    everything."""
    topic = f"persistent://public/default/{prefix}-w1"
    _run({"role": "subscribe", **conn, "topic": topic, "subscriptions": ["drain"]}, 60)
    start_at = time.time() + 1.5
    pubs = _run_all(
        [
            {
                "role": "publish",
                **conn,
                "topic": topic,
                "size": KIB,
                "batching": True,
                "batch_delay_ms": 1,
                "seconds": p.w1_seconds,
                "start_at": start_at,
            }
            for _ in range(p.w1_publishers)
        ],
        p.w1_seconds + 120,
    )
    n = sum(r["messages"] for r in pubs)
    secs = max(r["seconds"] for r in pubs)
    con = _run(
        {
            "role": "consume",
            **conn,
            "topic": topic,
            "subscription": "drain",
            "messages": n,
            "timeout": max(120.0, p.w1_seconds * 10),
        },
        max(180.0, p.w1_seconds * 10 + 60),
    )
    out = {
        "publish_msgs": n / secs,
        "publish_mbs": n * KIB / secs / 1e6,
        "consume_msgs": con["messages"] / con["seconds"],
        "published": n,
        "consumed": con["messages"],
        "server_msgs": n,
        "publisher_cpu": max(r["cpu"] for r in pubs),
        "consumer_cpu": con["cpu"],
    }
    if con["messages"] < n:
        out["note"] = f"consumed {con['messages']} of {n} within the timeout"
    return out


# --- workload 2 -----------------------------------------------------------------------------


def w2(conn: Conn, prefix: str, p: Params) -> dict[str, Any]:
    """100 B, batching off: single-outstanding sync send latency; max rate with 1,000
    outstanding."""
    lat = _run(
        {
            "role": "sync_latency",
            **conn,
            "topic": f"persistent://public/default/{prefix}-w2-sync",
            "size": 100,
            "count": p.w2_sync_count,
        },
        p.w2_sync_count * 0.1 + 120,
    )
    hist = _merge([lat["hist"]])
    rate = _run(
        {
            "role": "publish",
            **conn,
            "topic": f"persistent://public/default/{prefix}-w2-rate",
            "size": 100,
            "batching": False,
            "outstanding": 1000,
            "seconds": p.w2_seconds,
        },
        p.w2_seconds + 120,
    )
    return {
        "sync_p50_ms": percentile(hist, 0.50),
        "sync_p99_ms": percentile(hist, 0.99),
        "sync_p999_ms": percentile(hist, 0.999),
        "sync_count": lat["messages"],
        "outstanding_msgs": rate["messages"] / rate["seconds"],
        "outstanding_cpu": rate["cpu"],
        "server_msgs": lat["messages"] + rate["messages"],
    }


# --- workload 3 -----------------------------------------------------------------------------

W3_SIZE = KIB
W3_EXCLUSIVE = 4
W3_SHARED_CONSUMERS = 4
W3_MAX_P99_MS = 1000.0


def _w3_step(
    conn: Conn, topic: str, rate: int, seconds: float, cpu: ServerCpu | None
) -> dict[str, Any]:
    n_expected = int(rate * seconds)
    start_at = time.time() + 1.5
    grace = 5.0
    deadline = start_at + seconds + grace
    cfgs: list[dict[str, Any]] = [
        {
            "role": "e2e_consume",
            **conn,
            "topic": topic,
            "subscription": f"ex{i}",
            "sub_type": "exclusive",
            "consumers": 1,
            "messages": n_expected,
            "deadline": deadline,
        }
        for i in range(W3_EXCLUSIVE)
    ]
    cfgs.append(
        {
            "role": "e2e_consume",
            **conn,
            "topic": topic,
            "subscription": "shared",
            "sub_type": "shared",
            "consumers": W3_SHARED_CONSUMERS,
            "messages": n_expected,
            "deadline": deadline,
        }
    )
    cfgs.append(
        {
            "role": "paced_publish",
            **conn,
            "topic": topic,
            "size": W3_SIZE,
            "batching": True,
            "batch_delay_ms": 1,
            "rate": rate,
            "seconds": seconds,
            "start_at": start_at,
        }
    )
    cpu0 = cpu() if cpu else 0.0
    results = _run_all(cfgs, seconds + grace + 60)
    cpu_s = cpu() - cpu0 if cpu else None
    prod = results[-1]
    subs = results[:-1]
    hist = _merge([r["hist"] for r in subs])
    sent = prod["messages"]
    complete = all(r["messages"] >= sent for r in subs)
    kept_rate = prod["rate"] >= 0.95 * rate
    p99 = percentile(hist, 0.99)
    # Delivering everything eventually is not keeping up: the backlog must stay small too.
    bounded = p99 is not None and p99 <= W3_MAX_P99_MS
    return {
        "rate": rate,
        "achieved": prod["rate"],
        "sent": sent,
        "received": [r["messages"] for r in subs],
        "p50_ms": percentile(hist, 0.50),
        "p99_ms": p99,
        "ok": complete and kept_rate and bounded,
        "producer_cpu": prod["cpu"],
        "max_consumer_cpu": max(r["cpu"] for r in subs),
        # The server's CPU over the step (its consumers' catch-up included) per message
        # published in it, so that systems can be compared at one rate.
        "server_cpu_us": cpu_s / sent * 1e6 if cpu_s is not None and sent else None,
    }


def _why(step: dict[str, Any]) -> str:
    reasons = []
    if min(step["received"]) < step["sent"]:
        reasons.append(f"{min(step['received']):,} of {step['sent']:,} delivered in time")
    if step["p99_ms"] is None or step["p99_ms"] > W3_MAX_P99_MS:
        p99 = step["p99_ms"]
        reasons.append(f"e2e p99 {p99:,.0f} ms" if p99 is not None else "no latencies")
    if step["achieved"] < 0.95 * step["rate"]:
        reasons.append(f"producer reached {step['achieved']:,.0f} msg/s")
    return ", ".join(reasons) or "?"


def w3(conn: Conn, prefix: str, p: Params, cpu: ServerCpu | None = None) -> dict[str, Any]:
    """Fan-out: 1 producer (1 KiB, batching 1 ms), 4 exclusive subscriptions and 1 shared
    subscription with 4 consumers. The rate steps up a ladder; the sustained rate is the
    highest step every subscription kept up with (all messages delivered within 5 s of the
    producer's end, end-to-end p99 <= 1 s, producer at >= 95% of the target; a failed step
    is tried twice); e2e p99 is at that step. With ``cpu``, each step also records the
    server's CPU per message published in it."""
    best: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = []
    for i, rate in enumerate(p.w3_rates):
        # A step that fails is tried once more on a fresh topic: one stall on a shared
        # machine should not end the ladder.
        for attempt in ("a", "b"):
            topic = f"persistent://public/default/{prefix}-w3-{i}{attempt}"
            _run(
                {
                    "role": "subscribe",
                    **conn,
                    "topic": topic,
                    "subscriptions": [f"ex{j}" for j in range(W3_EXCLUSIVE)] + ["shared"],
                    "shared": ["shared"],
                },
                60,
            )
            step = _w3_step(conn, topic, rate, p.w3_step_seconds, cpu)
            steps.append(step)
            if step["ok"]:
                break
        if not step["ok"]:
            break
        best = step
    last = steps[-1]
    return {
        "sustained_msgs": best["rate"] if best else 0,
        "server_msgs": sum(s["sent"] for s in steps),
        "e2e_p50_ms": best["p50_ms"] if best else None,
        "e2e_p99_ms": best["p99_ms"] if best else None,
        "ladder": [dict(s) for s in steps],  # every figure of each step
        "limit": (
            "ladder top reached"
            if last["ok"]
            else f"fell behind at {last['rate']:,} msg/s ({_why(last)})"
        ),
    }


# --- workload 4 -----------------------------------------------------------------------------


def w4(conn: Conn, prefix: str, p: Params) -> dict[str, Any]:
    """Catch-up: build a backlog of ``w4_backlog_bytes`` (1 KiB messages, batching), then read
    it from the earliest position while producing ``w4_rate`` msg/s: drain MB/s and the
    publish p99 during the drain."""
    topic = f"persistent://public/default/{prefix}-w4"
    _run({"role": "subscribe", **conn, "topic": topic, "subscriptions": ["catchup"]}, 60)
    backlog_msgs = p.w4_backlog_bytes // KIB
    t0 = time.monotonic()
    build = _run(
        {
            "role": "publish",
            **conn,
            "topic": topic,
            "size": KIB,
            "batching": True,
            "batch_delay_ms": 1,
            "messages": backlog_msgs,
        },
        p.w4_timeout,
    )
    build_s = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="w4-") as tmp:
        stop_file = str(Path(tmp) / "stop")
        start_at = time.time() + 1.5
        producer = _spawn(
            {
                "role": "paced_publish",
                **conn,
                "topic": topic,
                "size": KIB,
                "batching": True,
                "batch_delay_ms": 1,
                "rate": p.w4_rate,
                "stop_file": stop_file,
                "measure": True,
                "start_at": start_at,
            }
        )
        try:
            drain = _run(
                {
                    "role": "consume",
                    **conn,
                    "topic": topic,
                    "subscription": "catchup",
                    "messages": backlog_msgs,
                    "timeout": p.w4_timeout,
                    "start_at": start_at,
                },
                p.w4_timeout + 60,
            )
        finally:
            Path(stop_file).touch()
        prod = _collect(producer, 120)
    hist = _merge([prod["hist"]])
    out: dict[str, Any] = {
        "drain_mbs": drain["bytes"] / drain["seconds"] / 1e6,
        "drain_msgs": drain["messages"] / drain["seconds"],
        "publish_p50_ms": percentile(hist, 0.50),
        "publish_p99_ms": percentile(hist, 0.99),
        "publish_rate": prod["rate"],
        "backlog_mb": build["bytes"] / 1e6,
        "build_mbs": build["bytes"] / build_s / 1e6,
        "drained": drain["messages"],
        "consumer_cpu": drain["cpu"],
        "server_msgs": build["messages"] + prod["messages"],
    }
    if drain["messages"] < backlog_msgs:
        out["note"] = f"drained {drain['messages']} of {backlog_msgs} in {p.w4_timeout:.0f} s"
    return out


from perf import w1p  # noqa: E402 (perf reads WorkloadError from here)

WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "w1": w1,
    "w2": w2,
    "w3": w3,
    "w4": w4,
    "w1p": w1p,
}

STEPPED = {"w3"}
"""The workloads that step their rate and take the server's CPU clock (``ServerCpu``)."""
