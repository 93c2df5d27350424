"""Geo-replication throughput and lag at a steady publish rate, Magnetar beside Apache Pulsar
(issue 25, acceptance 6).

For each system, two standalones on this machine (clusters ``a`` and ``b``, each with its own
metadata store and bookie, both from the harness's settings in bench/peers/), joined the same
way on both systems through the admin API: each has the other's cluster record, a tenant
allowed on both and a namespace replicated to both. Then, at each rate:

* a producer on ``a`` (bench/peers/loadgen.py ``paced_publish``, its own process: 1 KiB
  messages, batching 1 ms) publishes at the rate for ``--seconds``, each payload stamped with
  its send time;
* a consumer on ``b`` (this process, the official client) receives every message; the lag of
  a message is its arrival on ``b`` minus its send time on ``a`` (publish, replication and
  delivery on ``b``);
* ``a``'s topic stats are sampled every 0.5 s: the replicator's ``replicationBacklog``.

Printed per system and rate: the rate published on ``a`` and received on ``b``, the lag p50 /
p99 / max, the largest replication backlog seen, and how long ``b`` took to get the last
message after the producer stopped. Figures only: nothing passes or fails. The machine is
shared with other work: compare the two systems within one run, not runs with each other.

    .venv/bin/python bench/replication_bench.py [--rates 1000,5000] [--seconds 20]
        [--systems magnetar,pulsar] [--record]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import pulsar
from loadgen import _STAMP, bucket, percentile
from systems import MagnetarStandalone, PulsarStandalone, StartError, System
from workloads import _collect, _spawn

TENANT, NS = "geo", "bench"
SIZE = 1024


class MagnetarCluster(MagnetarStandalone):
    def __init__(self, workdir: Path, cluster: str) -> None:
        super().__init__(workdir)
        self.cluster = cluster

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, env, cwd = super().argv()
        return [*argv, "--cluster-name", self.cluster], env, cwd


class PulsarCluster(PulsarStandalone):
    def __init__(self, workdir: Path, cluster: str) -> None:
        super().__init__(workdir)
        self.cluster = cluster
        self.extra_conf = {"clusterName": self.cluster}  # (the last value of a key wins)


SYSTEMS: dict[str, type[MagnetarCluster] | type[PulsarCluster]] = {
    "magnetar": MagnetarCluster,
    "pulsar": PulsarCluster,
}


def _admin(system: System, method: str, path: str, body: object = None) -> Any:
    port = system.http_port  # type: ignore[attr-defined]
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/admin/v2{path}", data=data, method=method
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def _join(a: System, b: System) -> None:
    """The same admin calls on both clusters (as docs/geo-replication.md shows them)."""
    for here, there, name in ((a, b, "b"), (b, a, "a")):
        _admin(here, "PUT", f"/clusters/{name}", {
            "serviceUrl": f"http://127.0.0.1:{there.http_port}",  # type: ignore[attr-defined]
            "brokerServiceUrl": there.url,
        })  # fmt: skip
        _admin(here, "PUT", f"/tenants/{TENANT}", {"allowedClusters": ["a", "b"], "adminRoles": []})
        _admin(here, "PUT", f"/namespaces/{TENANT}/{NS}")
        _admin(here, "POST", f"/namespaces/{TENANT}/{NS}/replication", ["a", "b"])


def _backlog(system: System, topic: str) -> int | None:
    try:
        stats = _admin(system, "GET", f"/persistent/{topic.removeprefix('persistent://')}/stats")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    repl = (stats or {}).get("replication", {}).get("b")
    return int(repl["replicationBacklog"]) if repl else None


def _step(a: System, b: System, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    client = pulsar.Client(
        b.url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    consumer = client.subscribe(
        topic, "bench", receiver_queue_size=1000, initial_position=pulsar.InitialPosition.Earliest
    )
    hist: dict[int, int] = {}
    received = [0]
    last_at = [0.0]
    published: list[int] = []
    done = threading.Event()

    def consume() -> None:
        while not done.is_set():
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                if published and received[0] >= published[0]:
                    break
                continue
            now = time.time()
            (sent,) = _STAMP.unpack_from(msg.data())
            k = bucket((now - sent) * 1000.0)
            hist[k] = hist.get(k, 0) + 1
            received[0] += 1
            last_at[0] = now
            if received[0] % 100 == 0:
                consumer.acknowledge_cumulative(msg)
            if published and received[0] >= published[0]:
                consumer.acknowledge_cumulative(msg)
                break

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    backlogs: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.5):
            value = _backlog(a, topic)
            if value is not None:
                backlogs.append(value)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cfg = {
        "role": "paced_publish", "url": a.url, "topic": topic, "rate": rate,
        "seconds": seconds, "size": SIZE, "batching": True, "batch_delay_ms": 1,
    }  # fmt: skip
    result = _collect(_spawn(cfg), seconds + 120)
    stopped_at = time.time()
    published.append(int(result["messages"]))
    thread.join(timeout=120)
    done.set()
    sampling.set()
    sampler.join()
    consumer.close()
    client.close()
    return {
        "rate": rate,
        "published": published[0],
        "publish_rate": result["rate"],
        "received": received[0],
        "receive_rate": received[0] / (result["seconds"] + max(0.0, last_at[0] - stopped_at)),
        "lag_p50_ms": percentile(hist, 0.5),
        "lag_p99_ms": percentile(hist, 0.99),
        "lag_max_ms": percentile(hist, 1.0),
        "max_backlog": max(backlogs, default=0),
        "drain_s": max(0.0, last_at[0] - stopped_at),
    }


def run_system(key: str, workdir: Path, rates: list[int], seconds: float) -> dict[str, Any]:
    cls = SYSTEMS[key]
    a, b = cls(workdir / "a", "a"), cls(workdir / "b", "b")
    for s in (a, b):
        s.workdir.mkdir(parents=True, exist_ok=True)
        s.log_path = s.workdir / f"{s.key}.log"
    out: dict[str, Any] = {"system": a.name, "steps": []}
    try:
        a.install()
        b.install()
        out["version"] = a.version
        a.start()
        b.start()
        _join(a, b)
        for i, rate in enumerate(rates):
            topic = f"persistent://{TENANT}/{NS}/r{i}-{rate}"
            step = _step(a, b, topic, rate, seconds)
            out["steps"].append(step)
            print(json.dumps({"system": key, **step}), flush=True)
    except (StartError, urllib.error.URLError, OSError) as err:
        out["error"] = str(err)
        print(f"{key}: {err}", file=sys.stderr)
    finally:
        a.stop()
        b.stop()
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def table(results: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"1 KiB messages, batching 1 ms, {seconds:.0f} s per rate, producer on a, consumer on b.",
        "",
        "| system | target msg/s | published msg/s | received on b msg/s | lag p50 ms | "
        "lag p99 ms | lag max ms | max replication backlog | b's last message after stop s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['system']} | error: {r['error'].splitlines()[0]} |||||||| ")
        lines.extend(
            f"| {r['system']} {r.get('version', '')} | {s['rate']} | "
            f"{s['publish_rate']:.0f} | {s['receive_rate']:.0f} "
            f"({s['received']}/{s['published']}) | {_ms(s['lag_p50_ms'])} | "
            f"{_ms(s['lag_p99_ms'])} | {_ms(s['lag_max_ms'])} | {s['max_backlog']} | "
            f"{s['drain_s']:.1f} |"
            for s in r["steps"]
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,5000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--systems", default="magnetar,pulsar")
    parser.add_argument("--record", action="store_true", help="print the docs table")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        results = [
            run_system(key, Path(tmp) / key, rates, args.seconds) for key in args.systems.split(",")
        ]
    print(table(results, args.seconds))


if __name__ == "__main__":
    main()
