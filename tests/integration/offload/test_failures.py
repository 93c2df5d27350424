"""Offload against a MinIO that refuses, is missing the bucket, goes down, stalls, or whose
offload is cancelled: each gives a clear error, leaves nothing referenced, and the orphans
of the failed attempt are cleaned up so the next attempt succeeds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.common.errors import TemporaryError
from magnetar.ledger.handle import LedgerHandle
from magnetar.offload import metrics
from magnetar.offload.config import S3Config
from magnetar.offload.errors import (
    LedgerNotReadyError,
    NoSuchBucketError,
    OffloadConfigError,
    S3AccessDeniedError,
    S3UnavailableError,
)
from magnetar.offload.offloader import OffloadAttempt, Offloader, OffloadLocation, OffloadResult
from tests.integration.offload.conftest import (
    LedgerEnv,
    config_for,
    new_bucket,
    offload_and_open,
    payloads,
)
from tests.support.minio import MinioServer
from tests.support.wait import eventually


class GatedLedger:
    """A closed ledger handle whose reads from entry ``gate_at`` on wait for ``gate``: lets a
    test act (stop S3, cancel) while an offload is known to be mid-way."""

    def __init__(self, handle: LedgerHandle, gate_at: int) -> None:
        self._handle = handle
        self.gate_at = gate_at
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def closed(self) -> bool:
        return self._handle.closed

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def length(self) -> int:
        return self._handle.length

    async def read(self, first: int, last: int) -> list[tuple[int, bytes]]:
        if last >= self.gate_at:
            if first < self.gate_at:
                last = self.gate_at - 1
            else:
                self.waiting.set()
                await self.gate.wait()
        return await self._handle.read(first, last)


def nothing_left(server: MinioServer, bucket: str, *data_keys: str) -> None:
    assert server.keys(bucket) == []
    assert server.uploads(bucket) == []
    for key in data_keys:
        assert server.uploads(bucket, key) == []


async def offload_until_gated(
    offloader: Offloader, handle: LedgerHandle, server: MinioServer, bucket: str, topic: str = ""
) -> tuple[OffloadAttempt, GatedLedger, asyncio.Future[OffloadResult]]:
    """Start offloading ``handle``; return once its reads are held at GATE and at least one
    part of the data object is in S3."""
    gated = GatedLedger(handle, GATE)
    attempt = offloader.begin(handle.ledger_id)
    task = asyncio.ensure_future(offloader.offload(gated, attempt, topic=topic))
    await asyncio.wait_for(gated.waiting.wait(), 30)
    await eventually(
        lambda: parts_uploaded(server, bucket, attempt.data_key) >= 1,
        timeout=30,
        what="a part uploaded",
    )
    return attempt, gated, task


def parts_uploaded(server: MinioServer, bucket: str, key: str) -> int:
    s3 = server.client()
    total = 0
    for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []):
        total += len(
            s3.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"]).get("Parts", [])
        )
    return total


BIG = [512 * 1024] * 40  # 20 MiB: 4 blocks of 5 MiB
GATE = 25  # reads stop after two full blocks


async def test_wrong_credentials(ledgers: LedgerEnv, minio: MinioServer, bucket: str) -> None:
    bad = Offloader(config_for(minio, bucket, secret_access_key="not-the-secret"))
    unknown = Offloader(config_for(minio, bucket, access_key_id="nobody"))
    try:
        handle = await ledgers.write(payloads([100] * 10))
        with pytest.raises(S3AccessDeniedError, match="SignatureDoesNotMatch"):
            await bad.offload(handle, bad.begin(handle.ledger_id))
        with pytest.raises(S3AccessDeniedError, match="InvalidAccessKeyId"):
            await unknown.offload(handle, unknown.begin(handle.ledger_id))
        with pytest.raises(S3AccessDeniedError):
            await bad.probe()
        nothing_left(minio, bucket)
    finally:
        await bad.close()
        await unknown.close()


async def test_missing_bucket(ledgers: LedgerEnv, minio: MinioServer) -> None:
    offloader = Offloader(config_for(minio, "no-such-bucket-here"))
    try:
        handle = await ledgers.write(payloads([100] * 10))
        with pytest.raises(NoSuchBucketError, match="no-such-bucket-here"):
            await offloader.offload(handle, offloader.begin(handle.ledger_id))
        with pytest.raises(NoSuchBucketError):
            await offloader.probe()
        with pytest.raises(NoSuchBucketError):
            await offloader.s3.head_bucket()
    finally:
        await offloader.close()


async def test_credentials_from_a_file_and_from_the_aws_variables(
    minio: MinioServer, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong-secret\n\n"
        f"[magnetar]\naws_access_key_id = {minio.access_key}\n"
        f"aws_secret_access_key = {minio.secret_key}\n"
    )
    base = config_for(minio, bucket)
    from_file = S3Config(
        bucket=bucket,
        driver="S3",
        endpoint_url=minio.endpoint,
        path_style=True,
        credentials_file=str(creds),
        profile="magnetar",
    )
    assert from_file.credentials() is not None
    o = Offloader(from_file)
    try:
        await o.probe()
    finally:
        await o.close()
    with pytest.raises(OffloadConfigError, match=r"no \[other\] section"):
        S3Config(bucket=bucket, credentials_file=str(creds), profile="other").credentials()
    # no keys configured: boto3's standard chain reads the AWS variables
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio.secret_key)
    chain = S3Config(
        bucket=bucket, driver="S3", endpoint_url=minio.endpoint, path_style=True, region=base.region
    )
    assert chain.credentials() is None
    o = Offloader(chain)
    try:
        await o.probe()
    finally:
        await o.close()
    assert minio.keys(bucket) == []  # the probes cleaned up after themselves


async def test_open_ledger_is_refused(ledgers: LedgerEnv, offloader: Offloader) -> None:
    writer = await ledgers.client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    await writer.add_entry(b"x")
    try:
        with pytest.raises(LedgerNotReadyError, match="not closed"):
            await offloader.offload(writer, offloader.begin(writer.ledger_id))
    finally:
        await writer.close()


async def test_s3_down_mid_offload_then_orphans_removed_and_retry_succeeds(
    ledgers: LedgerEnv, own_minio: MinioServer
) -> None:
    bucket = new_bucket(own_minio)
    labels = {"namespace": "f/ns", "topic": "persistent://f/ns/down"}
    errors_before = metrics.REGISTRY.get_sample_value(
        "brk_ledgeroffloader_offload_error_total", labels
    )
    offloader = Offloader(config_for(own_minio, bucket, upload_concurrency=1))
    try:
        data = payloads(BIG)
        handle = await ledgers.write(data)
        attempt, gated, task = await offload_until_gated(
            offloader, handle, own_minio, bucket, topic="f/ns/persistent/down"
        )
        own_minio.kill()  # S3 crashes with the upload half done
        gated.gate.set()
        with pytest.raises(S3UnavailableError) as failed:
            await task
        assert isinstance(failed.value, TemporaryError)
        assert (
            metrics.REGISTRY.get_sample_value("brk_ledgeroffloader_offload_error_total", labels)
            == (errors_before or 0) + 1
        )
        # S3 back: the failed attempt's upload is still there (it could not be aborted)
        own_minio.restart()
        assert own_minio.uploads(bucket, attempt.data_key) == [attempt.data_key]
        # the managed ledger recorded the attempt's UUID before uploading: it is "known"
        removed = await offloader.cleanup_orphans(handle.ledger_id, keep=(), known=[attempt.uuid])
        assert removed == [attempt.uuid]
        nothing_left(own_minio, bucket, attempt.data_key)
        # the next attempt, with a new UUID, completes
        result, reader = await offload_and_open(offloader, handle)
        retry = result.attempt
        assert retry.uuid != attempt.uuid
        assert [p for _, p in await reader.read(0, len(data) - 1)] == data
        # the sweep keeps the recorded attempt
        assert await offloader.cleanup_orphans(handle.ledger_id, keep=(retry.uuid,)) == []
        assert sorted(own_minio.keys(bucket)) == sorted([retry.data_key, retry.index_key])
    finally:
        await offloader.close()


async def test_stalled_s3_times_out_clearly_and_leaves_nothing(
    ledgers: LedgerEnv, own_minio: MinioServer
) -> None:
    bucket = new_bucket(own_minio)
    offloader = Offloader(
        config_for(
            own_minio,
            bucket,
            upload_concurrency=1,
            read_timeout_s=1.0,
            connect_timeout_s=1.0,
            max_attempts=1,
        )
    )
    try:
        handle = await ledgers.write(payloads(BIG))
        attempt, gated, task = await offload_until_gated(offloader, handle, own_minio, bucket)
        own_minio.pause()  # S3 stops answering
        gated.gate.set()
        with pytest.raises(S3UnavailableError, match=r"too slow|timed out|Read timeout"):
            await task
        own_minio.resume()
        # nothing complete was written: no data object, no index
        assert own_minio.keys(bucket) == []
        await offloader.delete_attempt(handle.ledger_id, attempt.uuid)
        nothing_left(own_minio, bucket, attempt.data_key)
    finally:
        own_minio.resume()
        await offloader.close()


async def test_cancelled_offload_removes_what_it_wrote(
    ledgers: LedgerEnv, minio: MinioServer, bucket: str
) -> None:
    offloader = Offloader(config_for(minio, bucket, upload_concurrency=1))
    try:
        handle = await ledgers.write(payloads(BIG))
        attempt, _, task = await offload_until_gated(offloader, handle, minio, bucket)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        nothing_left(minio, bucket, attempt.data_key)
    finally:
        await offloader.close()


async def test_reading_while_s3_is_down_is_a_retriable_error(
    ledgers: LedgerEnv, own_minio: MinioServer
) -> None:
    bucket = new_bucket(own_minio)
    offloader = Offloader(config_for(own_minio, bucket, read_cache_bytes=0))
    try:
        data = payloads([3000] * 100)
        handle = await ledgers.write(data)
        result, reader = await offload_and_open(offloader, handle, topic="f/ns/persistent/read")
        location = OffloadLocation.from_record(handle.ledger_id, result.to_record())
        assert await reader.read(0, 9) == [(i, data[i]) for i in range(10)]
        own_minio.stop()
        with pytest.raises(S3UnavailableError) as down:
            await reader.read(10, 19)
        assert isinstance(down.value, TemporaryError)
        with pytest.raises(S3UnavailableError):
            await offloader.open_reader(location)
        own_minio.restart()
        assert await reader.read(10, 99) == [(i, data[i]) for i in range(10, 100)]
        assert (
            metrics.REGISTRY.get_sample_value(
                "brk_ledgeroffloader_read_offload_error_total",
                {"namespace": "f/ns", "topic": "persistent://f/ns/read"},
            )
            or 0
        ) >= 1
    finally:
        await offloader.close()


async def test_sweep_removes_unrecorded_attempts_and_keeps_the_recorded_one(
    ledgers: LedgerEnv, offloader: Offloader, minio: MinioServer, bucket: str
) -> None:
    handle = await ledgers.write(payloads([2000] * 20))
    other = await ledgers.write(payloads([10] * 3))
    lost = await offloader.offload(handle, offloader.begin(handle.ledger_id))  # never recorded
    kept = await offloader.offload(handle, offloader.begin(handle.ledger_id))
    neighbour = await offloader.offload(other, offloader.begin(other.ledger_id))
    removed = await offloader.cleanup_orphans(handle.ledger_id, keep=[kept.attempt.uuid])
    assert removed == [lost.attempt.uuid]
    assert sorted(minio.keys(bucket)) == sorted(
        [
            kept.attempt.data_key,
            kept.attempt.index_key,
            neighbour.attempt.data_key,
            neighbour.attempt.index_key,
        ]
    )
