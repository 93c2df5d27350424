"""The bookie's write-ahead journal: the point where an add becomes durable.

Why this module exists: an add may only be acknowledged once it survives a crash, and one
``fdatasync`` per entry would cap a bookie at the disk's sync rate. So, as in BookKeeper's
``Journal``, a single writer task takes every record waiting in the queue (a *group*, bounded
by ``max_group_bytes`` and by how long the oldest record may wait), writes the group with one
``writev`` in a dedicated thread (the event loop is never blocked on the disk) and makes it
durable with ``fdatasync`` in a second one, then runs each waiter's completion callback and
resolves its future — one future per submitted batch, not per entry. As with BookKeeper's
force-write thread, the next group is written while the previous one syncs, and one sync
covers every group written before it started: the disk's sync time no longer adds up group
after group.

On disk: ``journal-<seq:016x>.jnl`` files in the journal directory, each starting with
:data:`MAGIC`, then records ``[u32 len][u32 crc32c(payload)][payload]`` (big endian). Payloads
(see :func:`encode_add` and friends) are an *add batch* (one ledger, its LAC and master key,
the entry ids, the data lengths, then the data — one header and one checksum per batch instead
of per entry), a *fence*, a *delete* or an explicit *LAC*. Files rotate at ``max_file_bytes``; the
storage records a checkpoint (:class:`Position`) once the journal's content up to it is in the
entry logs and index, and :meth:`Journal.release` deletes the files before it.

On start, :meth:`Journal.replay` reads from the checkpoint, verifies each record's length and
checksum and hands decoded records to the storage. A torn tail in the newest file — a partial
record or a bad checksum, i.e. a group whose write was cut by a crash and was therefore never
acknowledged — is logged and cut off (the file is truncated); the same in an older file is
corruption and stops the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from awscrt.checksums import crc32c

from magnetar.bookie.storage import api

log = logging.getLogger(__name__)

MAGIC = b"MGJRNL\x00\x01"
HEADER = struct.Struct(">II")  # payload length, crc32c(payload)
_IOV_MAX = 1024

Buffer = bytes | memoryview


FOLIO_SPAN: Final = 2 * 1024 * 1024
"""The largest page-cache folio a file's pages come in (a PMD): POSIX_FADV_DONTNEED drops
only folios wholly inside its range, so a drop restarts at the boundary before the last
one's end."""


def write_all(fd: int, chunks: Sequence[Buffer]) -> None:
    """Write ``chunks`` in order with ``writev``, at most :data:`_IOV_MAX` at a time (the
    kernel copies them: no joined copy is made, and the GIL is released for the copy)."""
    for at in range(0, len(chunks), _IOV_MAX):
        batch = chunks[at : at + _IOV_MAX]
        written = os.writev(fd, batch)
        want = sum(map(len, batch))
        if written < want:  # a short write (rare on a regular file): the rest, in order
            rest = memoryview(b"".join(batch))[written:]
            while rest:
                # the count is bound before the slice: mypyc evaluates a slice bound twice
                # when the sliced object is a memoryview, so ``rest[os.write(...) :]`` would
                # write twice
                n = os.write(fd, rest)
                rest = rest[n:]


# --- record codec (no I/O) ------------------------------------------------------------------

ADD, FENCE, DELETE, LAC = 1, 2, 3, 4
_ADD_HEAD = struct.Struct(">BQqI")  # type, ledger, lac, key length   (+ key, then u32 count)
_COUNT = struct.Struct(">I")
_FENCE_HEAD = struct.Struct(">BQI")  # type, ledger, key length (+ key)
_DELETE = struct.Struct(">BQ")
_LAC_HEAD = struct.Struct(">BQqI")  # type, ledger, lac, key length (+ key)


class AddRecord(NamedTuple):
    ledger_id: int
    lac: int
    master_key: bytes
    entries: list[tuple[int, bytes]]


class FenceRecord(NamedTuple):
    ledger_id: int
    master_key: bytes


class DeleteRecord(NamedTuple):
    ledger_id: int


class LacRecord(NamedTuple):
    ledger_id: int
    lac: int
    master_key: bytes


Record = AddRecord | FenceRecord | DeleteRecord | LacRecord


def frame(payload: bytes) -> bytes:
    """The ``[len][crc]`` header that goes in front of ``payload``."""
    return HEADER.pack(len(payload), crc32c(payload))


