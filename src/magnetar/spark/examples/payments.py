"""The example pipeline of docs/spark.md and spark-on-k8s/: payment events on a (partitioned)
topic -> per-merchant totals per minute of event time (tumbling windows, a watermark) -> a
results topic, one JSON message per (merchant, minute), keyed by merchant.

Why a module of the package: the same code runs in Spark local mode in the tests
(tests/integration/spark/test_payments_pipeline.py) and as a Spark-on-Kubernetes job from the
Spark image (spark-on-k8s/apps/payments.py calls ``main``).

A payment is a JSON message ``{"paymentId": str, "merchant": str, "amountCents": int,
"eventTime": <epoch milliseconds>}``. A result is ``{"merchant", "windowStart", "windowEnd"
(ISO-8601 UTC), "totalCents", "payments"}`` with the window's end as its event time. Windows are
emitted once the watermark (the latest event time seen minus ``watermark``) passes their end
(append mode), so each (merchant, minute) is written once; payments later than the watermark
are dropped, as Spark does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

PAYMENT_SCHEMA = "paymentId STRING, merchant STRING, amountCents LONG, eventTime LONG"


def totals_query(
    spark: Any,
    *,
    service_url: str,
    admin_url: str,
    source: str,
    sink: str,
    checkpoint: str,
    watermark: str = "1 minute",
    window: str = "1 minute",
    available_now: bool = True,
    starting_offsets: str = "earliest",
    max_records_per_trigger: int | None = None,
) -> Any:
    """Start the streaming query; returns it (``StreamingQuery``)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", service_url)
        .option("adminUrl", admin_url)
        .option("topic", source)
        .option("startingOffsets", starting_offsets)
    )
    if max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(max_records_per_trigger))
    payments = (
        reader.load()
        .select(F.from_json(F.col("value").cast("string"), PAYMENT_SCHEMA).alias("p"))
        .select("p.*")
        .where(F.col("merchant").isNotNull() & F.col("eventTime").isNotNull())
        .withColumn("ts", F.timestamp_millis(F.col("eventTime")))
    )
    totals = (
        payments.withWatermark("ts", watermark)
        .groupBy(F.window("ts", window).alias("w"), F.col("merchant"))
        .agg(F.sum("amountCents").alias("totalCents"), F.count("*").alias("payments"))
    )
    iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"
    results = totals.select(
        F.col("merchant").alias("key"),
        F.to_json(
            F.struct(
                F.col("merchant"),
                F.date_format(F.col("w.start"), iso).alias("windowStart"),
                F.date_format(F.col("w.end"), iso).alias("windowEnd"),
                F.col("totalCents"),
                F.col("payments"),
            )
        ).alias("value"),
        F.col("w.end").alias("eventTime"),
    )
    writer = (
        results.writeStream.format("magnetar")
        .outputMode("append")
        .option("serviceUrl", service_url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .queryName("merchant-totals")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="5 seconds")
    return writer.start()


def parser() -> argparse.ArgumentParser:
    """The command line of ``main`` (spark-on-k8s/submit.sh and sparkapplication.yaml)."""
    ap = argparse.ArgumentParser(prog="payments", description=__doc__.split("\n\n")[0])
    ap.add_argument("--service-url", required=True, help="pulsar://host:6650 of a broker")
    ap.add_argument("--admin-url", required=True, help="http://host:8080 of the admin API")
    ap.add_argument("--source", default="persistent://public/default/payments")
    ap.add_argument("--sink", default="persistent://public/default/merchant-totals")
    ap.add_argument("--checkpoint", required=True, help="a directory all pods share")
    ap.add_argument("--watermark", default="1 minute")
    ap.add_argument(
        "--trigger",
        choices=["available-now", "continuous"],
        default="available-now",
        help="available-now: process what is stored, then exit; continuous: run until stopped",
    )
    ap.add_argument("--max-records-per-trigger", type=int, default=None)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    """``spark-submit payments.py --service-url ... --admin-url ... --source ... --sink ...``:
    run the pipeline (the SparkSession comes from spark-submit's configuration)."""
    args = parser().parse_args(argv)

    from pyspark.sql import SparkSession

    import magnetar.spark

    spark = SparkSession.builder.appName("magnetar-merchant-totals").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    magnetar.spark.register(spark)
    query = totals_query(
        spark,
        service_url=args.service_url,
        admin_url=args.admin_url,
        source=args.source,
        sink=args.sink,
        checkpoint=args.checkpoint,
        watermark=args.watermark,
        available_now=args.trigger == "available-now",
        max_records_per_trigger=args.max_records_per_trigger,
    )
    print(f"query {query.id} started: {args.source} -> {args.sink}", flush=True)
    query.awaitTermination()
    progress = query.recentProgress
    rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    print(
        f"query {query.id} finished: {len(progress)} micro-batches, {rows} input rows", flush=True
    )
    spark.stop()


if __name__ == "__main__":
    main()
