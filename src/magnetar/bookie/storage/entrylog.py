"""Entry logs: where entries live once they have left the journal and the write cache.

Why this module exists: the journal is ordered by arrival (all ledgers interleaved) and is
deleted once checkpointed; entries need a home that is read-friendly and reclaimable. As in
BookKeeper's ``EntryLogger``, each flush appends the write cache's content, sorted by ledger
then entry, to the current entry log (``<id:08x>.log`` in the data directory), which rotates at
a size. Sorting makes a ledger's entries contiguous, so range reads and compaction scans are
sequential. Records are ``[u32 len][u32 crc32c][u64 ledger][u64 entry][data]`` (big endian,
``len`` and the checksum cover ledger, entry and data), so a read verifies both the bytes and
that the index pointed at the right entry.

The writer is used by one thread at a time (the storage's flush/compaction thread); the reader
is shared by read threads and keeps one file descriptor per log, closed only when no read is
in flight (an unlinked log stays readable through an open descriptor).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from awscrt.checksums import crc32c

from magnetar.bookie.storage import api, journal

MAGIC = b"MGELOG\x00\x01"
RECORD_HEAD = struct.Struct(">IIQQ")  # len, crc, ledger, entry
_KEY = struct.Struct(">QQ")  # also the index key of the entry
LOCATION = struct.Struct(">IQI")  # the index value: log id, offset, size
_PREFIX = struct.Struct(">II")
_WRITE_BUFFER = 4 * 1024 * 1024
SCAN_CHUNK = 4 * 1024 * 1024
"""Bytes a scan reads at a time (a record larger than this is read whole)."""


class Location(NamedTuple):
    """Where one entry's record is: log id, byte offset, whole record size."""

    log_id: int
    offset: int
    size: int


def file_name(log_id: int) -> str:
    return f"{log_id:08x}.log"


def list_logs(directory: Path) -> list[int]:
    ids = []
    for name in os.listdir(directory):
        if name.endswith(".log") and len(name) == 12:
            with contextlib.suppress(ValueError):
                ids.append(int(name[:8], 16))
    return sorted(ids)


def encode_record(
    ledger_id: int, entry_id: int, data: bytes | memoryview
) -> tuple[bytes, bytes | memoryview]:
    """The 24-byte record head and the data (no copy of ``data``)."""
    key = _KEY.pack(ledger_id, entry_id)
    crc = crc32c(data, crc32c(key))
    return _PREFIX.pack(16 + len(data), crc) + key, data


def decode_record(record: bytes | memoryview, ledger_id: int, entry_id: int, where: str) -> bytes:
    """Verify a whole record read back from a log (or a view of it in a larger read);
    return its data, the one copy made of it (the checksum runs over the key and the data
    apart, as ``encode_record`` computes it)."""
    if len(record) < RECORD_HEAD.size:
        raise api.StorageCorruptedError(f"{where}: short record ({len(record)} bytes)")
    length, crc, lid, eid = RECORD_HEAD.unpack_from(record, 0)
    if length != len(record) - 8:
        raise api.StorageCorruptedError(f"{where}: record length {length} != {len(record) - 8}")
    data = bytes(record[RECORD_HEAD.size :])
    if crc32c(data, crc32c(record[8 : RECORD_HEAD.size])) != crc:
        raise api.StorageCorruptedError(f"{where}: checksum mismatch")
    if lid != ledger_id or eid != entry_id:
        raise api.StorageCorruptedError(
            f"{where}: holds {lid}/{eid}, the index said {ledger_id}/{entry_id}"
        )
    return data