def frame_parts(parts: Sequence[Buffer], nbytes: int) -> bytes:
    """The header in front of a payload given as parts (``nbytes`` in all): the checksum
    runs over each part in turn, as over the parts joined."""
    crc = 0
    for part in parts:
        crc = crc32c(part, crc)
    return HEADER.pack(nbytes, crc)


def encode_add(
    ledger_id: int,
    lac: int,
    master_key: bytes,
    entry_ids: Sequence[int],
    datas: Sequence[Buffer],
) -> bytes:
    """One add-batch payload of one ledger: a header, the entry ids and data lengths as two
    packed columns (one ``struct`` call each, not one per entry), then the data back to back."""
    return b"".join(encode_add_parts(ledger_id, lac, master_key, entry_ids, datas))


def encode_add_parts(
    ledger_id: int,
    lac: int,
    master_key: bytes,
    entry_ids: Sequence[int],
    datas: Sequence[Buffer],
) -> list[Buffer]:
    """:func:`encode_add`'s payload as its parts: the head (everything up to the data), then
    each entry's data as given, uncopied (for ``writev``; :func:`frame_parts` frames them)."""
    n = len(entry_ids)
    head = b"".join(
        [
            _ADD_HEAD.pack(ADD, ledger_id, lac, len(master_key)),
            master_key,
            _COUNT.pack(n),
            struct.pack(f">{n}Q", *entry_ids),
            struct.pack(f">{n}I", *map(len, datas)),
        ]
    )
    return [head, *datas]


def encode_fence(ledger_id: int, master_key: bytes) -> bytes:
    return _FENCE_HEAD.pack(FENCE, ledger_id, len(master_key)) + master_key


def encode_delete(ledger_id: int) -> bytes:
    return _DELETE.pack(DELETE, ledger_id)


