"""Offload and read-back throughput against a real MinIO, next to the two ceilings that
matter: what MinIO accepts from a plain boto3 multipart upload of the same bytes, and a
catch-up read of the same ledger from its bookie.

One bookie process (gRPC over loopback, metadata on a real etcd) holds a closed ledger of
``--mib`` MiB in ``--entry-kib`` KiB entries; MinIO (tests/support/minio.py, built by
scripts/k8s/install-minio.sh) runs on a free loopback port. Each round measures, in turn:

* bookie read: the whole ledger read back through the ledger client, 4 MiB per request;
* plain multipart: the ledger's payload bytes uploaded with boto3's transfer manager
  (``upload_fileobj``, parts of the block size, the offloader's upload concurrency);
* offload: ``Offloader.offload`` of the ledger (reads from the bookie, packs blocks with
  CRC32Cs, uploads parts with Content-MD5, verifies sizes and ETags, writes the index);
* S3 read: the offloaded ledger read back through ``OffloadedLedgerReader`` 100 entries per
  call, as a catching-up subscription reads (ranged GETs of blocks, read-ahead, cache).

It prints MB/s per round and the median ratios against the targets of issue 14 (offload >=
50% of plain multipart; S3 read >= 50% of the bookie read). Figures only: nothing here
passes or fails. On 2 shared cores the processes compete for CPU; run it on a quiet machine.
``--record`` also writes the figures as a section of docs/benchmarks.md (replaced by the next
recorded run, kept when bench-peers regenerates the file).

    .venv/bin/python bench/offload_bench.py [--mib 128] [--entry-kib 16] [--rounds 3] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import boto3.s3.transfer
import report as peers_report
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.metadata import open_store
from magnetar.offload.config import MiB, S3Config
from magnetar.offload.offloader import Offloader, OffloadLocation

ROOT = Path(__file__).resolve().parents[1]
READ_BYTES = 4 * MiB
DISPATCH_ENTRIES = 100


async def write_ledger(client: LedgerClient, total: int, entry: int) -> int:
    handle = await client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    payload = os.urandom(entry)
    pending = []
    for i in range(total // entry):
        pending.append(handle.append(payload[:8] + i.to_bytes(8, "big") + payload[16:]))
        if len(pending) >= 500:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    await handle.close()
    return handle.ledger_id


async def read_all(handle: LedgerHandle, per: int) -> tuple[int, list[bytes]]:
    out: list[bytes] = []
    e = 0
    while e <= handle.last_add_confirmed:
        got = await handle.read(e, min(handle.last_add_confirmed, e + per - 1))
        out.extend(p for _, p in got)
        e += len(got)
    return sum(map(len, out)), out


def plain_multipart(minio: MinioServer, bucket: str, key: str, body: bytes, cfg: S3Config) -> None:
    s3 = minio.client(max_pool_connections=cfg.max_connections)
    transfer = boto3.s3.transfer.TransferConfig(
        multipart_threshold=cfg.block_size,
        multipart_chunksize=cfg.block_size,
        max_concurrency=cfg.upload_concurrency,
        use_threads=True,
    )
    s3.upload_fileobj(io.BytesIO(body), bucket, key, Config=transfer)


async def one_round(
    metadata_url: str, ledger_id: int, minio: MinioServer, bucket: str, cfg: S3Config, r: int
) -> dict[str, float]:
    store = await open_store(metadata_url)
    client = LedgerClient(store)
    offloader = Offloader(cfg)
    try:
        handle = await client.open(ledger_id)
        mb = handle.length / 1e6
        per = max(1, READ_BYTES // max(1, handle.length // (handle.last_add_confirmed + 1)))

        t0 = time.perf_counter()
        size, entries = await read_all(handle, per)
        bookie_read = mb / (time.perf_counter() - t0)
        assert size == handle.length

        body = b"".join(entries)
        del entries
        t0 = time.perf_counter()
        await asyncio.to_thread(plain_multipart, minio, bucket, f"plain/{r}", body, cfg)
        plain = mb / (time.perf_counter() - t0)
        del body

        t0 = time.perf_counter()
        result = await offloader.offload(
            handle, offloader.begin(ledger_id), topic="b/ns/persistent/bench"
        )
        offload = mb / (time.perf_counter() - t0)

        reader = await offloader.open_reader(
            OffloadLocation.from_record(ledger_id, result.to_record())
        )
        t0 = time.perf_counter()
        e, got = 0, 0
        while e <= reader.last_add_confirmed:
            batch = await reader.read(e, min(reader.last_add_confirmed, e + DISPATCH_ENTRIES - 1))
            got += sum(len(p) for _, p in batch)
            e += len(batch)
        s3_read = mb / (time.perf_counter() - t0)
        assert got == handle.length
        await offloader.delete_offloaded(OffloadLocation.from_record(ledger_id, result.to_record()))
        return {"bookie_read": bookie_read, "plain": plain, "offload": offload, "s3_read": s3_read}
    finally:
        await offloader.close()
        await client.close()
        await store.close()


async def prepare(metadata_url: str, mib: int, entry_kib: int) -> int:
    store = await open_store(metadata_url)
    client = LedgerClient(store)
    try:
        deadline = time.monotonic() + 20
        while not await client.bookies():
            if time.monotonic() > deadline:
                raise TimeoutError("the bookie did not register")
            await asyncio.sleep(0.1)
        return await write_ledger(client, mib * MiB, entry_kib * 1024)
    finally:
        await client.close()
        await store.close()


def section(args: argparse.Namespace, rows: list[dict[str, float]], loads: str) -> str:
    """The recorded run as a block for ``put_section`` of bench/peers/report.py."""
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lines = [
        "<!-- bench-peers section offload begin -->",
        "## Offload to S3 (MinIO): `.venv/bin/python bench/offload_bench.py --record`",
        "",
        "<!-- Generated by bench/offload_bench.py --record; replaced by its next recorded run. "
        "Do not edit by hand. -->",
        "",
        f"* Finished {started} (UTC): a closed ledger of {args.mib} MiB in {args.entry_kib} KiB "
        f"entries on one bookie process (etcd metadata), MinIO on loopback, blocks of "
        f"{args.block_mib} MiB, upload concurrency 2; {len(rows)} rounds, medians below.",
        f"* 1-min load average {loads}; the machine's 2 cores are shared with other work and "
        "every process here (bookie, MinIO, the offloader) competes for them.",
        f"* Offload = {100 * med['offload'] / med['plain']:.0f}% of a plain boto3 multipart "
        "upload of the same bytes (target >= 50%); S3 read = "
        f"{100 * med['s3_read'] / med['bookie_read']:.0f}% of a catch-up read from the bookie "
        "(target >= 50%). The offload also reads the ledger from the bookie, packs and "
        "checksums it and verifies the upload; the plain upload does none of that.",
        "",
        "| MB/s | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " | median |",
        "| --- | " + " | ".join("---:" for _ in rows) + " | ---: |",
    ]
    for key, label in (
        ("bookie_read", "catch-up read from the bookie (4 MiB requests)"),
        ("plain", "plain boto3 multipart upload (upload_fileobj)"),
        ("offload", "offload (read from bookie, upload, verify, index)"),
        ("s3_read", "read back from S3 (100 entries per read)"),
    ):
        cells = " | ".join(f"{r[key]:.1f}" for r in rows)
        lines.append(f"| {label} | {cells} | {med[key]:.1f} |")
    lines += ["", "<!-- bench-peers section offload end -->", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=128, help="ledger size in MiB")
    ap.add_argument("--entry-kib", type=int, default=16, help="entry size in KiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-mib", type=int, default=16, help="offload block (part) size")
    peers_report.add_record_option(ap, ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    if not minio_available():
        sys.exit(f"MinIO is not built: run {INSTALL_SCRIPT} (or `make minio`)")
    with tempfile.TemporaryDirectory(prefix="offload-bench-", dir=".") as tmp:
        base = Path(tmp)
        etcd = EtcdServer(base / "etcd").start()
        bookie = BookieProc(etcd.url, base / "bookie").start()
        minio = MinioServer(base / "minio").start()
        try:
            bucket = minio.create_bucket("offload-bench")
            cfg = S3Config(
                bucket=bucket,
                driver="S3",
                endpoint_url=minio.endpoint,
                path_style=True,
                region=minio.region,
                access_key_id=minio.access_key,
                secret_access_key=minio.secret_key,
                block_size=args.block_mib * MiB,
            )
            print(
                f"ledger {args.mib} MiB in {args.entry_kib} KiB entries, blocks of "
                f"{args.block_mib} MiB, upload concurrency {cfg.upload_concurrency}, "
                f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
            )
            ledger_id = asyncio.run(prepare(etcd.url, args.mib, args.entry_kib))
            rows = []
            for r in range(args.rounds):
                row = asyncio.run(one_round(etcd.url, ledger_id, minio, bucket, cfg, r))
                rows.append(row)
                print(
                    f"round {r + 1}: bookie read {row['bookie_read']:7.1f} MB/s | plain multipart "
                    f"{row['plain']:7.1f} MB/s | offload {row['offload']:7.1f} MB/s | S3 read "
                    f"{row['s3_read']:7.1f} MB/s"
                )
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(
                f"median: offload {med['offload']:.1f} MB/s = "
                f"{100 * med['offload'] / med['plain']:.0f}% of plain multipart "
                f"{med['plain']:.1f} MB/s (target >= 50%); S3 read {med['s3_read']:.1f} MB/s = "
                f"{100 * med['s3_read'] / med['bookie_read']:.0f}% of bookie read "
                f"{med['bookie_read']:.1f} MB/s (target >= 50%); "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            if args.record:
                loads = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
                block = section(args, rows, loads)
                peers_report.record_section(Path(args.record), "offload", block)
        finally:
            minio.stop()
            bookie.stop()
            etcd.stop()


if __name__ == "__main__":
    main()
