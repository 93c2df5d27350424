"""Topic compaction throughput (issue 15): how fast the two-phase compactor folds a topic into
its compacted ledger, in MB/s of topic data.

One in-process bookie (E/Wq/Aq 1/1/1) on the embedded metadata store, one managed ledger
filled with ``--messages`` messages of ``--size`` bytes over ``--keys`` keys (1% of them
tombstones), stored as entries of ``--batch`` messages each (1: no batching) -- the stored
form the clients send. Each round compacts a fresh topic from scratch (phase one reads it
all, phase two reads it again and writes each key's last value to a new ledger, then the
``__compaction`` cursor is written), then appends 10% more and compacts again (the
incremental case: the previous compacted ledger plus the new entries). MB/s is the topic
bytes compaction had to fold in divided by the whole compaction's time. Figures only:
nothing here passes or fails; on 2 shared cores the bookie and the compactor share the CPU.
``--record`` also writes the figures as a section of docs/benchmarks.md.

    .venv/bin/python bench/compaction_bench.py [--messages 100000] [--keys 1000] [--size 1024]
        [--batch 100] [--rounds 3] [--record]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import report as peers_report
from tests.support.procs import LOOPBACK, free_port

from magnetar.bookie import metrics as bookie_metrics
from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.broker.compaction.compactor import CompactionResult, compact
from magnetar.broker.compaction.view import CompactedTopic
from magnetar.common import aio
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.api import ManagedLedger, ManagedLedgerConfig
from magnetar.managed_ledger.factory import ManagedLedgerFactoryImpl
from magnetar.metadata import open_store
from magnetar.wire import batch, frames, pb

ROOT = Path(__file__).resolve().parents[1]


def entries(first: int, count: int, args: argparse.Namespace) -> list[bytes]:
    """Stored entries of messages ``first..first+count-1`` (key ``i % keys``; every 97th
    message a tombstone)."""
    value = os.urandom(args.size)
    out = []
    for start in range(first, first + count, args.batch):
        n = min(args.batch, first + count - start)
        slots = []
        for i in range(start, start + n):
            smd = pb.SingleMessageMetadata(partition_key=f"key-{i % args.keys}")
            slots.append((smd, b"" if i % 97 == 0 else value))
        md = pb.MessageMetadata(producer_name="bench", sequence_id=start, publish_time=1)
        if args.batch == 1:
            smd, payload = slots[0]
            md.partition_key = smd.partition_key
            md.uncompressed_size = len(payload)
        else:
            payload = batch.build_batch(slots)
            md.num_messages_in_batch = n
            md.uncompressed_size = len(payload)
        out.append(frames.encode_headers_and_payload(md, payload))
    return out


async def fill(ml: ManagedLedger, data: list[bytes]) -> None:
    window = [ml.append(d) for d in data]
    for fut in window:
        await fut


def rate(result: CompactionResult) -> float:
    return result.bytes_read / result.seconds / 1e6


async def one_round(
    factory: ManagedLedgerFactoryImpl, args: argparse.Namespace, r: int
) -> dict[str, float]:
    ml = await factory.open(f"bench/ns/persistent/compaction-{r}")
    await fill(ml, entries(0, args.messages, args))
    view = CompactedTopic(ml)
    full = await compact(ml, view)
    extra = args.messages // 10
    await fill(ml, entries(args.messages, extra, args))
    incremental = await compact(ml, view)
    print(
        f"round {r + 1}: full {rate(full):6.1f} MB/s ({full.bytes_read / 1e6:.1f} MB, "
        f"{full.entries_read} entries, {full.seconds:.2f} s, {full.keys} keys kept) | "
        f"incremental {rate(incremental):6.1f} MB/s ({incremental.bytes_read / 1e6:.1f} MB, "
        f"{incremental.seconds:.2f} s)"
    )
    await ml.delete()
    return {
        "full": rate(full),
        "full_msgs": args.messages / full.seconds,
        "incremental": rate(incremental),
    }


async def run(args: argparse.Namespace) -> list[dict[str, float]]:
    bookie_metrics.StorageCollector = lambda *_: type(  # type: ignore[misc]
        "_None", (), {"collect": lambda self: iter(())}
    )()
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        base = Path(tmp)
        store = await open_store(f"embedded://{base / 'meta'}")
        bookie = BookieServer(
            store,
            BookieOptions(
                data_dir=base / "bookie", port=free_port(), http_port=free_port(),
                bind_address=LOOPBACK,
            ),
        )  # fmt: skip
        await bookie.start()
        client = LedgerClient(store)
        try:
            config = ManagedLedgerConfig(max_entries_per_ledger=50_000)
            factory = ManagedLedgerFactoryImpl(
                store, client, default_config=config, cache_bytes=16 << 20
            )
            rows = [await one_round(factory, args, r) for r in range(args.rounds)]
            await factory.close()
            return rows
        finally:
            await client.close()
            await bookie.stop()
            await store.close()


def section(args: argparse.Namespace, rows: list[dict[str, float]], loads: str) -> str:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    shape = f"batches of {args.batch}" if args.batch > 1 else "one message per entry"
    lines = [
        "<!-- bench-peers section compaction begin -->",
        "## Topic compaction (`.venv/bin/python bench/compaction_bench.py --record`, issue 15)",
        "",
        "<!-- Generated by bench/compaction_bench.py --record; replaced by its next recorded "
        "run. Do not edit by hand. -->",
        "",
        f"* Finished {finished} (UTC): {args.messages:,} messages of {args.size} B over "
        f"{args.keys:,} keys (1% tombstones), {shape}, in a managed ledger on one in-process "
        f"bookie (E/Wq/Aq 1/1/1, embedded metadata); {len(rows)} rounds, medians below.",
        f"* 1-min load average {loads}; the machine's 2 cores are shared with other work.",
        "* Full: the first compaction of the topic (two reads of all of it, the compacted "
        "ledger written, the cursor persisted). Incremental: 10% more messages, compacted "
        "again (the previous compacted ledger plus the new entries). MB/s = topic bytes "
        "folded in / the compaction's time.",
        "",
        "| | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " | median |",
        "| --- | " + " | ".join("---:" for _ in rows) + " | ---: |",
    ]
    for key, label, fmt in (
        ("full", "full compaction, MB/s", "{:.1f}"),
        ("full_msgs", "full compaction, messages/s", "{:,.0f}"),
        ("incremental", "incremental compaction, MB/s", "{:.1f}"),
    ):
        cells = " | ".join(fmt.format(r[key]) for r in rows)
        lines.append(f"| {label} | {cells} | {fmt.format(med[key])} |")
    lines += ["", "<!-- bench-peers section compaction end -->", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes")
    ap.add_argument("--batch", type=int, default=100, help="messages per entry (1: none)")
    ap.add_argument("--rounds", type=int, default=3)
    peers_report.add_record_option(ap, ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    rows = aio.run(run(args))
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"median: full {med['full']:.1f} MB/s ({med['full_msgs']:,.0f} msg/s), incremental "
        f"{med['incremental']:.1f} MB/s; load average {os.getloadavg()[0]:.1f}"
    )
    if args.record:
        loads = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        peers_report.record_section(Path(args.record), "compaction", section(args, rows, loads))


if __name__ == "__main__":
    main()