class EntryLogWriter:
    """Appends records to the current log, rotating at ``max_bytes``. One thread at a time."""

    def __init__(
        self,
        directory: Path,
        *,
        next_log_id: int,
        max_bytes: int,
        page_cache_bytes: int | None = None,
    ) -> None:
        """``page_cache_bytes``: after each :meth:`sync`, the pages of all but the last this
        many bytes synced leave the page cache (None: the kernel decides)."""
        self._dir = directory
        self._max_bytes = max_bytes
        self._keep = page_cache_bytes
        self._cached_from = 0
        """Where in the current log the pages synced but not yet dropped start."""
        self._cached: deque[tuple[int, int, int]] = deque()
        """Synced ranges whose pages may be cached, oldest first: (log id, start, end)."""
        self._cached_bytes = 0
        self._next_id = next_log_id
        self._fd = -1
        self._log_id = -1
        self._offset = 0
        self._buf: list[bytes | memoryview] = []
        self._buf_bytes = 0
        self._unsynced: list[tuple[int, int, int, int]] = []
        """Rotated-out logs not yet synced: (fd, log id, cached from, size)."""
        self._dir_dirty = False

    @property
    def current_log_id(self) -> int:
        """The log being appended to (-1 before the first append)."""
        return self._log_id

    def _open_next(self) -> None:
        log_id = self._next_id
        self._next_id += 1
        fd = os.open(self._dir / file_name(log_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, MAGIC)
        self._fd, self._log_id, self._offset = fd, log_id, len(MAGIC)
        self._cached_from = 0
        self._dir_dirty = True

    def append(self, ledger_id: int, entry_id: int, data: bytes | memoryview) -> Location:
        size = RECORD_HEAD.size + len(data)
        if self._fd < 0:
            self._open_next()
        elif self._offset + size > self._max_bytes and self._offset > len(MAGIC):
            self._write_buffer()
            self._rotate_out()
            self._open_next()
        head, _ = encode_record(ledger_id, entry_id, data)
        loc = Location(self._log_id, self._offset, size)
        self._buf.append(head)
        self._buf.append(data)
        self._buf_bytes += size
        self._offset += size
        if self._buf_bytes >= _WRITE_BUFFER:
            self._write_buffer()
        return loc

    def append_ledger(
        self,
        ledger_id: int,
        entries: Mapping[int, bytes | memoryview],
        locations: list[tuple[bytes, bytes]],
    ) -> list[tuple[int, int]]:
        """Append every entry of one ledger in entry order (the flush's inner loop, kept free of
        per-entry calls). Adds (index key, index value) pairs to ``locations``; returns the
        bytes written per log as [(log id, bytes)]."""
        usage: list[tuple[int, int]] = []
        pack_key = _KEY.pack
        pack_prefix = _PREFIX.pack
        pack_location = LOCATION.pack
        crc = crc32c
        add_location = locations.append
        buf = self._buf
        add = buf.append
        max_bytes = self._max_bytes
        if self._fd < 0:
            self._open_next()
        log_id, offset, pending = self._log_id, self._offset, self._buf_bytes
        written = 0
        for entry_id in sorted(entries):
            data = entries[entry_id]
            size = 24 + len(data)
            if offset + size > max_bytes and offset > len(MAGIC):
                if written:
                    usage.append((log_id, written))
                    written = 0
                self._offset, self._buf_bytes = offset, pending
                self._write_buffer()
                self._rotate_out()
                self._open_next()
                log_id, offset, pending = self._log_id, self._offset, 0
            key = pack_key(ledger_id, entry_id)
            add(pack_prefix(16 + len(data), crc(data, crc(key))) + key)
            add(data)
            add_location((key, pack_location(log_id, offset, size)))
            offset += size
            written += size
            pending += size
            if pending >= _WRITE_BUFFER:
                self._write_buffer()
                pending = 0
        self._offset, self._buf_bytes = offset, pending
        if written:
            usage.append((log_id, written))
        return usage

    def _rotate_out(self) -> None:
        self._unsynced.append((self._fd, self._log_id, self._cached_from, self._offset))

    def _write_buffer(self) -> None:
        if not self._buf:
            return
        try:
            journal.write_all(self._fd, self._buf)
        finally:
            self._buf.clear()
            self._buf_bytes = 0

    def sync(self) -> None:
        """Make everything appended so far durable (data, rotated logs, new directory entries);
        then, with ``page_cache_bytes``, the older synced pages out of the page cache."""
        self._write_buffer()
        synced: list[tuple[int, int, int]] = []
        for fd, log_id, start, end in self._unsynced:
            os.fdatasync(fd)
            os.close(fd)
            synced.append((log_id, start, end))
        self._unsynced.clear()
        if self._fd >= 0:
            os.fdatasync(self._fd)
            synced.append((self._log_id, self._cached_from, self._offset))
            self._cached_from = self._offset
        if self._dir_dirty:
            journal.fsync_dir(self._dir)
            self._dir_dirty = False
        if self._keep is not None:
            self._drop(synced)

    def _drop(self, synced: list[tuple[int, int, int]]) -> None:
        """Take the pages of the oldest synced bytes out of the page cache until only the
        last ``page_cache_bytes`` may remain. A drop starts at the folio boundary before its
        range (``journal.FOLIO_SPAN``): the kernel drops only whole folios."""
        keep = self._keep
        assert keep is not None
        cached = self._cached
        for log_id, start, end in synced:
            if end > start:
                cached.append((log_id, start, end))
                self._cached_bytes += end - start
        span = journal.FOLIO_SPAN
        while cached and self._cached_bytes > keep:
            log_id, start, end = cached.popleft()
            cut = min(end, start + self._cached_bytes - keep)
            self._cached_bytes -= cut - start
            if cut < end:
                cached.appendleft((log_id, cut, end))
            first = start // span * span
            # a whole range: through the folio its end falls in (at most a folio of the next
            # range goes with it)
            stop = cut if cut < end else -(-cut // span) * span
            if log_id == self._log_id and self._fd >= 0:
                os.posix_fadvise(self._fd, first, stop - first, os.POSIX_FADV_DONTNEED)
                continue
            try:
                fd = os.open(self._dir / file_name(log_id), os.O_RDONLY)
            except FileNotFoundError:
                continue  # compacted away meanwhile
            try:
                os.posix_fadvise(fd, first, stop - first, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def roll(self) -> None:
        """Close the current log (synced) so that the next append starts a new one."""
        self.sync()
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._log_id, self._offset = -1, -1, 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sync()
        for fd in [*(u[0] for u in self._unsynced), self._fd]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._unsynced.clear()
        self._fd = -1


class ScannedRecord(NamedTuple):
    ledger_id: int
    entry_id: int
    location: Location
    data: bytes


class EntryLogReader:
    """Reads records back. Thread-safe; descriptors are cached per log."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def _fd(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        if fd is None:
            with self._lock:
                fd = self._fds.get(log_id)
                if fd is None:
                    fd = os.open(self._dir / file_name(log_id), os.O_RDONLY)
                    self._fds[log_id] = fd
        return fd

    def read(self, ledger_id: int, entry_id: int, loc: Location) -> bytes:
        record = os.pread(self._fd(loc.log_id), loc.size, loc.offset)
        return decode_record(
            record, ledger_id, entry_id, f"entry log {loc.log_id:08x} @{loc.offset}"
        )

    def read_many(self, ledger_id: int, wanted: list[tuple[int, Location]]) -> list[bytes]:
        """Read several entries of one ledger; adjacent records are read with one pread."""
        out: list[bytes] = []
        i = 0
        n = len(wanted)
        while i < n:
            _, first = wanted[i]
            j = i + 1
            end = first.offset + first.size
            while (
                j < n
                and wanted[j][1].log_id == first.log_id
                and wanted[j][1].offset == end
                and end - first.offset < _WRITE_BUFFER
            ):
                end += wanted[j][1].size
                j += 1
            if j == i + 1:
                out.append(self.read(ledger_id, wanted[i][0], first))
            else:
                span = os.pread(self._fd(first.log_id), end - first.offset, first.offset)
                view = memoryview(span)
                for entry_id, loc in wanted[i:j]:
                    start = loc.offset - first.offset
                    out.append(
                        decode_record(
                            view[start : start + loc.size],
                            ledger_id,
                            entry_id,
                            f"entry log {loc.log_id:08x} @{loc.offset}",
                        )
                    )
            i = j
        return out

    def scan(
        self,
        log_id: int,
        *,
        keep: Callable[[int, int, Location], bool] | None = None,
        pace: Callable[[], None] | None = None,
    ) -> Iterator[ScannedRecord]:
        """Every record of a log in file order. A partial record at the very end (a flush cut
        by a crash, never indexed) ends the scan; a bad record before the end raises.

        The log is read in pieces of ``SCAN_CHUNK`` bytes (a whole log in one buffer cost a
        pause of tens of milliseconds for every thread of the process when it was freed).
        ``keep(ledger, entry, location)``, when given, is asked from the record's header
        alone: a record it refuses is stepped over without being read, copied or
        checksummed (compaction skips the garbage it is collecting). ``pace()`` is called
        between records, for the caller to share the interpreter with the threads serving
        clients."""
        path = self._dir / file_name(log_id)
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if os.pread(fd, len(MAGIC), 0) != MAGIC:
                raise api.StorageCorruptedError(f"entry log {path}: bad file header")
            buf, buf_at = b"", 0  # a piece of the file and the offset it starts at
            offset = len(MAGIC)
            while offset + RECORD_HEAD.size <= size:
                if pace is not None:
                    pace()
                if offset + RECORD_HEAD.size > buf_at + len(buf):
                    buf, buf_at = os.pread(fd, SCAN_CHUNK, offset), offset
                length, crc, lid, eid = RECORD_HEAD.unpack_from(buf, offset - buf_at)
                stop = offset + 8 + length
                if length < 16 or stop > size:
                    return  # torn tail of an interrupted flush
                where = Location(log_id, offset, stop - offset)
                offset = stop
                if keep is not None and not keep(lid, eid, where):
                    continue
                if stop > buf_at + len(buf):
                    buf, buf_at = (
                        os.pread(fd, max(SCAN_CHUNK, where.size), where.offset),
                        where.offset,
                    )
                body = buf[where.offset + 8 - buf_at : stop - buf_at]
                if crc32c(body) != crc:
                    if stop == size:
                        return
                    raise api.StorageCorruptedError(
                        f"entry log {path} @{where.offset}: checksum mismatch"
                    )
                yield ScannedRecord(lid, eid, where, body[16:])
        finally:
            os.close(fd)

    def forget(self, log_ids: list[int]) -> list[int]:
        """Stop reading the logs through their cached descriptors (logs that were deleted: a
        later read opens the file again, or finds it gone) and return those descriptors for
        :func:`close_fds`. Call with no read in flight. The descriptors are not closed here:
        the last close of an unlinked log is where the kernel frees its blocks (hundreds of ms
        for a few GB), which must not happen on the event loop."""
        fds: list[int] = []
        with self._lock:
            for log_id in log_ids:
                fd = self._fds.pop(log_id, None)
                if fd is not None:
                    fds.append(fd)
        return fds

    def close(self) -> None:
        close_fds(self.forget(list(self._fds)))


def close_fds(fds: list[int]) -> None:
    """Close descriptors :meth:`EntryLogReader.forget` returned (in a thread of the
    storage's, not on the event loop)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
