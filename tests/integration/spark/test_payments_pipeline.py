"""The example pipeline (src/magnetar/spark/examples/payments.py, run on Kubernetes from
spark-on-k8s/) in Spark local mode against a real standalone: payments on a partitioned
topic -> per-merchant totals per minute (event-time windows, watermark) -> a results topic,
read back by the official client on the host side and checked against totals computed here."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulsar

from magnetar.spark.examples.payments import totals_query
from tests.integration.spark.conftest import create_topic, make_namespace
from tests.support.standalone import StandaloneProc

NS = "public/spark-payments"
BASE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def payments(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` payments of 4 merchants over 3 minutes of event time, shuffled (out of order
    within the watermark's minute)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        when = BASE + timedelta(milliseconds=rng.randrange(0, 180_000))
        out.append(
            {
                "paymentId": f"p{i}",
                "merchant": f"m{rng.randrange(4)}",
                "amountCents": rng.randrange(1, 50_000),
                "eventTime": int(when.timestamp() * 1000),
            }
        )
    return out


def expected_totals(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for p in rows:
        when = datetime.fromtimestamp(p["eventTime"] / 1000, UTC).replace(second=0, microsecond=0)
        t = totals[(p["merchant"], when.strftime("%Y-%m-%dT%H:%M:%SZ"))]
        t[0] += p["amountCents"]
        t[1] += 1
    return {k: (v[0], v[1]) for k, v in totals.items()}


def produce(client: pulsar.Client, topic: str, rows: list[dict[str, Any]]) -> None:
    producer = client.create_producer(topic, batching_enabled=True)
    for p in rows:
        producer.send_async(
            json.dumps(p).encode(),
            None,
            partition_key=p["merchant"],
            event_timestamp=p["eventTime"],
        )
    producer.flush()
    producer.close()


def consume_results(client: pulsar.Client, topic: str) -> list[dict[str, Any]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=10_000)
        result = json.loads(msg.data())
        assert msg.partition_key() == result["merchant"]
        out.append(result)
    reader.close()
    return out


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


def tick(minutes: int) -> dict[str, Any]:
    """A payment ``minutes`` after BASE that moves the watermark past what came before."""
    when = BASE + timedelta(minutes=minutes)
    return {"paymentId": f"tick{minutes}", "merchant": "m0", "amountCents": 1,
            "eventTime": int(when.timestamp() * 1000)}  # fmt: skip


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
    rows = payments(600, seed=16)
    produce(client, source, rows)
    produce(client, source, [tick(10)])
    _run(spark, standalone, source, sink, checkpoint)
    results = consume_results(client, sink)
    got = {(r["merchant"], r["windowStart"]): (r["totalCents"], r["payments"]) for r in results}
    assert len(got) == len(results), "each (merchant, minute) is written once"
    assert got == expected_totals(rows)
    assert sum(n for _, n in got.values()) == 600
    for r in results:
        start = datetime.fromisoformat(r["windowStart"].replace("Z", "+00:00"))
        assert r["windowEnd"] == (start + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    # run 2 from the checkpoint: a payment of minute 0 is now behind the watermark and
    # dropped; new payments of minutes 10-11 join the open window; minute 20 closes them
    late = {"paymentId": "late", "merchant": "m1", "amountCents": 99_999,
            "eventTime": int((BASE + timedelta(seconds=30)).timestamp() * 1000)}  # fmt: skip
    more = [
        {**p, "paymentId": f"n{p['paymentId']}", "eventTime": p["eventTime"] + 600_000}
        for p in payments(100, seed=17)
        if p["eventTime"] < int((BASE + timedelta(minutes=2)).timestamp() * 1000)
    ]
    produce(client, source, [late, *more])
    produce(client, source, [tick(20)])
    _run(spark, standalone, source, sink, checkpoint)
    second = consume_results(client, sink)[len(results) :]
    got2 = {(r["merchant"], r["windowStart"]): (r["totalCents"], r["payments"]) for r in second}
    assert len(got2) == len(second)
    assert got2 == expected_totals([tick(10), *more])
