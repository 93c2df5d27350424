"""A streaming query as its own driver process, for the kill test: topic -> magnetar sink
with a checkpoint. ``run`` keeps going until it is killed; ``available-now`` finishes what
is there (replaying an interrupted micro-batch first) and exits 0."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script

from tests.support.spark import local_session


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--admin-url", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-records", default="1000")
    ap.add_argument("--mode", choices=["run", "available-now"], required=True)
    args = ap.parse_args()
    spark = local_session("magnetar-kill-test")
    rows = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("adminUrl", args.admin_url)
        .option("topic", args.source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", args.max_records)
        .load()
        .select("key", "value", "properties")
    )
    writer = (
        rows.writeStream.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.mode == "available-now":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="0 seconds").start()
    print("query started", query.id, flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print("query failed:", query.exception(), flush=True)
        sys.exit(1)
    spark.stop()


if __name__ == "__main__":
    main()
