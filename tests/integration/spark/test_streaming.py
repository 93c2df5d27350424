"""Streaming reads of the ``magnetar`` data source in Spark local mode against a real
standalone: a checkpointed query stopped and restarted reads each message exactly once, the
durable subscription shows the lag, maxRecordsPerTrigger bounds each micro-batch, a
topicsPattern query picks up a topic created later, and failOnDataLoss does what
docs/spark.md says when retention removed what the checkpoint points at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.integration.spark.conftest import (
    LEDGER_ENTRIES,
    admin_call,
    create_topic,
    make_namespace,
    source_options,
)
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

NS = "public/spark-stream"


def _send(client: pulsar.Client, topic: str, values: list[str]) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for v in values:
        producer.send(v.encode(), partition_key=v)
    producer.close()


def _run_available_now(spark: Any, options: dict[str, str], out: Path, checkpoint: Path) -> Any:
    query = (
        spark.readStream.format("magnetar")
        .options(**options)
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "topic", "partition")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return query


def _backlog(standalone: StandaloneProc, topic: str, sub: str) -> int:
    total = 0
    for p in range(2):
        stats = admin_call(
            standalone.http_url, "GET", f"/persistent/{topic.split('://')[1]}-partition-{p}/stats"
        )
        total += int(stats["subscriptions"][sub]["msgBacklog"])
    return total


def test_checkpointed_restart_reads_each_message_once_and_the_cursor_shows_lag(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, tmp_path: Path
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/events"
    create_topic(standalone, f"{NS}/events", 2)
    _send(client, topic, [f"a{i}" for i in range(30)])
    options = source_options(
        standalone, topic=topic, startingOffsets="earliest", subscriptionName="spark-events"
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    _run_available_now(spark, options, out, checkpoint)
    assert sorted(r.value for r in spark.read.parquet(str(out)).collect()) == sorted(
        f"a{i}" for i in range(30)
    )
    assert _backlog(standalone, topic, "spark-events") == 0  # the cursor followed the query

    _send(client, topic, [f"b{i}" for i in range(20)])
    assert _backlog(standalone, topic, "spark-events") == 20  # lag, visible in topic stats

    _run_available_now(spark, options, out, checkpoint)
    values = [r.value for r in spark.read.parquet(str(out)).collect()]
    assert sorted(values) == sorted([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(20)])
    assert len(values) == len(set(values)) == 50  # each exactly once across the two runs
    assert _backlog(standalone, topic, "spark-events") == 0


def test_max_records_per_trigger_bounds_each_micro_batch(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, tmp_path: Path
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/bounded"
    create_topic(standalone, f"{NS}/bounded", 2)
    _send(client, topic, [f"m{i}" for i in range(25)])
    options = source_options(
        standalone, topic=topic, startingOffsets="earliest", maxRecordsPerTrigger="7"
    )
    query = _run_available_now(spark, options, tmp_path / "out", tmp_path / "ckpt")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 25
    assert max(sizes) <= 7 and len(sizes) >= 4, sizes
    values = [r.value for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted(f"m{i}" for i in range(25))


def test_topics_pattern_picks_up_a_topic_created_later(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, tmp_path: Path
) -> None:
    make_namespace(standalone, "public/spark-pattern")
    _send(client, "persistent://public/spark-pattern/feed-a", ["a0", "a1"])
    options = source_options(
        standalone, topicsPattern="persistent://public/spark-pattern/feed-.*",
        startingOffsets="earliest",
    )  # fmt: skip
    query = (
        spark.readStream.format("magnetar")
        .options(**options)
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "topic")
        .writeStream.format("memory")
        .queryName("pattern_rows")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:

        def seen() -> set[str]:
            return {r.value for r in spark.sql("SELECT value FROM pattern_rows").collect()}

        wait_until(lambda: seen() == {"a0", "a1"}, timeout=120, what="feed-a's rows")
        _send(client, "persistent://public/spark-pattern/feed-b", ["b0", "b1", "b2"])
        _send(client, "persistent://public/spark-pattern/other", ["x"])  # not matched
        wait_until(
            lambda: seen() == {"a0", "a1", "b0", "b1", "b2"}, timeout=120, what="feed-b's rows"
        )
        topics = {r.topic for r in spark.sql("SELECT topic FROM pattern_rows").collect()}
        assert topics == {
            "persistent://public/spark-pattern/feed-a",
            "persistent://public/spark-pattern/feed-b",
        }
    finally:
        query.stop()


def test_retention_removing_checkpointed_data_fails_the_query_unless_told_otherwise(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, tmp_path: Path
) -> None:
    """No subscription holds the data and the namespace keeps nothing: ledgers go as soon as
    they close. The checkpoint stands inside a ledger that is then removed."""
    make_namespace(standalone, "public/spark-lossy", retain=False)
    topic = "persistent://public/spark-lossy/t"
    _send(client, topic, ["m0", "m1"])  # ledger 1 holds m0, m1 (and stays open)
    options = source_options(standalone, topic=topic, startingOffsets="earliest")
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    _run_available_now(spark, options, out, checkpoint)

    # more messages: the first ledger fills, closes, and nothing keeps it
    first_ledger = admin_call(
        standalone.http_url, "GET", "/persistent/public/spark-lossy/t/internalStats"
    )["ledgers"][0]["ledgerId"]
    _send(client, topic, [f"n{i}" for i in range(3 * LEDGER_ENTRIES)])

    def trimmed() -> bool:
        stats = admin_call(
            standalone.http_url, "GET", "/persistent/public/spark-lossy/t/internalStats"
        )
        return all(lg["ledgerId"] != first_ledger for lg in stats["ledgers"])

    wait_until(trimmed, timeout=60, what="the checkpoint's ledger trimmed")

    with pytest.raises(Exception, match="data loss on persistent://public/spark-lossy/t"):
        _run_available_now(spark, options, out, checkpoint)

    lenient = {**options, "failOnDataLoss": "false"}
    _run_available_now(spark, lenient, out, checkpoint)
    values = [r.value for r in spark.read.parquet(str(out)).collect()]
    assert values.count("m0") == values.count("m1") == 1
    stored = {f"n{i}" for i in range(3 * LEDGER_ENTRIES)} & set(values)
    assert stored and all(values.count(v) == 1 for v in stored)
    # what was read after the loss is exactly what the topic still stores, in order from the
    # earliest stored message
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    still = []
    while reader.has_message_available():
        still.append(reader.read_next(10_000).data().decode())
    reader.close()
    assert stored == set(still)
