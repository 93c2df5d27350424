"""Writes tests/integration/metrics/pulsar-4.0.7.metrics: the metric names, label names and
types a real Prometheus scrapes from an Apache Pulsar standalone under the parity workload
(tests/support/metrics_parity.py). ``make metrics-pulsar`` runs it; the parity test
(tests/integration/metrics/test_parity.py) holds Magnetar to that file.

Pulsar comes from scripts/bench/install_pulsar.sh (cached under .cache/), Prometheus from
Debian's package (scripts/setup.sh). Everything listens on 127.0.0.1 and is stopped by pid.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import metrics_parity  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="pulsar-metrics-") as tmp:
        captured = metrics_parity.pulsar_capture(Path(tmp))
    header = (
        "# Apache Pulsar 4.0.7 standalone under the parity workload, as Prometheus scraped it:\n"
        "# sample name{label names} family type. Written by `make metrics-pulsar`\n"
        "# (scripts/capture_pulsar_metrics.py); do not edit.\n"
    )
    metrics_parity.EXPECTED.write_text(header + metrics_parity.dump(captured))
    names = {s.name for s in captured}
    print(
        f"{metrics_parity.EXPECTED.relative_to(ROOT)}: {len(captured)} series, {len(names)} names"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
