"""Copying a closed ledger to S3, verifying it, and everything else done to its objects.

Why: this is the one place that decides what "offloaded" means. A ledger counts as
offloaded only when :meth:`Offloader.offload` has returned: the data object (entries in
blocks, uploaded as a multipart upload with Content-MD5 on every part) and the index object
are both in the bucket and S3's sizes and ETags match what was sent. The caller (the
managed ledger) records the attempt's UUID *before* calling it
(:meth:`OffloadAttempt.to_record`, ``complete: false``) and the result after
(:meth:`OffloadResult.to_record`, ``complete: true``); only then may the bookie copy go.

A failed or cancelled attempt aborts its multipart upload and deletes what it wrote before
the error propagates; an attempt that could not clean up (the process was killed) is found
again by its recorded UUID (:meth:`Offloader.delete_attempt`) or, if it was never recorded,
by listing the ledger's prefix (:meth:`Offloader.cleanup_orphans`). Either way nothing in
the bucket is referenced by metadata unless it is complete and verified.

The ledger is read through :class:`ReadableLedger`, the read side of a ledger-client handle
(``magnetar.ledger.handle.LedgerHandle`` satisfies it), so this layer does not depend on the
ledger client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import urllib.parse
import uuid as uuidlib
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.common.buffers import Payload
from magnetar.offload import layout, metrics
from magnetar.offload.config import S3Config
from magnetar.offload.errors import (
    LedgerNotReadyError,
    OffloadConfigError,
    OffloadedDataError,
    OffloadError,
    OffloadVerifyError,
)
from magnetar.offload.reader import BlockCache, OffloadedLedgerReader
from magnetar.offload.s3 import S3Client

log = logging.getLogger(__name__)

READ_BATCH_BYTES = 4 * 1024 * 1024
"""Bytes asked of the bookies per read while offloading (sized from the entries seen)."""
READ_BATCH_MAX_ENTRIES = 10_000


class ReadableLedger(Protocol):
    """What the offloader needs of a closed ledger (a ledger client's read handle)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def last_add_confirmed(self) -> int: ...

    @property
    def length(self) -> int: ...

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class OffloadAttempt:
    """One try at offloading one ledger: its UUID names its objects."""

    ledger_id: int
    uuid: str
    driver: str
    bucket: str
    data_key: str
    index_key: str
    started_ms: int

    def to_record(self) -> dict[str, Any]:
        """What the managed ledger stores *before* uploading: a crash leaves this (not
        complete) behind, and the next owner deletes the attempt's objects by it."""
        return {
            "uuid": self.uuid,
            "complete": False,
            "bookieDeleted": False,
            "driver": self.driver,
            "bucket": self.bucket,
            "dataKey": self.data_key,
            "indexKey": self.index_key,
            "timestamp": self.started_ms,
        }


@dataclass(frozen=True, slots=True)
class OffloadResult:
    attempt: OffloadAttempt
    entries: int
    ledger_bytes: int
    """Entry payload bytes (the ledger's length)."""
    data_size: int
    index_size: int
    blocks: int
    region: str
    endpoint: str | None
    seconds: float
    completed_ms: int = field(default_factory=_now_ms)

    def to_record(self) -> dict[str, Any]:
        """What the managed ledger stores once the offload is done (``complete: true``);
        :meth:`OffloadLocation.from_record` reads it back."""
        a = self.attempt
        return {
            "uuid": a.uuid,
            "complete": True,
            "bookieDeleted": False,
            "driver": a.driver,
            "bucket": a.bucket,
            "region": self.region,
            "endpoint": self.endpoint,
            "dataKey": a.data_key,
            "indexKey": a.index_key,
            "entries": self.entries,
            "dataSize": self.data_size,
            "timestamp": self.completed_ms,
        }


@dataclass(frozen=True, slots=True)
class OffloadLocation:
    """Where a recorded offload lives (read from the managed ledger's record)."""

    ledger_id: int
    uuid: str
    bucket: str
    data_key: str
    index_key: str
    complete: bool

    @classmethod
    def from_record(cls, ledger_id: int, record: Mapping[str, Any]) -> OffloadLocation:
        try:
            uuid = str(uuidlib.UUID(str(record["uuid"])))
            return cls(
                ledger_id=ledger_id,
                uuid=uuid,
                bucket=str(record["bucket"]),
                data_key=str(record["dataKey"]),
                index_key=str(record["indexKey"]),
                complete=bool(record.get("complete", False)),
            )
        except (KeyError, ValueError, TypeError) as err:
            raise OffloadConfigError(
                f"ledger {ledger_id}: offload record is incomplete or invalid ({err!r}): "
                f"{dict(record)}"
            ) from err


def _object_metadata(
    attempt: OffloadAttempt, topic: str, extra: Mapping[str, str]
) -> dict[str, str]:
    meta = {
        "magnetar-format": str(layout.VERSION),
        "magnetar-ledger-id": str(attempt.ledger_id),
        "magnetar-attempt": attempt.uuid,
        # S3 user metadata is ASCII: names are percent-encoded
        "magnetar-managed-ledger": urllib.parse.quote(topic, safe="/:"),
    }
    for k, v in extra.items():
        meta[f"magnetar-{k}".lower()] = urllib.parse.quote(str(v), safe="/:")
    return meta


class Offloader:
    """Offloads closed ledgers to one bucket and reads them back (one per broker)."""

    def __init__(self, config: S3Config, *, s3: S3Client | None = None) -> None:
        self.config = config
        self.s3 = s3 or S3Client(config)
        self.cache = BlockCache(config.read_cache_bytes)

    @property
    def driver(self) -> str:
        return self.config.driver

    async def close(self) -> None:
        await self.cache.close()
        await self.s3.close()

    async def probe(self) -> None:
        """Write, read back and delete a probe object: raises what S3 said when any step
        fails (the readiness check of an offload configuration)."""
        key = f"{self.config.key_prefix}probe/{uuidlib.uuid4()}"
        body = f"magnetar offload probe {key}".encode()
        await self.s3.put(key, body, {"magnetar-probe": "1"})
        try:
            got = await self.s3.get(key)
            if got != body:
                raise OffloadVerifyError(f"probe s3://{self.s3.bucket}/{key} read back differs")
        finally:
            await self.s3.delete([key])

    # --- offloading ---------------------------------------------------------------------------

    def begin(self, ledger_id: int) -> OffloadAttempt:
        """A new attempt (fresh UUID) for ``ledger_id``; nothing is written yet."""
        attempt = str(uuidlib.uuid4())
        prefix = self.config.key_prefix
        return OffloadAttempt(
            ledger_id=ledger_id,
            uuid=attempt,
            driver=self.config.driver,
            bucket=self.config.bucket,
            data_key=layout.data_key(prefix, ledger_id, attempt),
            index_key=layout.index_key(prefix, ledger_id, attempt),
            started_ms=_now_ms(),
        )

    async def offload(
        self,
        ledger: ReadableLedger,
        attempt: OffloadAttempt,
        *,
        topic: str = "",
        properties: Mapping[str, str] | None = None,
    ) -> OffloadResult:
        """Copy every entry of the closed ``ledger`` into the attempt's objects and verify
        them. On any failure (or cancellation) the attempt's objects are removed before the
        error propagates: S3 errors as :mod:`magnetar.offload.errors`, ledger read errors as
        the ledger raised them."""
        labels = metrics.labels_of(topic)
        metrics.offload_started(labels)
        if attempt.ledger_id != ledger.ledger_id:
            raise ValueError(f"attempt is for ledger {attempt.ledger_id}, not {ledger.ledger_id}")
        if not ledger.closed:
            raise LedgerNotReadyError(f"ledger {ledger.ledger_id} is not closed")
        t0 = time.monotonic()
        upload: _Upload | None = None
        try:
            meta = _object_metadata(attempt, topic, properties or {})
            last = ledger.last_add_confirmed
            entries = 0
            payload_bytes = 0
            if last < 0:
                await self.s3.put(attempt.data_key, b"", meta)
                blocks: list[layout.BlockInfo] = []
                data_size, data_etag = 0, hashlib.md5(b"", usedforsecurity=False).hexdigest()
            else:
                upload = _Upload(self, attempt.data_key)
                await upload.start(meta)
                builder = layout.BlockBuilder(0)
                async for batch in self._batches(ledger, last, labels):
                    for eid, payload in batch:
                        if eid != entries:
                            raise LedgerNotReadyError(
                                f"ledger {ledger.ledger_id}: read entry {eid} where {entries} "
                                "was due"
                            )
                        builder.add(eid, payload)
                        entries += 1
                        payload_bytes += len(payload)
                        if builder.size >= self.config.block_size:
                            await upload.add(builder)
                            builder = layout.BlockBuilder(entries)
                if builder.count:
                    await upload.add(builder)
                blocks, data_size, data_etag = await upload.complete()
            if entries != last + 1 or payload_bytes != ledger.length:
                raise LedgerNotReadyError(
                    f"ledger {ledger.ledger_id}: read {entries} entries of {payload_bytes} "
                    f"bytes, the ledger says {last + 1} entries of {ledger.length} bytes"
                )
            await self._verify(attempt.data_key, data_size, data_etag, attempt.uuid)
            index = layout.OffloadIndex(
                ledger_id=ledger.ledger_id,
                attempt=attempt.uuid,
                entries=entries,
                ledger_length=payload_bytes,
                data_size=data_size,
                blocks=tuple(blocks),
                properties={"managedLedger": topic, **dict(properties or {})},
            )
            raw = index.encode()
            await self.s3.put(attempt.index_key, raw, meta)
            await self._verify(
                attempt.index_key,
                len(raw),
                hashlib.md5(raw, usedforsecurity=False).hexdigest(),
                attempt.uuid,
            )
        except BaseException as err:
            metrics.OFFLOAD_ERROR.labels(*labels).inc()
            if isinstance(err, OffloadError) and not isinstance(err, LedgerNotReadyError):
                metrics.WRITE_STORAGE_ERROR.labels(*labels).inc()
            log.warning(
                "offload of ledger %d (attempt %s) failed: %s", attempt.ledger_id, attempt.uuid, err
            )
            await asyncio.shield(self._discard(attempt, upload))
            raise
        metrics.offloaded(topic, payload_bytes)
        elapsed = time.monotonic() - t0
        log.info(
            "offloaded ledger %d: %d entries, %d bytes in %d blocks to s3://%s/%s in %.2fs",
            ledger.ledger_id,
            entries,
            payload_bytes,
            len(blocks),
            self.config.bucket,
            attempt.data_key,
            elapsed,
        )
        return OffloadResult(
            attempt=attempt,
            entries=entries,
            ledger_bytes=payload_bytes,
            data_size=data_size,
            index_size=len(raw),
            blocks=len(blocks),
            region=self.config.region,
            endpoint=self.config.endpoint_url,
            seconds=elapsed,
        )

    async def _batches(
        self, ledger: ReadableLedger, last: int, labels: tuple[str, str]
    ) -> AsyncIterator[list[tuple[int, Payload]]]:
        """The ledger's entries in batches of about READ_BATCH_BYTES, the next batch read
        from the bookies while the current one is being packed."""
        entry_size = 1024  # a guess until the first batch says otherwise

        async def read(first: int, count: int) -> list[tuple[int, Payload]]:
            t0 = time.perf_counter()
            got = await ledger.read(first, min(last, first + count - 1))
            metrics.READ_LEDGER_LATENCY.labels(*labels).observe((time.perf_counter() - t0) * 1e6)
            return got

        def count() -> int:
            return max(1, min(READ_BATCH_MAX_ENTRIES, READ_BATCH_BYTES // max(1, entry_size)))

        nxt: asyncio.Task[list[tuple[int, Payload]]] | None = asyncio.ensure_future(
            read(0, count())
        )
        try:
            while nxt is not None:
                batch = await nxt
                nxt = None
                if not batch:
                    raise LedgerNotReadyError(f"ledger {ledger.ledger_id}: a read returned nothing")
                entry_size = max(1, sum(len(p) for _, p in batch) // len(batch))
                following = batch[-1][0] + 1
                if following <= last:
                    nxt = asyncio.ensure_future(read(following, count()))
                yield batch
        finally:
            if nxt is not None:
                nxt.cancel()
                with contextlib.suppress(BaseException):
                    await nxt

    async def _verify(self, key: str, size: int, etag: str, attempt: str) -> None:
        info = await self.s3.head(key)
        where = f"s3://{self.s3.bucket}/{key}"
        if info.size != size:
            raise OffloadVerifyError(f"{where}: S3 holds {info.size} bytes, {size} were sent")
        if info.metadata.get("magnetar-attempt") != attempt:
            raise OffloadVerifyError(f"{where}: the object belongs to another attempt")
        if self.config.verify_etag and info.etag != etag:
            raise OffloadVerifyError(f"{where}: S3's ETag {info.etag} is not the sent {etag}")

    async def _discard(self, attempt: OffloadAttempt, upload: _Upload | None) -> None:
        """Best effort after a failure: abort the upload, delete what was written."""
        try:
            if upload is not None:
                await upload.abort()
            await self.delete_attempt(attempt.ledger_id, attempt.uuid)
        except Exception as err:
            log.warning(
                "ledger %d: could not clean up attempt %s (left for the orphan sweep): %s",
                attempt.ledger_id,
                attempt.uuid,
                err,
            )

    # --- deleting -----------------------------------------------------------------------------

    async def delete_attempt(self, ledger_id: int, attempt: str) -> None:
        """Remove everything attempt ``attempt`` of ``ledger_id`` wrote: its multipart upload
        in progress is aborted, its objects deleted. Idempotent; raises when S3 refused or
        could not be reached (retry later). Uploads are listed by the exact data key, the one
        listing every S3 implementation supports (MinIO lists uploads of one key only)."""
        prefix = f"{layout.ledger_prefix(self.config.key_prefix, ledger_id)}{attempt}/"
        data = layout.data_key(self.config.key_prefix, ledger_id, attempt)
        for key, upload_id in await self.s3.list_multipart(data):
            if key == data:
                await self.s3.abort_multipart(key, upload_id)
        keys = {data, layout.index_key(self.config.key_prefix, ledger_id, attempt)}
        keys.update(await self.s3.list_keys(prefix))
        await self.s3.delete(sorted(keys))
        self.cache.drop(lambda k: isinstance(k, tuple) and str(k[0]).startswith(prefix))

    async def cleanup_orphans(
        self, ledger_id: int, keep: Collection[str], *, known: Collection[str] = ()
    ) -> list[str]:
        """Remove every attempt of ``ledger_id`` whose UUID is not in ``keep``: the attempts
        in ``known`` (UUIDs recorded before their upload started) and every attempt found in
        the bucket (objects under the ledger's prefix; uploads in progress where the store
        lists them by prefix, as AWS does). Returns the attempts removed.

        An attempt that was never recorded and never completed its data object leaves only
        an upload in progress, which MinIO does not list by prefix: the managed ledger
        records each attempt's UUID before uploading so it is always ``known``, and a bucket
        lifecycle rule (AbortIncompleteMultipartUpload) is the safety net (docs/offload.md).
        """
        prefix = layout.ledger_prefix(self.config.key_prefix, ledger_id)
        found: set[str] = set(known)
        for key in await self.s3.list_keys(prefix):
            a = layout.attempt_of(self.config.key_prefix, ledger_id, key)
            if a is not None:
                found.add(a)
        for key, _ in await self.s3.list_multipart(prefix):
            a = layout.attempt_of(self.config.key_prefix, ledger_id, key)
            if a is not None:
                found.add(a)
        removed = sorted(found - set(keep))
        for a in removed:
            await self.delete_attempt(ledger_id, a)
        if removed:
            log.info("ledger %d: removed orphan offload attempts %s", ledger_id, removed)
        return removed

    async def delete_offloaded(self, location: OffloadLocation, *, topic: str = "") -> None:
        """Delete an offloaded ledger's objects (retention, topic deletion)."""
        labels = metrics.labels_of(topic)
        self._check_bucket(location)
        try:
            await self.delete_attempt(location.ledger_id, location.uuid)
        except OffloadError:
            metrics.DELETE_OFFLOAD_OPS.labels(*labels, "failed").inc()
            raise
        metrics.DELETE_OFFLOAD_OPS.labels(*labels, "succeed").inc()

    # --- reading ------------------------------------------------------------------------------

    def _check_bucket(self, location: OffloadLocation) -> None:
        if location.bucket != self.config.bucket:
            raise OffloadConfigError(
                f"ledger {location.ledger_id} was offloaded to bucket {location.bucket}; this "
                f"offloader uses {self.config.bucket}"
            )

    async def open_reader(
        self, location: OffloadLocation, *, topic: str = ""
    ) -> OffloadedLedgerReader:
        """A reader of the offloaded ledger (fetches and checks its index object)."""
        self._check_bucket(location)
        if not location.complete:
            raise LedgerNotReadyError(
                f"ledger {location.ledger_id}: offload attempt {location.uuid} is not complete"
            )
        labels = metrics.labels_of(topic)
        t0 = time.perf_counter()
        try:
            raw = await self.s3.get(location.index_key)
            where = f"s3://{self.s3.bucket}/{location.index_key}"
            index = layout.OffloadIndex.decode(raw, where=where)
            if index.ledger_id != location.ledger_id or index.attempt != location.uuid:
                raise OffloadedDataError(
                    f"{where}: index of ledger {index.ledger_id} attempt {index.attempt}, "
                    f"expected ledger {location.ledger_id} attempt {location.uuid}"
                )
        except OffloadError:
            metrics.READ_OFFLOAD_ERROR.labels(*labels).inc()
            raise
        metrics.READ_OFFLOAD_INDEX_LATENCY.labels(*labels).observe((time.perf_counter() - t0) * 1e6)
        return OffloadedLedgerReader(self.s3, self.cache, index, location.data_key, topic=topic)


class _Upload:
    """The data object's multipart upload: parts go up in the background (at most
    ``upload_concurrency`` at once) while the next block is filled."""

    def __init__(self, offloader: Offloader, key: str) -> None:
        self._s3 = offloader.s3
        self._key = key
        self._slots = asyncio.Semaphore(offloader.config.upload_concurrency)
        self._tasks: list[asyncio.Task[tuple[str, bytes]]] = []
        self._blocks: list[layout.BlockInfo] = []
        self._size = 0
        self.upload_id: str | None = None

    async def start(self, meta: Mapping[str, str]) -> None:
        self.upload_id = await self._s3.start_multipart(self._key, meta)

    async def add(self, builder: layout.BlockBuilder) -> None:
        assert self.upload_id is not None
        for t in self._tasks:  # fail fast: a part already failed
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        body = builder.finish()
        self._blocks.append(
            layout.BlockInfo(
                builder.first_entry_id, builder.count, self._size, len(body), builder.offsets
            )
        )
        self._size += len(body)
        await self._slots.acquire()
        number = len(self._blocks)
        upload_id = self.upload_id

        async def put() -> tuple[str, bytes]:
            try:
                return await self._s3.upload_part(self._key, upload_id, number, body)
            finally:
                self._slots.release()

        self._tasks.append(asyncio.ensure_future(put()))

    async def complete(self) -> tuple[list[layout.BlockInfo], int, str]:
        """(blocks, data size, expected ETag) once every part is up and the upload done."""
        assert self.upload_id is not None
        parts = await asyncio.gather(*self._tasks)
        for (etag, digest), number in zip(parts, range(1, len(parts) + 1), strict=True):
            if etag != digest.hex():
                raise OffloadVerifyError(
                    f"s3://{self._s3.bucket}/{self._key} part {number}: S3's ETag {etag} is "
                    f"not the MD5 {digest.hex()} of what was sent"
                )
        await self._s3.complete_multipart(self._key, self.upload_id, [e for e, _ in parts])
        self.upload_id = None
        combined = hashlib.md5(b"".join(d for _, d in parts), usedforsecurity=False).hexdigest()
        return self._blocks, self._size, f"{combined}-{len(parts)}"

    async def abort(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.upload_id is not None:
            await self._s3.abort_multipart(self._key, self.upload_id)
            self.upload_id = None
