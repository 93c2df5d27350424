"""Closed ledgers offloaded to a real MinIO and read back byte-identical: many ledger sizes,
entries across block boundaries, the object layout, the record the managed ledger keeps,
deletion, the reader's bounded cache and read-ahead, and the metrics."""

from __future__ import annotations

import random

import pytest

from magnetar.offload import layout, metrics
from magnetar.offload.config import MiB
from magnetar.offload.errors import NoSuchOffloadedEntryError, OffloadedDataError
from magnetar.offload.offloader import Offloader, OffloadLocation
from tests.integration.offload.conftest import (
    BLOCK,
    LedgerEnv,
    config_for,
    offload_and_open,
    payloads,
)
from tests.support.minio import MinioServer
from tests.support.wait import eventually

SIZES = {
    "empty-ledger": [],
    "one-entry": [100],
    "one-empty-entry": [0],
    "small-entries": [random.Random(1).randint(0, 2000) for _ in range(3000)],
    "just-over-one-block": [64 * 1024] * 81,
    "entry-as-big-as-a-block": [BLOCK, 10, BLOCK + 1000, 3],
    "several-blocks-mixed": [random.Random(2).choice([1, 500, 40_000, 700_000]) for _ in range(60)],
}


async def offload_and_read(
    ledgers: LedgerEnv, offloader: Offloader, data: list[bytes], topic: str = "t/ns/persistent/x"
) -> tuple[OffloadLocation, list[tuple[int, bytes]]]:
    handle = await ledgers.write(data)
    result, reader = await offload_and_open(offloader, handle, topic=topic)
    assert result.entries == len(data)
    assert result.ledger_bytes == sum(map(len, data))
    location = OffloadLocation.from_record(handle.ledger_id, result.to_record())
    assert reader.last_add_confirmed == len(data) - 1
    assert reader.length == sum(map(len, data))
    got = await reader.read(0, len(data) - 1) if data else []
    return location, got


@pytest.mark.parametrize("case", list(SIZES))
async def test_round_trip_is_byte_identical(
    case: str, ledgers: LedgerEnv, offloader: Offloader, minio: MinioServer, bucket: str
) -> None:
    data = payloads(SIZES[case], seed=len(case))
    location, got = await offload_and_read(ledgers, offloader, data)
    assert [eid for eid, _ in got] == list(range(len(data)))
    assert [p for _, p in got] == data
    # exactly two objects, under the ledger's prefix, named by the attempt
    assert sorted(minio.keys(bucket)) == sorted([location.data_key, location.index_key])
    assert minio.uploads(bucket) == []
    assert location.data_key == f"ledgers/{location.ledger_id}/{location.uuid}/data"


async def test_blocks_end_at_entry_boundaries_past_the_block_size(
    ledgers: LedgerEnv, offloader: Offloader
) -> None:
    # entries of 1 MiB: a block closes at the first entry boundary at or past 5 MiB, which
    # is after 5 entries (each record has a 16-byte header, the block a 24-byte one)
    data = payloads([MiB] * 22)
    handle = await ledgers.write(data)
    result, reader = await offload_and_open(offloader, handle)
    assert result.blocks == 5
    blocks = reader.index.blocks
    assert [b.count for b in blocks] == [5, 5, 5, 5, 2]
    assert all(b.length >= BLOCK for b in blocks[:-1])
    assert sum(b.length for b in blocks) == result.data_size
    # every range that crosses a block boundary, and single entries at both sides of it
    for b in blocks[:-1]:
        last = b.last_entry_id
        assert await reader.read(last, last + 1) == [(last, data[last]), (last + 1, data[last + 1])]
        assert await reader.read(last - 1, last + 2) == [
            (e, data[e]) for e in range(last - 1, last + 3)
        ]
    assert await reader.read(0, 21) == list(enumerate(data))
    assert await reader.read(21, 21) == [(21, data[21])]
    with pytest.raises(NoSuchOffloadedEntryError):
        await reader.read(21, 22)
    with pytest.raises(ValueError):
        await reader.read(5, 4)


async def test_record_carries_what_the_managed_ledger_must_keep(
    ledgers: LedgerEnv, offloader: Offloader, minio: MinioServer, bucket: str
) -> None:
    handle = await ledgers.write(payloads([10, 20, 30]))
    attempt = offloader.begin(handle.ledger_id)
    before = attempt.to_record()
    assert before["complete"] is False and before["uuid"] == attempt.uuid
    result = await offloader.offload(handle, attempt, topic="t/ns/persistent/rec")
    record = result.to_record()
    assert record["complete"] is True
    assert record["uuid"] == attempt.uuid
    assert record["driver"] == "S3"
    assert record["bucket"] == bucket
    assert record["endpoint"] == minio.endpoint
    assert record["dataKey"] == attempt.data_key and record["indexKey"] == attempt.index_key
    assert record["entries"] == 3
    # the objects say which ledger, attempt and managed ledger they belong to
    head = minio.client().head_object(Bucket=bucket, Key=attempt.data_key)
    assert head["Metadata"]["magnetar-attempt"] == attempt.uuid
    assert head["Metadata"]["magnetar-ledger-id"] == str(handle.ledger_id)
    assert head["Metadata"]["magnetar-managed-ledger"] == "t/ns/persistent/rec"
    # a second attempt gets a new UUID and new keys
    assert offloader.begin(handle.ledger_id).uuid != attempt.uuid


