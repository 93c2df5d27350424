"""Offload and catch-up reads through the broker: ``magnetar standalone`` (its real bookie)
offloading to a real MinIO, measured from the outside with the official client and the admin
API -- the path a topic takes, where bench/offload_bench.py measures the offload layer alone.

One topic holds ``--mib`` MiB in ``--entry-kib`` KiB messages (no batching) over ledgers of
``--per-ledger`` messages. Each round, on a freshly restarted standalone (empty entry cache):

* bookie catch-up: a new subscription from earliest receives every message (the ledgers are
  on the bookie only);
* offload: ``PUT .../offload`` of every closed ledger until ``GET .../offload`` says SUCCESS
  (reads from the bookie, uploads, verifies, records);
* S3 catch-up: after the bookie copies are deleted (lag 0) and a restart, a new
  subscription from earliest receives every message from S3.

MB/s are message payload bytes over wall time. Figures only; on 2 shared cores the client,
the broker, the bookie and MinIO compete for CPU.

    .venv/bin/python bench/offload_broker_bench.py [--mib 64] [--entry-kib 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pulsar
from tests.integration.offload.test_broker import (
    admin,
    consume_all,
    internal_stats,
    produce,
    start_standalone,
    topic_path,
    wait_offload_done,
)
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

from magnetar.offload.config import MiB


def quiet_client(proc: StandaloneProc) -> pulsar.Client:
    """A client whose own log keeps to errors (it would interleave with the figures)."""
    return pulsar.Client(
        proc.service_url,
        operation_timeout_seconds=120,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def catch_up(proc: StandaloneProc, topic: str, n: int, name: str) -> float:
    """Seconds for a new subscription from earliest to receive ``n`` messages."""
    client = quiet_client(proc)
    try:
        t0 = time.perf_counter()
        consumer = client.subscribe(
            topic, name, initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=200
        )
        consume_all(consumer, n, timeout_ms=120_000)
        seconds = time.perf_counter() - t0
        consumer.close()
        return seconds
    finally:
        client.close()


def one_round(
    base: Path, minio: MinioServer, mib: int, entry: int, per_ledger: int
) -> dict[str, float]:
    bucket = minio.create_bucket(f"bench-{base.name.lower()}")
    n = mib * MiB // entry
    total_mb = n * entry / 1e6
    data = [bytes([i % 251]) * entry for i in range(n)]
    topic = "bench-offload"
    extra = ("--offload-deletion-lag-ms", "0", "--max-entries-per-ledger", str(per_ledger))
    proc = start_standalone(base / "data", minio, bucket, *extra)
    try:
        assert admin(proc, "PUT", topic_path(topic))[0] == 204
        client = quiet_client(proc)
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        produce(client, topic, data)
        client.close()
    finally:
        proc.stop()
    out: dict[str, float] = {}
    proc.restart()
    try:
        out["bookie catch-up"] = total_mb / catch_up(proc, topic, n, "from-bookie")
        t0 = time.perf_counter()
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer
        final = wait_offload_done(proc, topic, timeout=600)
        seconds = time.perf_counter() - t0
        assert final["status"] == "SUCCESS", final
        closed = [lg for lg in internal_stats(proc, topic)["ledgers"] if lg["offloaded"]]
        out["offload"] = sum(lg["size"] for lg in closed) / 1e6 / seconds
        wait_until(
            lambda: all(
                lg["offloadLocation"]["bookieDeleted"]
                for lg in internal_stats(proc, topic)["ledgers"]
                if lg["offloaded"]
            ),
            timeout=120,
            what="bookie copies deleted",
        )
    finally:
        proc.stop()
    proc.restart()
    try:
        out["S3 catch-up"] = total_mb / catch_up(proc, topic, n, "from-s3")
    finally:
        proc.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--entry-kib", type=int, default=100)
    parser.add_argument("--per-ledger", type=int, default=100, help="messages per ledger")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", help="keep the data and logs here (default: a temp dir)")
    args = parser.parse_args()
    if not minio_available():
        print(f"MinIO is not built: run {INSTALL_SCRIPT}", file=sys.stderr)
        return 2
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="offload-broker-bench-") as scratch:
        tmp = args.dir or scratch
        minio = MinioServer(Path(tmp) / "minio").start()
        try:
            for r in range(args.rounds):
                base = Path(tmp) / f"round{r}"
                base.mkdir()
                rounds.append(
                    one_round(base, minio, args.mib, args.entry_kib * 1024, args.per_ledger)
                )
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v:.1f} MB/s" for k, v in rounds[-1].items()),
                    flush=True,
                )
        finally:
            minio.stop()
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print("medians: " + ", ".join(f"{k} {v:.1f} MB/s" for k, v in medians.items()))
    ratio = medians["S3 catch-up"] / medians["bookie catch-up"]
    print(f"S3 catch-up = {ratio:.0%} of the bookie catch-up (target of issue 14: >= 50%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
