"""The bookie's write-ahead journal: the point where an add becomes durable.

Why this module exists: an add may only be acknowledged once it survives a crash, and one
``fdatasync`` per entry would cap a bookie at the disk's sync rate. So, as in BookKeeper's
``Journal``, a writer thread takes every record waiting in the queue (a *group*, bounded by
``max_group_bytes`` and by how long the oldest record may wait) and writes it with one
``writev``, and a sync thread makes it durable with ``fdatasync``; then, on the event loop,
each waiter's completion callback runs and its future resolves — one future per submitted
batch, not per entry. As with BookKeeper's force-write thread, the next group is written
while the previous one syncs, and one sync covers every group written before it started: the
disk's sync time no longer adds up group after group. The two threads hand groups to each
other directly; the loop is woken once per sync (a round trip through a busy loop per group
written took as long as the write itself).

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
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
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


class _Written:
    """A group the writer thread has written, on its way to the sync thread."""

    __slots__ = ("close_after", "done_at", "fd", "group")

    def __init__(self, fd: int, group: list[_Pending], done_at: Position, close_after: bool):
        self.fd = fd
        self.group = group
        self.done_at = done_at
        """The file and the offset the group ends at."""
        self.close_after = close_after
        """The journal moved to a new file after this group: the sync thread closes ``fd``
        once it has synced it."""


class Journal:
    """Group-committing append-only journal. Create, :func:`replay`, then :meth:`open`.

    Two threads of its own do the disk work, as BookKeeper's journal and force-write
    threads do: the *writer* takes everything queued (a group) and writes it, the *syncer*
    takes every group written since its last ``fdatasync`` and makes them durable with one
    more. Neither waits for the event loop: a group goes from the writer to the syncer
    directly, and the loop only hears of it when it is durable (one ``call_soon_threadsafe``
    per sync, completing its groups in journal order). The loop's part is :meth:`submit`."""

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
        may cover several groups (for the sync latency histogram); ``on_queue(seconds)`` from
        the writer thread with each submitted batch's wait in the queue, when its group is
        taken (BookKeeper's JOURNAL_QUEUE_LATENCY). Both must be thread-safe and quick.
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
        # shared between the loop and the two threads, under the lock
        self._lock = threading.Lock()
        self._queued = threading.Condition(self._lock)  # submit -> writer
        self._queue: deque[_Pending] = deque()
        self._queue_bytes = 0
        self._queue_entries = 0
        self._closing = False
        self._written_ready = threading.Condition(self._lock)  # writer -> syncer
        self._written: deque[_Written] = deque()
        self._writer_done = False
        self._rotated_sizes: dict[int, int] = {}  # seq -> final size, of files rotated out
        # the writer thread's (the loop's before start and after close)
        self._fd = -1
        self._seq = 0
        self._offset = 0
        # the loop's
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._stopped: asyncio.Future[None] | None = None
        self._durable = Position(0, 0)
        self.failed: BaseException | None = None
        """Set by the thread that hit a write, sync or rotation failure: from then on no
        group completes and every submit fails."""
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
        loop = self._loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        self._threads = [
            threading.Thread(target=self._write_loop, name="journal", daemon=True),
            threading.Thread(target=self._sync_loop, name="journal-sync", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    async def close(self) -> None:
        """Write and sync what is queued, complete it, then stop."""
        with self._lock:
            self._closing = True
            self._queued.notify()
        if self._stopped is not None:
            await self._stopped  # after the last group's completion, on the loop
            self._stopped = None
        for thread in self._threads:
            thread.join()
        self._threads = []
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def releasable(self, checkpoint: Position) -> list[Path]:
        """The journal files wholly before ``checkpoint`` (their content is flushed), now
        forgotten: the caller deletes them with :func:`delete_files`, off the event loop (the
        kernel frees a large file's blocks within the unlink: about 100 ms for a full one)."""
        out: list[Path] = []
        with self._lock:  # the writer thread rotates files under it
            for seq in list_files(self._dir):
                if seq == self._seq:
                    continue
                if seq < checkpoint.seq or (
                    seq == checkpoint.seq
                    and checkpoint.offset >= self._rotated_sizes.get(seq, -1) > 0
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
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = _Pending(chunks, nbytes, entries, on_durable, future, time.monotonic())
        with self._lock:
            if self.failed is None and not self._closing:
                self._queue.append(pending)
                self._queue_bytes += nbytes
                self._queue_entries += entries
                self._queued.notify()
                return future
        if self.failed is not None:
            future.set_exception(api.StorageIOError(f"journal failed: {self.failed}"))
        else:
            future.set_exception(api.ReadOnlyError("the journal is closed"))
        return future

    def _take_group(self) -> tuple[list[_Pending], int, int] | None:
        """In the writer thread: wait for adds, then take a group with its bytes and entries
        (None: closed and drained)."""
        queue = self._queue
        with self._lock:
            while not queue and not self._closing:
                self._queued.wait()
            if not queue:
                return None
            if self._max_wait > 0:
                deadline = queue[0].since + self._max_wait
                while not self._closing and self._queue_bytes < self._max_group_bytes:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._queued.wait(remaining)
            group: list[_Pending] = []
            nbytes = entries = 0
            while queue and (not group or nbytes + queue[0].nbytes <= self._max_group_bytes):
                p = queue.popleft()
                group.append(p)
                nbytes += p.nbytes
                entries += p.entries
            self._queue_bytes -= nbytes
            self._queue_entries -= entries
        return group, nbytes, entries

    def _write_loop(self) -> None:
        """The writer thread: write each group, hand it to the syncer, rotate full files."""
        loop = self._loop
        assert loop is not None
        try:
            while (taken := self._take_group()) is not None:
                group = taken[0]
                try:
                    self._write(*taken)
                except Exception as exc:  # a bug: this group and every later one fail
                    log.exception("journal writer failed")
                    failed = self._failure(exc, "journal writer failed")
                    loop.call_soon_threadsafe(self._fail, group, failed, "journal write failed")
        finally:
            with self._lock:
                self._writer_done = True
                self._written_ready.notify()

    def _write(self, group: list[_Pending], nbytes: int, entries: int) -> None:
        loop = self._loop
        assert loop is not None
        now = time.monotonic()
        on_queue = self._on_queue
        bufs: list[Buffer] = []
        for p in group:
            if on_queue is not None:
                on_queue(now - p.since)
            bufs.extend(p.chunks)
        failed = self.failed
        if failed is None:
            try:
                write_all(self._fd, bufs)
            except OSError as exc:
                failed = self._failure(exc, "journal write failed")
        if failed is not None:
            loop.call_soon_threadsafe(self._fail, group, failed, "journal write failed")
            return
        self._offset += nbytes
        self.writes += 1
        self.entries_written += entries
        self.bytes_written += nbytes
        fd, done_at = self._fd, Position(self._seq, self._offset)
        new_fd = -1
        if self._offset >= self._max_file_bytes:
            try:
                new_fd = self._create(self._seq + 1)
            except OSError as exc:
                self._failure(exc, "journal rotation failed")
        with self._lock:
            self._written.append(_Written(fd, group, done_at, new_fd >= 0))
            self._written_ready.notify()
            if new_fd >= 0:
                self._rotated_sizes[self._seq] = self._offset
                self._fd, self._seq, self._offset = new_fd, self._seq + 1, len(MAGIC)

    def _sync_loop(self) -> None:
        """The sync thread: one ``fdatasync`` for every group written since the last one,
        then their completion on the loop, in journal order."""
        loop = self._loop
        assert loop is not None
        written = self._written
        cached: dict[int, int] = {}  # fd -> where its pages not yet dropped start
        try:
            while True:
                with self._lock:
                    while not written and not self._writer_done:
                        self._written_ready.wait()
                    if not written:
                        return
                    batch = list(written)
                    written.clear()
                try:
                    self._sync_batch(batch, cached)
                except Exception as exc:  # a bug: this batch and every later one fail
                    log.exception("journal sync thread failed")
                    self._failure(exc, "journal sync thread failed")
                loop.call_soon_threadsafe(self._synced, batch, self.failed)
        except RuntimeError:  # the loop is closed: nobody waits for the completions
            return
        finally:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_stopped)

    def _sync_batch(self, batch: list[_Written], cached: dict[int, int]) -> None:
        if self.failed is None and self._fsync:
            ends: dict[int, int] = {}  # each file's end, the older file first
            for item in batch:
                ends[item.fd] = item.done_at.offset
            try:
                for fd, end in ends.items():
                    self._sync(fd, end, cached)
            except OSError as exc:
                self._failure(exc, "journal sync failed")
        for item in batch:
            if item.close_after:
                cached.pop(item.fd, None)
                os.close(item.fd)

    def _sync(self, fd: int, end: int, cached: dict[int, int]) -> None:
        """Make ``fd`` durable (it holds at least ``end`` bytes) and, with ``drop_cache``,
        drop its pages from where they may still be cached to ``end``'s folio."""
        started = time.perf_counter()
        os.fdatasync(fd)
        self.fsyncs += 1
        if self._drop_cache:
            # the kernel drops only whole folios (up to FOLIO_SPAN); pages written since the
            # sync began are dirty and stay, so the next drop starts at ``end``'s folio
            os.posix_fadvise(fd, cached.get(fd, 0), 0, os.POSIX_FADV_DONTNEED)
            cached[fd] = end // FOLIO_SPAN * FOLIO_SPAN
        if self._on_sync is not None:
            self._on_sync(time.perf_counter() - started)

    def _failure(self, exc: BaseException, what: str) -> BaseException:
        """In a journal thread: the first failure turns the journal read-only."""
        with self._lock:
            if self.failed is None:
                log.error("%s, the bookie turns read-only: %s", what, exc)
                self.failed = exc
            return self.failed

    # on the loop

    def _fail(self, group: list[_Pending], exc: BaseException, what: str) -> None:
        err = api.StorageIOError(f"{what}: {exc}")
        for p in group:
            if not p.future.done():
                p.future.set_exception(err)

    def _synced(self, batch: list[_Written], failed: BaseException | None) -> None:
        """A sync finished (or was skipped after a failure). Once one has failed, no later
        group completes: a later fdatasync may succeed without the data the failed one
        lost."""
        for item in batch:
            if failed is not None:
                self._fail(item.group, failed, "journal sync failed")
                continue
            for p in item.group:
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
            self._durable = item.done_at

    def _on_stopped(self) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
