"""The example pipeline (src/magnetar/spark/examples/payments.py, run on Kubernetes from
spark-on-k8s/) in Spark local mode against a real standalone: payments on a partitioned
topic -> per-merchant totals per minute (event-time windows, watermark) -> a results topic,
read back with the official client by the host-side client (payments_client.py) and checked
against the sums of what was produced; then a second run from the checkpoint, where a
payment behind the watermark is dropped and the next minutes are written."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulsar

from magnetar.spark.examples.payments import totals_query
from magnetar.spark.examples.payments_client import (
    as_totals,
    closing,
    expected_totals,
    produce,
    read_results,
    sample,
)
from tests.integration.spark.conftest import create_topic, make_namespace
from tests.support.standalone import StandaloneProc

NS = "public/spark-payments"
BASE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _run(spark: Any, standalone: StandaloneProc, source: str, sink: str, checkpoint: Path) -> None:
    query = totals_query(
        spark,
        service_url=standalone.service_url,
        admin_url=standalone.http_url,
        source=source,
        sink=sink,
        checkpoint=str(checkpoint),
        watermark="2 minutes",
    )
    assert query.awaitTermination(300), "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()


def test_payments_to_per_merchant_minute_totals(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, tmp_path: Path
) -> None:
    make_namespace(standalone, NS)
    source, sink = f"persistent://{NS}/payments", f"persistent://{NS}/merchant-totals"
    create_topic(standalone, f"{NS}/payments", 2)
    create_topic(standalone, f"{NS}/merchant-totals")
    checkpoint = tmp_path / "checkpoint"

    # run 1: 600 payments over minutes 0-2, then one at minute 10: the watermark (10 - 2)
    # passes minutes 0-2, whose windows are complete and written; minute 10 stays open
    rows = sample(600, seed=16, start=BASE)
    assert produce(client, source, rows) == 600
    produce(client, source, [closing(BASE + timedelta(minutes=10))])
    _run(spark, standalone, source, sink, checkpoint)
    results = read_results(client, sink)
    got = as_totals(results)
    assert len(got) == len(results), "each (merchant, minute) is written once"
    assert got == expected_totals(rows)
    assert sum(n for _, n in got.values()) == 600
    for r in results:
        start = datetime.fromisoformat(r["windowStart"].replace("Z", "+00:00"))
        assert r["windowEnd"] == (start + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # the host-side client's own check (what the Kubernetes job's user runs)
    check = subprocess.run(
        [sys.executable, "-m", "magnetar.spark.examples.payments_client", "totals",
         "--service-url", standalone.service_url, "--topic", sink, "--expect",
         "--count", "600", "--seed", "16", "--start", "2026-01-01T12:00:00Z"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert f"{len(got)} totals match the 600 payments produced" in check.stdout

    # run 2 from the checkpoint: a payment of minute 0 is now behind the watermark and
    # dropped; new payments of minutes 10-11 join the open window; minute 20 closes them
    late = {**closing(BASE + timedelta(seconds=30), "m1"), "amountCents": 99_999}
    more = sample(100, seed=17, start=BASE + timedelta(minutes=10), minutes=2)
    produce(client, source, [late, *more])
    produce(client, source, [closing(BASE + timedelta(minutes=20))])
    _run(spark, standalone, source, sink, checkpoint)
    second = read_results(client, sink)[len(results) :]
    assert len(as_totals(second)) == len(second)
    assert as_totals(second) == expected_totals([closing(BASE + timedelta(minutes=10)), *more])
