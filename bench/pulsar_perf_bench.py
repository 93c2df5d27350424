"""pulsar-perf (Apache Pulsar's load generator, from Maven Central) against Magnetar: produce
and consume 1 KiB messages together for 60 s on a fresh ``magnetar standalone`` and report
what pulsar-perf measured; exit status 1 when it saw any error (send failures, exceptions,
ack failures) or received fewer messages than were sent. ``--system pulsar`` runs the same
against Apache Pulsar standalone. A benchmark: it prints figures, it is not a test.

.venv/bin/python bench/pulsar_perf_bench.py [--seconds 60] [--rate N] [--system magnetar|pulsar]
.venv/bin/python bench/pulsar_perf_bench.py --parse .cache/pulsar-perf-XXXX  # earlier logs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).with_name("peers")))

import perf
import systems


def report(run: perf.PerfRun, title: str, size: int) -> None:
    print(title)
    print(
        f"  produced {run.sent:,} in {run.window_s:.1f} s: {run.send_rate:,.0f} msg/s "
        f"({run.send_rate * size / 1e6:.1f} MB/s); publish latency ms {run.publish_latency_ms}"
    )
    drained = "never" if run.drained_s is None else f"by {run.drained_s:.0f} s after"
    print(
        f"  consumed {run.received:,}: {run.receive_rate:,.0f} msg/s while the producer ran, "
        f"had everything {drained} the producer's end (it reports every 10 s); end-to-end "
        f"latency ms {run.e2e_latency_ms}"
    )
    print(
        f"  errors: send failure rate max {run.failure_rate_max}/s, ack failures "
        f"{run.ack_failures}, error lines {len(run.problems)} {run.problems[:3]}; "
        f"WARN lines {run.warnings}"
    )
    short = run.sent - run.received
    print(
        "  result:",
        "OK, no errors, every message received"
        if run.ok
        else f"ERRORS{f' ({short:,} messages not received)' if short > 0 else ''}",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=10_000_000, help="produce rate (msg/s)")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--system", choices=["magnetar", "pulsar"], default="magnetar")
    ap.add_argument("--parse", metavar="DIR", help="only summarise the logs of an earlier run")
    args = ap.parse_args()
    if args.parse:
        d = Path(args.parse)
        run = perf.parse(
            (d / "perf-produce.log").read_text(errors="replace"),
            (d / "perf-consume.log").read_text(errors="replace"),
        )
        report(run, f"pulsar-perf logs in {d}", args.size)
        return 0 if run.ok else 1
    workdir = Path(tempfile.mkdtemp(prefix="pulsar-perf-", dir=systems.ROOT / ".cache"))
    system = systems.ALL[args.system](workdir)
    system.install()
    url = system.start()
    load = os.getloadavg()[0]
    try:
        run = perf.run_pair(
            url, "persistent://public/default/pulsar-perf", seconds=args.seconds,
            workdir=workdir, size=args.size, rate=args.rate,
        )  # fmt: skip
    finally:
        system.stop()
    title = (
        f"pulsar-perf against {system.name}, {args.size} B, {args.seconds:.0f} s, rate "
        f"{args.rate:,}/s (1-min load average {load:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; logs in {workdir})"
    )
    report(run, title, args.size)
    (workdir / "summary.json").write_text(json.dumps(perf.summary(run), indent=1))
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