def encode_lac(ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return _LAC_HEAD.pack(LAC, ledger_id, lac, len(master_key)) + master_key


def decode(payload: bytes) -> Record:
    """Decode one payload; raises :class:`api.StorageCorruptedError` on malformed input."""
    try:
        kind = payload[0]
        if kind == ADD:
            _, ledger_id, lac, klen = _ADD_HEAD.unpack_from(payload, 0)
            pos = _ADD_HEAD.size
            key = payload[pos : pos + klen]
            pos += klen
            (count,) = _COUNT.unpack_from(payload, pos)
            pos += _COUNT.size
            entry_ids = struct.unpack_from(f">{count}Q", payload, pos)
            pos += 8 * count
            lengths = struct.unpack_from(f">{count}I", payload, pos)
            pos += 4 * count
            entries: list[tuple[int, bytes]] = []
            for entry_id, dlen in zip(entry_ids, lengths, strict=True):
                if pos + dlen > len(payload):
                    raise ValueError("entry runs past the record")
                entries.append((entry_id, payload[pos : pos + dlen]))
                pos += dlen
            if pos != len(payload) or len(key) != klen:
                raise ValueError("add record length mismatch")
            return AddRecord(ledger_id, lac, key, entries)
        if kind == FENCE:
            _, ledger_id, klen = _FENCE_HEAD.unpack_from(payload, 0)
            key = payload[_FENCE_HEAD.size :]
            if len(key) != klen:
                raise ValueError("fence record length mismatch")
            return FenceRecord(ledger_id, key)
        if kind == DELETE:
            if len(payload) != _DELETE.size:
                raise ValueError("delete record length mismatch")
            _, ledger_id = _DELETE.unpack(payload)
            return DeleteRecord(ledger_id)
        if kind == LAC:
            _, ledger_id, lac, klen = _LAC_HEAD.unpack_from(payload, 0)
            key = payload[_LAC_HEAD.size :]
            if len(key) != klen:
                raise ValueError("lac record length mismatch")
            return LacRecord(ledger_id, lac, key)
        raise ValueError(f"unknown record type {kind}")
    except (struct.error, IndexError, ValueError) as exc:
        raise api.StorageCorruptedError(f"malformed journal record: {exc}") from exc


# --- files ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A point in the journal: file sequence number and byte offset in that file."""

    seq: int
    offset: int


def file_name(seq: int) -> str:
    return f"journal-{seq:016x}.jnl"


def delete_files(paths: Sequence[Path]) -> None:
    """Unlink ``paths`` (already gone is fine)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def list_files(directory: Path) -> list[int]:
    seqs = []
    for name in os.listdir(directory):
        if name.startswith("journal-") and name.endswith(".jnl"):
            with contextlib.suppress(ValueError):
                seqs.append(int(name[8:-4], 16))
    return sorted(seqs)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: int
    entries: int
    truncated_bytes: int
    """Bytes of torn tail cut from the newest file (0 when it ended cleanly)."""
    end: Position


def replay(directory: Path, start: Position, apply: Callable[[Record], None]) -> ReplayResult:
    """Read every record from ``start`` on, in order, into ``apply``; cut a torn tail.

    Files before ``start.seq`` (already checkpointed) are deleted. Synchronous: run it before
    the writer starts, off the event loop.
    """
    seqs = list_files(directory)
    for seq in seqs:
        if seq < start.seq:
            os.unlink(directory / file_name(seq))
    seqs = [s for s in seqs if s >= start.seq]
    records = entries = truncated = 0
    end = start
    for i, seq in enumerate(seqs):
        last = i == len(seqs) - 1
        path = directory / file_name(seq)
        data = path.read_bytes()
        if data[: len(MAGIC)] != MAGIC:
            if last and len(data) < len(MAGIC) and MAGIC.startswith(data):
                # created but the header never made it: an empty journal file
                log.warning("journal %s: incomplete file header, rewriting it", path)
                path.write_bytes(MAGIC)
                _fsync_path(path)
                end = Position(seq, len(MAGIC))
                truncated += len(data)
                continue
            raise api.StorageCorruptedError(f"journal {path}: bad file header")
        offset = start.offset if seq == start.seq else len(MAGIC)
        offset = max(offset, len(MAGIC))
        size = len(data)
        while offset < size:
            reason = ""
            if offset + HEADER.size > size:
                reason = "partial record header"
            else:
                length, crc = HEADER.unpack_from(data, offset)
                stop = offset + HEADER.size + length
                if length == 0:
                    reason = "empty record"
                elif stop > size:
                    reason = f"partial record ({size - offset} of {stop - offset} bytes)"
                else:
                    payload = data[offset + HEADER.size : stop]
                    if crc32c(payload) != crc:
                        reason = "checksum mismatch"
                    else:
                        record = decode(payload)
                        apply(record)
                        records += 1
                        if isinstance(record, AddRecord):
                            entries += len(record.entries)
                        offset = stop
                        continue
            if not last:
                raise api.StorageCorruptedError(f"journal {path} @{offset}: {reason}")
            log.warning(
                "journal %s: torn tail at offset %d (%s): cutting %d unacknowledged bytes",
                path,
                offset,
                reason,
                size - offset,
            )
            truncated += size - offset
            os.truncate(path, offset)
            _fsync_path(path)
            size = offset
        end = Position(seq, size)
    return ReplayResult(records=records, entries=entries, truncated_bytes=truncated, end=end)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the writer -----------------------------------------------------------------------------


class _Pending:
    __slots__ = ("chunks", "entries", "future", "nbytes", "on_durable", "since")

    def __init__(
        self,
        chunks: Sequence[Buffer],
        nbytes: int,
        entries: int,
        on_durable: Callable[[], None] | None,
        future: asyncio.Future[None],
        since: float,
    ) -> None:
        self.chunks = chunks
        self.nbytes = nbytes
        self.entries = entries
        self.on_durable = on_durable
        self.future = future
        self.since = since


class Journal:
    """Group-committing append-only journal. Create, :func:`replay`, then :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        *,
        max_group_bytes: int,
        max_group_wait_s: float,
        max_file_bytes: int,
        fsync: bool = True,
        drop_cache: bool = False,
        on_sync: Callable[[float], None] | None = None,
        on_queue: Callable[[float], None] | None = None,
    ) -> None:
        """``on_sync(seconds)`` is called from the sync thread after each fdatasync, which
        may cover several groups (for the sync latency histogram); it must be thread-safe
        and quick.
        ``on_queue(seconds)`` is called on the loop with each submitted batch's wait in the
        queue, when its group is taken (BookKeeper's JOURNAL_QUEUE_LATENCY).
        ``drop_cache``: each group's pages leave the page cache once synced (only with
        ``fsync``: unsynced pages are dirty, and the kernel keeps dirty pages)."""
        self._dir = directory
        self._on_sync = on_sync
        self._on_queue = on_queue
        self._max_group_bytes = max_group_bytes
        self._max_wait = max_group_wait_s
        self._max_file_bytes = max_file_bytes
        self._fsync = fsync
        self._drop_cache = drop_cache and fsync
        self._cached_from = 0
        """Where the pages of the current file not yet dropped start (``drop_cache``)."""
        self._queue: deque[_Pending] = deque()
        self._queue_bytes = 0
        self._queue_entries = 0
        self._wakeup = asyncio.Event()
        self._full = asyncio.Event()
        self._fd = -1
        self._seq = 0
        self._offset = 0
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="journal")
        self._sync_executor = ThreadPoolExecutor(1, thread_name_prefix="journal-sync")
        self._written_end = 0  # bytes written over the journal's life (all files)
        self._synced_end = 0  # of those, covered by a finished fdatasync
        self._last_sync: asyncio.Future[None] | None = None
        self._durable = Position(0, 0)
        self._rotated_sizes: dict[int, int] = {}  # seq -> final size, of files rotated out
        self.failed: BaseException | None = None
        # counters
        self.writes = 0
        self.fsyncs = 0
        self.entries_written = 0
        self.bytes_written = 0

    # state

    @property
    def durable_position(self) -> Position:
        """Everything before this position is durable and its callbacks have run."""
        return self._durable

    @property
    def queue_entries(self) -> int:
        return self._queue_entries

    @property
    def queue_bytes(self) -> int:
        return self._queue_bytes

    def file_count(self) -> int:
        return len(list_files(self._dir))

    # lifecycle

    def open(self) -> None:
        """Start a new journal file after the existing ones (synchronous, before start())."""
        seqs = list_files(self._dir)
        self._seq = (seqs[-1] + 1) if seqs else 1
        self._fd = self._create(self._seq)
        self._offset = len(MAGIC)
        self._durable = Position(self._seq, self._offset)

    def _create(self, seq: int) -> int:
        path = self._dir / file_name(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(fd, MAGIC)
        if self._fsync:
            os.fdatasync(fd)
            fsync_dir(self._dir)
        return fd

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal-writer")

    async def close(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self._syncs_done()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._executor.shutdown(wait=True)
        self._sync_executor.shutdown(wait=True)

    async def _syncs_done(self) -> None:
        """Until the last sync submitted has finished (its group completed or failed)."""
        if self._last_sync is not None:
            await asyncio.wait([self._last_sync])
            await asyncio.sleep(0)  # its done-callback (the group's completion) runs first

    def releasable(self, checkpoint: Position) -> list[Path]:
        """The journal files wholly before ``checkpoint`` (their content is flushed), now
        forgotten: the caller deletes them with :func:`delete_files`, off the event loop (the
        kernel frees a large file's blocks within the unlink: about 100 ms for a full one)."""
        out: list[Path] = []
        for seq in list_files(self._dir):
            if seq == self._seq:
                continue
            if seq < checkpoint.seq or (
                seq == checkpoint.seq and checkpoint.offset >= self._rotated_sizes.get(seq, -1) > 0
            ):
                self._rotated_sizes.pop(seq, None)
                out.append(self._dir / file_name(seq))
        return out

    # the hot path

    def submit(
        self,
        chunks: Sequence[Buffer],
        nbytes: int,
        entries: int,
        on_durable: Callable[[], None] | None = None,
    ) -> asyncio.Future[None]:
        """Queue already framed records; the future resolves once they are durable, right
        after ``on_durable`` ran (on the loop, in journal order)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self.failed is not None:
            future.set_exception(api.StorageIOError(f"journal failed: {self.failed}"))
            return future
        if self._closing:
            future.set_exception(api.ReadOnlyError("the journal is closed"))
            return future
        self._queue.append(_Pending(chunks, nbytes, entries, on_durable, future, loop.time()))
        self._queue_bytes += nbytes
        self._queue_entries += entries
        self._wakeup.set()
        if self._queue_bytes >= self._max_group_bytes:
            self._full.set()
        return future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while True:
            if not queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            # let the callers woken by the previous group queue their next batch
            await asyncio.sleep(0)
            if self._max_wait > 0 and self._queue_bytes < self._max_group_bytes:
                delay = queue[0].since + self._max_wait - loop.time()
                if delay > 0 and not self._closing:
                    self._full.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._full.wait()
            group: list[_Pending] = []
            bufs: list[Buffer] = []
            nbytes = entries = 0
            on_queue = self._on_queue
            now = loop.time()
            while queue and (not group or nbytes + queue[0].nbytes <= self._max_group_bytes):
                p = queue.popleft()
                if on_queue is not None:
                    on_queue(now - p.since)
                group.append(p)
                bufs.extend(p.chunks)
                nbytes += p.nbytes
                entries += p.entries
            self._queue_bytes -= nbytes
            self._queue_entries -= entries
            if self._queue_bytes < self._max_group_bytes:
                self._full.clear()
            fd = self._fd
            try:
                if self.failed is not None:
                    raise self.failed
                await loop.run_in_executor(self._executor, write_all, fd, bufs)
            except Exception as exc:
                self._fail(group, exc, "journal write failed")
                continue
            self._offset += nbytes
            self._written_end += nbytes
            self.writes += 1
            self.entries_written += entries
            self.bytes_written += nbytes
            done_at = Position(self._seq, self._offset)
            if self._fsync:
                sync = loop.run_in_executor(self._sync_executor, self._sync, fd, self._written_end)
                sync.add_done_callback(functools.partial(self._on_synced, group, done_at))
                self._last_sync = sync
            else:
                self._complete(group, done_at)
            if self._offset >= self._max_file_bytes:
                # the old file's syncs finish before its descriptor closes
                await self._syncs_done()
                try:
                    seq = self._seq + 1
                    new_fd = await loop.run_in_executor(self._executor, self._create, seq)
                    os.close(self._fd)
                    self._cached_from = 0
                    self._rotated_sizes[self._seq] = self._offset
                    self._fd, self._seq, self._offset = new_fd, seq, len(MAGIC)
                except OSError as exc:
                    log.error("journal rotation failed, the bookie turns read-only: %s", exc)
                    self.failed = exc

    def _fail(self, group: list[_Pending], exc: BaseException, what: str) -> None:
        if self.failed is None:
            log.error("%s, the bookie turns read-only: %s", what, exc)
            self.failed = exc
        err = api.StorageIOError(f"{what}: {exc}")
        for p in group:
            if not p.future.done():
                p.future.set_exception(err)

    def _complete(self, group: list[_Pending], done_at: Position) -> None:
        """On the loop, in journal order: the group is durable."""
        for p in group:
            try:
                if p.on_durable is not None:
                    p.on_durable()
            except Exception as exc:
                log.exception("journal completion callback failed")
                if not p.future.done():
                    p.future.set_exception(exc)
                continue
            if not p.future.done():
                p.future.set_result(None)
        self._durable = done_at

    def _on_synced(
        self, group: list[_Pending], done_at: Position, sync: asyncio.Future[None]
    ) -> None:
        """A group's sync finished (syncs finish in the order they were submitted). Once one
        has failed, no later group completes: a later fdatasync may succeed without the data
        the failed one lost."""
        exc = sync.exception() if not sync.cancelled() else asyncio.CancelledError()
        if exc is None and self.failed is not None:
            exc = self.failed
        if exc is not None:
            self._fail(group, exc, "journal sync failed")
            return
        self._complete(group, done_at)

    def _sync(self, fd: int, end: int) -> None:
        """In the sync thread: make everything written so far durable, unless a sync that
        started after ``end`` was written already did."""
        if self._synced_end >= end:
            return
        # the file's end first: the loop moves it before ``_written_end``, so read in this
        # order the drop never reaches past what the sync covers
        file_end = self._offset
        target = self._written_end
        started = time.perf_counter()
        os.fdatasync(fd)
        self.fsyncs += 1
        self._synced_end = target
        if self._drop_cache:
            # from where pages may still be cached to the end of the file: the kernel drops
            # only whole folios (up to FOLIO_SPAN), and pages written since are dirty and stay
            os.posix_fadvise(fd, self._cached_from, 0, os.POSIX_FADV_DONTNEED)
            self._cached_from = file_end // FOLIO_SPAN * FOLIO_SPAN
        if self._on_sync is not None:
            self._on_sync(time.perf_counter() - started)