async def test_delete_removes_the_objects(
    ledgers: LedgerEnv, offloader: Offloader, minio: MinioServer, bucket: str
) -> None:
    location, _ = await offload_and_read(ledgers, offloader, payloads([1000] * 10))
    assert len(minio.keys(bucket)) == 2
    await offloader.delete_offloaded(location, topic="t/ns/persistent/x")
    assert minio.keys(bucket) == []
    await offloader.delete_offloaded(location)  # idempotent
    ok = metrics.REGISTRY.get_sample_value(
        "brk_ledgeroffloader_delete_offload_ops_total",
        {"namespace": "t/ns", "topic": "persistent://t/ns/x", "status": "succeed"},
    )
    assert ok is not None and ok >= 1


async def test_cache_stays_within_its_bound_and_reads_ahead(
    ledgers: LedgerEnv, minio: MinioServer, bucket: str
) -> None:
    cache_bytes = BLOCK * 3 // 2 + BLOCK  # room for two blocks (each a little over 5 MiB)
    offloader = Offloader(config_for(minio, bucket, read_cache_bytes=cache_bytes))
    try:
        data = payloads([256 * 1024] * 120)  # 30 MiB: 6 blocks, more than the cache
        handle = await ledgers.write(data)
        _, reader = await offload_and_open(offloader, handle)
        cache = offloader.cache
        assert await reader.read(0, 0) == [(0, data[0])]
        # read-ahead: the second block arrives without being asked for
        key1 = (reader.data_key, 1)
        await eventually(lambda: key1 in cache, timeout=30, what="read-ahead of block 1")
        hits = cache.hits
        first_of_1 = reader.index.blocks[1].first_entry_id
        assert await reader.read(first_of_1, first_of_1) == [(first_of_1, data[first_of_1])]
        assert cache.hits == hits + 1  # served from the read-ahead
        await eventually(
            lambda: (reader.data_key, 2) in cache, timeout=30, what="read-ahead of block 2"
        )
        for e in range(0, len(data), 7):
            last = min(len(data) - 1, e + 6)
            assert await reader.read(e, last) == [(i, data[i]) for i in range(e, last + 1)]
            assert cache.bytes <= cache_bytes
            assert len(cache) <= 2
        assert cache.evictions > 0
        # reading the start again: evicted, fetched again, still identical
        assert await reader.read(0, 3) == [(i, data[i]) for i in range(4)]
        assert cache.bytes <= cache_bytes
    finally:
        await offloader.close()


async def test_damaged_object_is_an_error_not_wrong_data(
    ledgers: LedgerEnv, minio: MinioServer, bucket: str
) -> None:
    offloader = Offloader(config_for(minio, bucket, read_cache_bytes=0))
    try:
        data = payloads([5000] * 50)
        handle = await ledgers.write(data)
        result, reader = await offload_and_open(offloader, handle)
        location = OffloadLocation.from_record(handle.ledger_id, result.to_record())
        s3 = minio.client()
        raw = bytearray(s3.get_object(Bucket=bucket, Key=location.data_key)["Body"].read())
        start, _ = reader.index.blocks[0].entry_span(7)
        raw[start + layout.ENTRY_HEADER.size + 100] ^= 0xFF  # one bit pattern inside entry 7
        s3.put_object(Bucket=bucket, Key=location.data_key, Body=bytes(raw))
        assert await reader.read(0, 6) == [(i, data[i]) for i in range(7)]
        with pytest.raises(OffloadedDataError, match="entry 7 fails its CRC32C"):
            await reader.read(5, 9)
        # a damaged index is refused when the reader opens
        index = bytearray(s3.get_object(Bucket=bucket, Key=location.index_key)["Body"].read())
        index[30] ^= 0x01
        s3.put_object(Bucket=bucket, Key=location.index_key, Body=bytes(index))
        with pytest.raises(OffloadedDataError, match="checksum"):
            await offloader.open_reader(location)
    finally:
        await offloader.close()


async def test_metrics_count_offloaded_and_read_bytes(
    ledgers: LedgerEnv, offloader: Offloader
) -> None:
    labels = {"namespace": "m/ns", "topic": "persistent://m/ns/metrics"}

    def sample(name: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    before = sample("magnetar_offload_bytes_total"), sample("magnetar_offload_read_bytes_total")
    data = payloads([1000] * 30)
    await offload_and_read(ledgers, offloader, data, topic="m/ns/persistent/metrics")
    assert sample("magnetar_offload_bytes_total") - before[0] == 30_000
    assert sample("magnetar_offload_read_bytes_total") - before[1] == 30_000
    assert sample("brk_ledgeroffloader_read_offload_index_latency_count") >= 1
    assert sample("brk_ledgeroffloader_read_offload_data_latency_count") >= 1
    assert sample("brk_ledgeroffloader_read_ledger_latency_count") >= 1
    text = __import__("prometheus_client").generate_latest(metrics.REGISTRY).decode()
    assert 'brk_ledgeroffloader_offload_rate{namespace="m/ns"' in text
