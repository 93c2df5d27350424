"""pulsar-perf (Apache Pulsar's load generator, from Maven Central) against Magnetar: produce
and consume 1 KiB messages together for 60 s on a fresh ``magnetar standalone`` and report
what pulsar-perf measured; exit status 1 when it saw any error (send failures, exceptions,
ack failures) or received fewer messages than were sent. ``--system pulsar`` runs the same
against Apache Pulsar standalone. A benchmark: it prints figures, it is not a test.

.venv/bin/python bench/pulsar_perf_bench.py [--seconds 60] [--rate N] [--system magnetar|pulsar]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).with_name("peers")))

import perf
import systems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=10_000_000, help="produce rate (msg/s)")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--system", choices=["magnetar", "pulsar"], default="magnetar")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pulsar-perf-", dir=systems.ROOT / ".cache"))
    system = systems.ALL[args.system](workdir)
    system.install()
    url = system.start()
    try:
        run = perf.run_pair(
            url, "persistent://public/default/pulsar-perf", seconds=args.seconds,
            workdir=workdir, size=args.size, rate=args.rate,
        )  # fmt: skip
    finally:
        system.stop()
    print(
        f"pulsar-perf against {system.name}, {args.size} B, {args.seconds:.0f} s "
        f"(load average {os.getloadavg()[0]:.2f}; logs in {workdir})"
    )
    print(
        f"  produced {run.sent:,} at {run.send_rate:,.0f} msg/s "
        f"({run.send_rate * args.size / 1e6:.1f} MB/s); publish latency ms {run.publish_latency_ms}"
    )
    print(
        f"  consumed {run.received:,} at {run.receive_rate:,.0f} msg/s; "
        f"end-to-end latency ms {run.e2e_latency_ms}"
    )
    print(
        f"  errors: send failure rate max {run.failure_rate_max}/s, ack failures "
        f"{run.ack_failures}, error lines {len(run.problems)} {run.problems[:3]}"
    )
    print("  result:", "OK, no errors" if run.ok else "ERRORS")
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
