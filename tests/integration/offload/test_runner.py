"""The managed ledger's offload sequence (managed_ledger/offloading.py OffloadRunner) over
real ledgers, a real metadata store holding the ledger list, and a real MinIO: a manual
offload and the thresholds record complete offloads a new owner sees, reads from S3 are
byte-identical, bookie copies go only after the lag, a failed run leaves the bookie copy and
an incomplete record the next run cleans up, and trimmed ledgers lose their objects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import NoSuchLedgerError
from magnetar.managed_ledger import offloading as off
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.records import LedgerRecord, ManagedLedgerInfo
from magnetar.metadata import api
from magnetar.offload.offloader import Offloader, ReadableLedger
from tests.integration.offload.conftest import LedgerEnv, config_for, payloads
from tests.support.minio import MinioServer
from tests.support.wait import eventually

KEY = "/test/managed-ledgers/o/ns/persistent/runner"
NAME = "o/ns/persistent/runner"


class StoreHost:
    """The ledger list of one managed ledger kept in the metadata store and changed by
    compare-and-set, as the managed ledger keeps it."""

    def __init__(self, store: api.MetadataStore, client: LedgerClient) -> None:
        self.store = store
        self.client = client
        self.info = ManagedLedgerInfo()
        self.version: api.Version = api.NOT_EXISTS
        self.name = NAME
        self.current_ledger_id: int | None = None

    async def create(self, ledgers: Sequence[LedgerRecord]) -> None:
        self.info = ManagedLedgerInfo(ledgers=tuple(ledgers))
        self.version = await self.store.put(KEY, self.info.to_json(), expected_version=self.version)

    async def reload(self) -> ManagedLedgerInfo:
        record = await self.store.get(KEY)
        assert record is not None
        return ManagedLedgerInfo.from_json(record.value)

    def ledger_records(self) -> Sequence[LedgerRecord]:
        return self.info.ledgers

    async def set_offloaded(self, ledger_id: int, offloaded: Mapping[str, Any] | None) -> None:
        new = off.with_offloaded(self.info, ledger_id, offloaded)
        self.version = await self.store.put(KEY, new.to_json(), expected_version=self.version)
        self.info = new

    async def open_ledger(self, ledger_id: int) -> ReadableLedger:
        return await self.client.open(ledger_id)

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        await self.client.delete(ledger_id)


async def list_ledgers(ledgers: LedgerEnv, host: StoreHost, n: int) -> list[list[bytes]]:
    """``n`` closed ledgers (the last one plays the current ledger) listed in the store."""
    written, records = [], []
    for i in range(n):
        data = payloads([200_000 + 997 * i] * (12 + i), seed=i)
        handle = await ledgers.write(data)
        written.append(data)
        records.append(
            LedgerRecord(handle.ledger_id, len(data), handle.length, int(time.time() * 1000))
        )
    await host.create(records)
    host.current_ledger_id = records[-1].ledger_id
    return written


async def read_all(runner: off.OffloadRunner, record: LedgerRecord) -> list[bytes]:
    reader = await runner.reader(record)
    return [p for _, p in await reader.read(0, record.entries - 1)]


@pytest.fixture
async def host(ledgers: LedgerEnv) -> StoreHost:
    return StoreHost(ledgers.client.store, ledgers.client)


async def test_manual_offload_then_reads_from_s3_and_bookie_copies_after_the_lag(
    ledgers: LedgerEnv, host: StoreHost, minio: MinioServer, bucket: str
) -> None:
    data = await list_ledgers(ledgers, host, 4)
    ids = [r.ledger_id for r in host.info.ledgers]
    offloader = Offloader(config_for(minio, bucket))
    runner = off.OffloadRunner(host, offloader, off.OffloadPolicy(deletion_lag_ms=3_600_000))
    try:
        assert runner.status.to_json()["status"] == "NOT_RUN"
        status = await runner.offload_prefix(Position(ids[3], 5))
        assert status.to_json() == {
            "status": "SUCCESS",
            "lastError": "",
            "firstUnoffloadedMessage": {"ledgerId": ids[3], "entryId": 0, "partitionIndex": -1},
        }
        # what a new owner reads from the store: three complete offloads, the fourth not
        stored = await host.reload()
        assert [off.is_offloaded(r) for r in stored.ledgers] == [True, True, True, False]
        for r, d in zip(stored.ledgers[:3], data, strict=False):
            assert r.offloaded is not None and r.offloaded["bucket"] == bucket
            assert await read_all(runner, r) == d
        # the lag has not passed: the bookie copies stay
        assert await runner.delete_lagged_bookie_copies() == []
        handle = await ledgers.client.open(ids[0])
        assert [p for _, p in await handle.read(0, 2)] == data[0][:3]
        # an hour later they go, and the list says so
        later = int(time.time() * 1000) + 3_600_001
        assert await runner.delete_lagged_bookie_copies(later) == ids[:3]
        with pytest.raises(NoSuchLedgerError):
            await ledgers.client.open(ids[0])
        stored = await host.reload()
        assert [bool(r.offloaded and r.offloaded["bookieDeleted"]) for r in stored.ledgers] == [
            True,
            True,
            True,
            False,
        ]
        # reads still come back whole, from S3 alone (a fresh runner: nothing cached)
        fresh = off.OffloadRunner(host, offloader, runner.policy)
        for r, d in zip(stored.ledgers[:3], data, strict=False):
            assert await read_all(fresh, r) == d
        # trimmed (retention): the objects go too
        await runner.forget(stored.ledgers[:3])
        assert minio.keys(bucket) == []
    finally:
        await offloader.close()


async def test_threshold_offloads_what_exceeds_the_bytes_kept_on_bookies(
    ledgers: LedgerEnv, host: StoreHost, minio: MinioServer, bucket: str
) -> None:
    await list_ledgers(ledgers, host, 4)
    sizes = [r.size for r in host.info.ledgers]
    offloader = Offloader(config_for(minio, bucket))
    # keep the newest two ledgers' bytes on bookies (the current one counts)
    policy = off.OffloadPolicy(threshold_bytes=sizes[3] + sizes[2])
    runner = off.OffloadRunner(host, offloader, policy)
    try:
        status = await runner.maybe_offload()
        assert status is not None and status.status is off.OffloadState.SUCCESS
        assert [off.is_offloaded(r) for r in (await host.reload()).ledgers] == [
            True,
            True,
            False,
            False,
        ]
        assert await runner.maybe_offload() is None  # nothing more to do
    finally:
        await offloader.close()


async def test_failed_run_keeps_the_bookie_copy_and_the_next_run_cleans_up(
    ledgers: LedgerEnv, host: StoreHost, minio: MinioServer
) -> None:
    data = await list_ledgers(ledgers, host, 2)
    first = host.info.ledgers[0].ledger_id
    missing = f"late-bucket-{time.monotonic_ns() % 10**9}"
    offloader = Offloader(config_for(minio, missing))
    runner = off.OffloadRunner(host, offloader, off.OffloadPolicy(deletion_lag_ms=0))
    try:
        status = await runner.offload_prefix(Position(host.info.ledgers[1].ledger_id, 0))
        doc = status.to_json()
        assert doc["status"] == "ERROR" and missing in doc["lastError"]
        assert doc["firstUnoffloadedMessage"]["ledgerId"] == first
        # the attempt was recorded before the upload, not as complete: nothing reads it
        record = (await host.reload()).ledgers[0]
        assert not off.is_offloaded(record) and off.stale_attempt(record) is not None
        with pytest.raises(Exception, match="not complete"):
            await runner.reader(record)
        assert await runner.delete_lagged_bookie_copies() == []
        handle = await ledgers.client.open(first)  # the topic keeps serving from bookies
        assert [p for _, p in await handle.read(0, len(data[0]) - 1)] == data[0]
        # S3 fixed (the bucket exists now): the next run removes the stale attempt, completes
        minio.create_bucket(missing)
        status = await runner.offload_prefix(Position(host.info.ledgers[1].ledger_id, 0))
        assert status.status is off.OffloadState.SUCCESS
        done = (await host.reload()).ledgers[0]
        assert off.is_offloaded(done) and done.offloaded is not None
        assert done.offloaded["uuid"] != off.stale_attempt(record)
        assert sorted(minio.keys(missing)) == sorted(
            [done.offloaded["dataKey"], done.offloaded["indexKey"]]
        )
        assert await read_all(runner, done) == data[0]
    finally:
        await offloader.close()


async def test_one_offload_at_a_time(
    ledgers: LedgerEnv, host: StoreHost, minio: MinioServer, bucket: str
) -> None:
    await list_ledgers(ledgers, host, 3)
    offloader = Offloader(config_for(minio, bucket))
    runner = off.OffloadRunner(host, offloader, off.OffloadPolicy())
    upto = Position(host.info.ledgers[-1].ledger_id, 0)
    try:
        first = asyncio.ensure_future(runner.offload_prefix(upto))
        # it starts at the task's first step: look every loop turn, before it can finish
        await eventually(lambda: runner.running, interval=0, what="the offload to start")
        with pytest.raises(off.OffloadInProgressError):
            await runner.offload_prefix(upto)
        assert (await first).status is off.OffloadState.SUCCESS
    finally:
        await offloader.close()
