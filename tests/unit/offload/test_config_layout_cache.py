"""The offload configuration's validation, the object format's encode/decode, and the block
cache's bound: the pure parts of src/magnetar/offload (S3 behaviour is tested against a real
MinIO in tests/integration/offload)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from magnetar.offload import layout
from magnetar.offload.config import MiB, S3Config
from magnetar.offload.errors import OffloadConfigError, OffloadedDataError
from magnetar.offload.reader import BlockCache


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket": "Bad_Bucket"}, "S3 bucket name"),
        ({"bucket": "ab"}, "S3 bucket name"),
        ({"bucket": "ok-bucket", "driver": "gcs"}, "managedLedgerOffloadDriver"),
        ({"bucket": "ok-bucket", "driver": "S3"}, "needs an endpoint"),
        ({"bucket": "ok-bucket", "endpoint_url": "127.0.0.1:9000"}, "http"),
        ({"bucket": "ok-bucket", "block_size": MiB}, "block size"),
        ({"bucket": "ok-bucket", "access_key_id": "k"}, "both"),
        ({"bucket": "ok-bucket", "upload_concurrency": 0}, "upload_concurrency"),
        ({"bucket": "ok-bucket", "key_prefix": "/abs"}, "prefix"),
    ],
)
def test_bad_configuration_names_the_setting(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(OffloadConfigError, match=message):
        S3Config(**kwargs)  # type: ignore[arg-type]


def test_from_pulsar_properties() -> None:
    c = S3Config.from_properties(
        {
            "managedLedgerOffloadDriver": "S3",
            "s3ManagedLedgerOffloadBucket": "tiered",
            "s3ManagedLedgerOffloadRegion": "eu-west-1",
            "s3ManagedLedgerOffloadServiceEndpoint": "http://minio:9000",
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes": str(8 * MiB),
            "magnetarOffloadPathStyle": "true",
        }
    )
    assert (c.driver, c.bucket, c.region, c.endpoint_url) == (
        "S3",
        "tiered",
        "eu-west-1",
        "http://minio:9000",
    )
    assert c.block_size == 8 * MiB and c.path_style is True
    with pytest.raises(OffloadConfigError, match="s3ManagedLedgerOffloadBucket"):
        S3Config.from_properties({})
    with pytest.raises(OffloadConfigError, match="integer"):
        S3Config.from_properties(
            {
                "s3ManagedLedgerOffloadBucket": "b-1",
                "s3ManagedLedgerOffloadMaxBlockSizeInBytes": "x",
            }
        )
    assert "secret" not in repr(
        S3Config(bucket="b-1", access_key_id="k", secret_access_key="secret")
    )


def _index(sizes: list[list[int]]) -> tuple[layout.OffloadIndex, list[bytes], list[bytes]]:
    blocks, raws, entries = [], [], []
    offset, eid = 0, 0
    for block_sizes in sizes:
        b = layout.BlockBuilder(eid)
        for n in block_sizes:
            payload = bytes([eid % 251]) * n
            b.add(eid, payload)
            entries.append(payload)
            eid += 1
        raw = b.finish()
        blocks.append(layout.BlockInfo(b.first_entry_id, b.count, offset, len(raw), b.offsets))
        raws.append(raw)
        offset += len(raw)
    index = layout.OffloadIndex(
        ledger_id=7,
        attempt=str(uuid.uuid4()),
        entries=eid,
        ledger_length=sum(map(len, entries)),
        data_size=offset,
        blocks=tuple(blocks),
        properties={"managedLedger": "t/n/persistent/x"},
    )
    return index, raws, entries


def test_index_round_trip_and_entry_lookup() -> None:
    index, raws, entries = _index([[10, 0, 300], [5], [1, 2, 3, 4]])
    back = layout.OffloadIndex.decode(index.encode())
    assert back == index
    assert [back.block_of(e) for e in range(8)] == [0, 0, 0, 1, 2, 2, 2, 2]
    for b, raw in zip(back.blocks, raws, strict=True):
        got = layout.parse_entries(b, raw, b.first_entry_id, b.last_entry_id, where="t")
        assert [p for _, p in got] == entries[b.first_entry_id : b.last_entry_id + 1]


def test_damaged_index_and_block_are_refused() -> None:
    index, raws, _ = _index([[10, 20]])
    raw = bytearray(index.encode())
    raw[10] ^= 1
    with pytest.raises(OffloadedDataError, match="checksum"):
        layout.OffloadIndex.decode(bytes(raw))
    block = bytearray(raws[0])
    block[-1] ^= 1
    with pytest.raises(OffloadedDataError, match="CRC32C"):
        layout.parse_entries(index.blocks[0], bytes(block), 0, 1, where="t")
    with pytest.raises(OffloadedDataError, match="does not match the index"):
        layout.parse_entries(index.blocks[0], b"XXXX" + raws[0][4:], 0, 0, where="t")


async def test_block_cache_is_bounded_and_shares_fetches() -> None:
    cache = BlockCache(max_bytes=250)
    fetches: list[int] = []

    def fetcher(n: int, size: int = 100) -> object:
        async def fetch() -> bytes:
            fetches.append(n)
            await asyncio.sleep(0)  # a fetch that yields, so concurrent gets overlap
            return bytes([n]) * size

        return fetch

    got = await asyncio.gather(*(cache.get(1, fetcher(1)) for _ in range(5)))  # type: ignore[arg-type]
    assert fetches == [1] and all(g == bytes([1]) * 100 for g in got)
    await cache.get(2, fetcher(2))  # type: ignore[arg-type]
    await cache.get(1, fetcher(1))  # type: ignore[arg-type]  # hit: 1 is now most recent
    await cache.get(3, fetcher(3))  # type: ignore[arg-type]  # evicts 2, the least recent
    assert 2 not in cache and 1 in cache and 3 in cache
    assert cache.bytes == 200 <= cache.max_bytes
    await cache.get(4, fetcher(4, size=300))  # type: ignore[arg-type]  # larger than the bound
    assert 4 not in cache and cache.bytes <= cache.max_bytes
    assert (cache.hits, cache.evictions) == (1, 1)
    await cache.close()
