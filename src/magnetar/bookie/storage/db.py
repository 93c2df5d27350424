"""DbLedgerStorage: the default :class:`api.LedgerStorage` — journal + entry logs + LMDB index.

Why this module exists: it is the one place that ties the pieces together and owns the rules
between them (BookKeeper's ``DbLedgerStorage`` + ``Bookie``):

* **Add**: validate each entry against the ledger's state (deleted, master key, fenced, size)
  on the loop; encode the accepted ones as one journal record per run of one ledger; submit the
  whole call as one journal item (one future); when the group is durable the journal thread's
  completion runs :meth:`DbLedgerStorage._apply_adds` on the loop, which puts the entries in the
  write cache and raises the ledger's LAC / last entry — in the same loop step as the journal's
  durable position advances, so a flush's checkpoint never passes an entry it did not take.
* **Flush** (size-triggered, periodic, on close): swap the write cache, write it sorted to the
  entry logs and ``fdatasync``, commit locations + ledger records + deletions + log usage +
  the checkpoint in one LMDB transaction, then delete journal files before the checkpoint.
* **Read**: write cache, then the cache being flushed, then the read cache, then index + entry
  log (in a read thread).
* **Fence / LAC / delete**: journaled and synced before returning, so they survive a crash;
  they reach LMDB at the next flush.
* **GC**: :mod:`compaction`, under the flush lock. **Disk full**: read-only above the threshold.

Lock/await ordering: all state lives on the event loop; the flush lock serialises flush and
compaction (they own the entry log writer and the LMDB write side, used from one flush thread);
the journal has its own thread; reads use a small pool and never take the flush lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import lmdb

from magnetar.bookie.storage import api, cache, compaction, disk, entrylog, index, journal
from magnetar.bookie.storage.config import BookieStorageConfig

log = logging.getLogger(__name__)

NO_ENTRY = api.NO_ENTRY
_JOURNAL_PARTS_MIN = 4096
"""Average entry size from which a journal record's entries are written uncopied."""


class _Ledger:
    """In-memory state of one ledger (the source of truth while running)."""

    __slots__ = ("deleted", "fenced", "lac", "last_entry", "master_key")

    def __init__(
        self,
        master_key: bytes | None,
        *,
        fenced: bool = False,
        deleted: bool = False,
        lac: int = NO_ENTRY,
        last_entry: int = NO_ENTRY,
    ) -> None:
        self.master_key = master_key
        self.fenced = fenced
        self.deleted = deleted
        self.lac = lac
        self.last_entry = last_entry

    def meta(self) -> index.LedgerMeta:
        return index.LedgerMeta(
            self.master_key, self.fenced, self.deleted, self.lac, self.last_entry
        )

    @classmethod
    def from_meta(cls, meta: index.LedgerMeta) -> _Ledger:
        return cls(
            meta.master_key,
            fenced=meta.fenced,
            deleted=meta.deleted,
            lac=meta.lac,
            last_entry=meta.last_entry,
        )


_NO_LEDGER = _Ledger(None)  # placeholder before the first entry of a batch

# (ledger state, ledger id, lac, entry ids, datas, record size, highest entry)
_Run = tuple[_Ledger, int, int, list[int], list[cache.Data], int, int]


class DbLedgerStorage:
    """See the module docstring. ``await start()`` before use, ``await close()`` after."""

    def __init__(
        self,
        cfg: BookieStorageConfig,
        *,
        on_journal_sync: Callable[[float], None] | None = None,
        on_journal_queue: Callable[[float], None] | None = None,
    ) -> None:
        self._cfg = cfg
        self._entry_dir = cfg.data_dir / "entrylogs"
        self._index_dir = cfg.data_dir / "index"
        self._max_entry = cfg.max_entry_bytes
        self._ledgers: dict[int, _Ledger] = {}
        self._cache = cache.WriteCache()
        self._flushing: cache.WriteCache | None = None
        self._read_cache = cache.ReadCache(cfg.read_cache_max_bytes)
        self._dirty: set[int] = set()
        self._pending_deletes: set[int] = set()
        self._log_usage: dict[int, dict[int, int]] = {}
        self._journal = journal.Journal(
            cfg.journal_dir,
            max_group_bytes=cfg.journal_max_group_bytes,
            max_group_wait_s=cfg.journal_max_group_wait_ms / 1000.0,
            max_file_bytes=cfg.journal_max_file_bytes,
            fsync=cfg.journal_fsync,
            drop_cache=cfg.journal_remove_from_page_cache,
            on_sync=on_journal_sync,
            on_queue=on_journal_queue,
        )
        self._idx: index.Index
        self._writer: entrylog.EntryLogWriter
        self._reader: entrylog.EntryLogReader
        self._flush_lock = asyncio.Lock()
        self._flush_wakeup = asyncio.Event()
        self._flush_done = asyncio.Event()
        self._stopping = asyncio.Event()
        self._flush_pool = ThreadPoolExecutor(1, thread_name_prefix="bookie-flush")
        self._read_pool = ThreadPoolExecutor(2, thread_name_prefix="bookie-read")
        self._tasks: list[asyncio.Task[None]] = []
        self._disk_read_only = False
        self._disk_usage = 0.0
        self._io_failed: BaseException | None = None
        self._reads_in_flight = 0
        self._retired_logs: list[int] = []
        self._started = False
        self._closed = False
        self._flushes = 0
        self._compactions = 0
        self._compacted_logs = 0

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("storage already started")
        self._started = True
        loop = asyncio.get_running_loop()
        failed: BaseException | None = None
        try:
            await loop.run_in_executor(self._flush_pool, self._open_sync)
        except BaseException as exc:
            failed = exc
        if failed is not None:  # undone outside the handler: structure/test_compiled_handlers.py
            self._closed = True
            await loop.run_in_executor(self._flush_pool, self._close_sync)
            self._flush_pool.shutdown(wait=True)
            self._read_pool.shutdown(wait=True)
            await self._journal.close()
            raise failed
        self._journal.start()
        self._check_disk()
        self._tasks = [
            loop.create_task(self._flush_loop(), name="bookie-flush"),
            loop.create_task(self._gc_loop(), name="bookie-gc"),
            loop.create_task(self._disk_loop(), name="bookie-disk"),
        ]

    def _open_sync(self) -> None:
        cfg = self._cfg
        cfg.journal_dir.mkdir(parents=True, exist_ok=True)
        self._entry_dir.mkdir(parents=True, exist_ok=True)
        self._idx = index.Index(self._index_dir, map_size=cfg.index_map_size)
        self._ledgers = {lid: _Ledger.from_meta(m) for lid, m in self._idx.load_ledgers().items()}
        self._log_usage = self._idx.load_log_usage()
        logs = entrylog.list_logs(self._entry_dir)
        next_id = max([0, *logs, *self._log_usage]) + 1
        for log_id in logs:
            if log_id not in self._log_usage:  # written by a flush that never committed
                log.warning("removing unindexed entry log %08x", log_id)
                os.unlink(self._entry_dir / entrylog.file_name(log_id))
        for log_id in [i for i in self._log_usage if i not in logs]:
            log.error("entry log %08x is in the index but missing on disk", log_id)
        self._writer = entrylog.EntryLogWriter(
            self._entry_dir,
            next_log_id=next_id,
            max_bytes=cfg.entry_log_max_bytes,
            page_cache_bytes=cfg.entry_log_page_cache_bytes,
        )
        self._reader = entrylog.EntryLogReader(self._entry_dir)
        checkpoint = self._idx.checkpoint() or journal.Position(0, 0)
        result = journal.replay(cfg.journal_dir, checkpoint, self._replay_record)
        log.info(
            "bookie storage open: %d ledgers, %d entry logs; journal replay from %s: "
            "%d records, %d entries, %d torn bytes cut",
            len(self._ledgers),
            len(self._log_usage),
            checkpoint,
            result.records,
            result.entries,
            result.truncated_bytes,
        )
        self._journal.open()

    def _replay_record(self, record: journal.Record) -> None:
        lid = record.ledger_id
        st = self._ledgers.get(lid)
        if st is None:
            key = None if isinstance(record, journal.DeleteRecord) else record.master_key
            st = self._ledgers[lid] = _Ledger(key)
        self._dirty.add(lid)
        if isinstance(record, journal.AddRecord):
            if st.deleted or not record.entries:
                return
            if st.master_key is None:
                st.master_key = record.master_key
            eids = [e for e, _ in record.entries]
            datas = [d for _, d in record.entries]
            self._cache.put_many(lid, eids, datas, sum(map(len, datas)))
            st.lac = max(st.lac, record.lac)
            st.last_entry = max(st.last_entry, max(e for e, _ in record.entries))
        elif isinstance(record, journal.FenceRecord):
            st.fenced = True
            if st.master_key is None:
                st.master_key = record.master_key
        elif isinstance(record, journal.DeleteRecord):
            st.deleted = True
            self._cache.drop_ledger(lid)
            self._pending_deletes.add(lid)
        else:
            st.lac = max(st.lac, record.lac)

    async def close(self, *, flush: bool = True) -> None:
        """Stop; ``flush=False`` leaves the write cache to journal replay (crash-like, tests)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._flush_wakeup.set()
        if not self._started:
            return
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._journal.close()
        if flush and self._io_failed is None:
            async with self._flush_lock:
                try:
                    await self._flush_locked()
                except Exception:
                    log.exception("final flush failed; the journal will be replayed")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._flush_pool, self._close_sync)
        self._flush_pool.shutdown(wait=True)
        self._read_pool.shutdown(wait=True)

    def _close_sync(self) -> None:
        # attributes are missing when start() failed half-way
        for name in ("_writer", "_reader", "_idx"):
            part = getattr(self, name, None)
            if part is not None:
                part.close()

    # --- state ------------------------------------------------------------------------------

    @property
    def is_read_only(self) -> bool:
        return (
            self._closed
            or self._disk_read_only
            or self._io_failed is not None
            or self._journal.failed is not None
        )

    def _read_only_error(self) -> api.StorageError:
        if self._closed:
            return api.ReadOnlyError("the bookie storage is closed")
        if self._io_failed is not None or self._journal.failed is not None:
            return api.StorageIOError(
                f"the bookie had a disk failure: {self._io_failed or self._journal.failed}"
            )
        return api.ReadOnlyError(
            f"disk usage {self._disk_usage:.1%} is over the threshold "
            f"{self._cfg.disk_usage_threshold:.1%}: the bookie is read-only"
        )

    def _ledger(self, ledger_id: int) -> _Ledger:
        st = self._ledgers.get(ledger_id)
        if st is None or st.deleted:
            raise api.NoSuchLedgerError(f"ledger {ledger_id} is not on this bookie")
        return st

    # --- adds -------------------------------------------------------------------------------

    async def add_entries(self, entries: Sequence[api.AddRequest]) -> list[api.AddResult]:
        if self.is_read_only:
            ro_err = self._read_only_error()
            return [api.AddResult(r.ledger_id, r.entry_id, ro_err) for r in entries]
        cfg = self._cfg
        while (
            self._flushing is not None
            and self._cache.bytes + self._flushing.bytes >= cfg.write_cache_max_bytes
        ):  # back-pressure: both caches full, wait for the flush
            await self._flush_done.wait()
        ledgers = self._ledgers
        max_entry = self._max_entry
        failed: dict[int, api.StorageError] | None = None
        chunks: list[journal.Buffer] = []
        runs: list[_Run] = []
        total = accepted = 0
        st = _NO_LEDGER
        cur: int | None = None
        run_lid = 0
        key = b""
        blocked = False  # the current ledger refuses non-recovery adds (fenced) or all (deleted)
        eids: list[int] = []
        datas: list[cache.Data] = []
        run_lac = NO_ENTRY
        for i, (lid, eid, mkey, lac, data, recovery) in enumerate(entries):
            if lid != cur:
                if eids:
                    total += self._encode_run(chunks, runs, st, run_lid, run_lac, key, eids, datas)
                    accepted += len(eids)
                    eids, datas = [], []
                cur = run_lid = lid
                found = ledgers.get(lid)
                if found is None:
                    found = ledgers[lid] = _Ledger(mkey)
                elif found.master_key is None and not found.deleted:
                    found.master_key = mkey
                st = found
                key = st.master_key or b""
                blocked = st.deleted or st.fenced
                run_lac = NO_ENTRY
            if mkey != key or (blocked and (not recovery or st.deleted)):
                if failed is None:
                    failed = {}
                failed[i] = self._refusal(st, lid, mkey)
                continue
            if len(data) > max_entry:
                if failed is None:
                    failed = {}
                failed[i] = api.EntryTooLargeError(
                    f"entry {lid}/{eid} has {len(data)} bytes, more than {max_entry}"
                )
                continue
            eids.append(eid)
            datas.append(data)
            if lac > run_lac:
                run_lac = lac
        if eids:
            total += self._encode_run(chunks, runs, st, run_lid, run_lac, key, eids, datas)
            accepted += len(eids)
        if accepted:
            try:
                await self._journal.submit(
                    chunks, total, accepted, functools.partial(self._apply_adds, runs)
                )
            except api.StorageError as exc:
                return [
                    api.AddResult(r.ledger_id, r.entry_id, failed.get(i, exc) if failed else exc)
                    for i, r in enumerate(entries)
                ]
        new = tuple.__new__
        if failed is None:
            return [new(api.AddResult, (r[0], r[1], None)) for r in entries]
        get = failed.get
        return [new(api.AddResult, (r[0], r[1], get(i))) for i, r in enumerate(entries)]

    @staticmethod
    def _refusal(st: _Ledger, ledger_id: int, master_key: bytes) -> api.StorageError:
        if st.deleted:
            return api.NoSuchLedgerError(f"ledger {ledger_id} was deleted")
        if master_key != st.master_key:
            return api.BadMasterKeyError(f"wrong master key for ledger {ledger_id}")
        return api.LedgerFencedError(f"ledger {ledger_id} is fenced")

    @staticmethod
    def _encode_run(
        chunks: list[journal.Buffer],
        runs: list[_Run],
        st: _Ledger,
        ledger_id: int,
        lac: int,
        key: bytes,
        eids: list[int],
        datas: list[cache.Data],
    ) -> int:
        """Frame one ledger's accepted entries as one journal record; returns its size.
        Large entries go to the journal's ``writev`` as they are; small ones are joined
        (a checksum call per part would cost more than the copy)."""
        parts = journal.encode_add_parts(ledger_id, lac, key, eids, datas)
        size = sum(map(len, parts))
        if size >= _JOURNAL_PARTS_MIN * len(eids):
            chunks.append(journal.frame_parts(parts, size))
            chunks.extend(parts)
        else:
            payload = b"".join(parts)
            chunks.append(journal.frame(payload))
            chunks.append(payload)
        runs.append((st, ledger_id, lac, eids, datas, size, max(eids)))
        return journal.HEADER.size + size

    def _apply_adds(self, runs: list[_Run]) -> None:
        """On the loop, when the runs are durable: make them readable, raise LAC/last entry."""
        wc = self._cache
        dirty = self._dirty
        for st, lid, lac, eids, datas, _, top in runs:
            if st.deleted:
                continue
            wc.put_many(lid, eids, datas, sum(map(len, datas)))
            if lac > st.lac:
                st.lac = lac
            if top > st.last_entry:
                st.last_entry = top
            dirty.add(lid)
        if wc.bytes >= self._cfg.write_cache_flush_bytes:
            self._flush_wakeup.set()

    async def _journal_small(self, payload: bytes, on_durable: functools.partial[None]) -> None:
        if self._journal.failed is not None or self._io_failed is not None:
            raise self._read_only_error()
        await self._journal.submit(
            [journal.frame(payload), payload], journal.HEADER.size + len(payload), 0, on_durable
        )

    # --- fence, LAC, delete -----------------------------------------------------------------

    async def fence(self, ledger_id: api.LedgerId, master_key: bytes) -> int:
        """Allowed on a bookie that is read-only for disk usage (recovery must progress)."""
        st = self._ledgers.get(ledger_id)
        if st is None:
            st = self._ledgers[ledger_id] = _Ledger(master_key)
        if st.deleted:
            raise api.NoSuchLedgerError(f"ledger {ledger_id} was deleted")
        if st.master_key is None:
            st.master_key = master_key
        elif st.master_key != master_key:
            raise api.BadMasterKeyError(f"wrong master key for ledger {ledger_id}")
        st.fenced = True  # from now on non-recovery adds are refused
        await self._journal_small(
            journal.encode_fence(ledger_id, master_key),
            functools.partial(self._dirty.add, ledger_id),
        )
        return st.lac

    async def write_lac(self, ledger_id: api.LedgerId, master_key: bytes, lac: int) -> None:
        st = self._ledgers.get(ledger_id)
        if st is None:
            st = self._ledgers[ledger_id] = _Ledger(master_key)
        if st.deleted:
            raise api.NoSuchLedgerError(f"ledger {ledger_id} was deleted")
        if st.master_key is None:
            st.master_key = master_key
        elif st.master_key != master_key:
            raise api.BadMasterKeyError(f"wrong master key for ledger {ledger_id}")
        if st.fenced:
            raise api.LedgerFencedError(f"ledger {ledger_id} is fenced")
        await self._journal_small(
            journal.encode_lac(ledger_id, lac, master_key),
            functools.partial(self._raise_lac, st, ledger_id, lac),
        )

    def _raise_lac(self, st: _Ledger, ledger_id: int, lac: int) -> None:
        if lac > st.lac:
            st.lac = lac
            self._dirty.add(ledger_id)

    async def delete_ledger(self, ledger_id: api.LedgerId) -> None:
        st = self._ledgers.get(ledger_id)
        if st is None or st.deleted:
            return
        st.deleted = True  # reads and adds fail from now on
        self._cache.drop_ledger(ledger_id)
        await self._journal_small(
            journal.encode_delete(ledger_id),
            functools.partial(self._deleted, ledger_id),
        )

    def _deleted(self, ledger_id: int) -> None:
        self._pending_deletes.add(ledger_id)
        self._dirty.add(ledger_id)

    async def is_fenced(self, ledger_id: api.LedgerId) -> bool:
        return self._ledger(ledger_id).fenced

    async def last_add_confirmed(self, ledger_id: api.LedgerId) -> int:
        return self._ledger(ledger_id).lac

    async def last_entry_id(self, ledger_id: api.LedgerId) -> int:
        return self._ledger(ledger_id).last_entry

    async def list_ledgers(self) -> list[api.LedgerId]:
        return sorted(api.LedgerId(lid) for lid, st in self._ledgers.items() if not st.deleted)

    # --- reads ------------------------------------------------------------------------------

    def _cached(self, ledger_id: int, entry_id: int) -> cache.Data | None:
        data = self._cache.get(ledger_id, entry_id)
        if data is None and self._flushing is not None:
            data = self._flushing.get(ledger_id, entry_id)
        if data is None:
            data = self._read_cache.get(ledger_id, entry_id)
        return data

    async def read_entry(self, ledger_id: api.LedgerId, entry_id: api.EntryId) -> bytes:
        self._ledger(ledger_id)
        data = self._cached(ledger_id, entry_id)
        if data is not None:
            return data if type(data) is bytes else bytes(data)
        loc = self._idx.get(ledger_id, entry_id)
        if loc is None:
            raise api.NoSuchEntryError(f"entry {ledger_id}/{entry_id} is not on this bookie")
        (out,) = await self._read_logs(ledger_id, [(entry_id, loc)])
        return out

    async def read_range(
        self, ledger_id: api.LedgerId, first: api.EntryId, last: api.EntryId, max_bytes: int
    ) -> list[tuple[api.EntryId, bytes]]:
        self._ledger(ledger_id)
        if max_bytes <= 0:
            max_bytes = self._cfg.read_range_default_max_bytes
        found: list[tuple[int, cache.Data | None]] = []
        misses: list[tuple[int, entrylog.Location]] = []
        total = 0
        entry_id: int = first
        while entry_id <= last:
            data = self._cached(ledger_id, entry_id)
            loc = None
            if data is not None:
                size = len(data)
            else:
                loc = self._idx.get(ledger_id, entry_id)
                if loc is None:
                    break
                size = loc.size - entrylog.RECORD_HEAD.size
            if found and total + size > max_bytes:
                break
            found.append((entry_id, data))
            if loc is not None:
                misses.append((entry_id, loc))
            total += size
            entry_id += 1
        if not found:
            raise api.NoSuchEntryError(f"entry {ledger_id}/{first} is not on this bookie")
        read: dict[int, bytes] = {}
        if misses:
            datas = await self._read_logs(ledger_id, misses)
            read = {eid: d for (eid, _), d in zip(misses, datas, strict=True)}
        out: list[tuple[api.EntryId, bytes]] = []
        for eid, data in found:
            if data is None:
                data = read[eid]
            out.append((api.EntryId(eid), data if type(data) is bytes else bytes(data)))
        return out

    async def _read_logs(
        self, ledger_id: int, wanted: list[tuple[int, entrylog.Location]]
    ) -> list[bytes]:
        loop = asyncio.get_running_loop()
        for attempt in range(3):
            missing: FileNotFoundError | None = None
            datas: list[bytes] = []
            self._reads_in_flight += 1
            try:
                datas = await loop.run_in_executor(
                    self._read_pool, self._reader.read_many, ledger_id, wanted
                )
            except FileNotFoundError as exc:
                missing = exc
            except OSError as exc:
                raise api.StorageIOError(f"entry log read failed: {exc}") from exc
            finally:
                self._reads_in_flight -= 1
                if not self._reads_in_flight and self._retired_logs:
                    self._close_later(self._reader.forget(self._retired_logs))
                    self._retired_logs = []
            if missing is not None:
                # compaction moved the entries and removed the log since the index lookup
                if attempt == 2:
                    raise api.StorageCorruptedError(f"entry log missing: {missing}") from missing
                relooked = []
                for eid, _ in wanted:
                    loc = self._idx.get(ledger_id, eid)
                    if loc is None:
                        raise api.NoSuchEntryError(
                            f"entry {ledger_id}/{eid} is not on this bookie"
                        ) from missing
                    relooked.append((eid, loc))
                wanted = relooked
                continue
            put = self._read_cache.put
            for (eid, _), data in zip(wanted, datas, strict=True):
                put(ledger_id, eid, data)
            return datas
        raise AssertionError("unreachable")

    # --- flush ------------------------------------------------------------------------------

    async def flush(self) -> None:
        async with self._flush_lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        snap = self._cache
        if not snap.entries and not self._dirty and not self._pending_deletes:
            # nothing is waiting: everything durable is flushed, so journal files rotated out
            # since the last flush (the rotation follows the write) can go now
            await self._release_journal(self._journal.durable_position)
            return
        self._cache = cache.WriteCache()
        self._flushing = snap
        checkpoint = self._journal.durable_position
        metas = {lid: self._ledgers[lid].meta() for lid in self._dirty}
        self._dirty = set()
        deletes = frozenset(self._pending_deletes)
        self._pending_deletes = set()
        skip = frozenset(lid for lid in snap.ledgers if self._ledgers[lid].deleted)
        loop = asyncio.get_running_loop()
        try:
            touched = await loop.run_in_executor(
                self._flush_pool, self._flush_sync, snap, metas, deletes, skip, checkpoint
            )
        except Exception as exc:
            # keep everything for the next attempt (newer entries win)
            for lid, entries in snap.ledgers.items():
                st = self._ledgers[lid]
                if st.deleted:
                    continue
                for eid, data in entries.items():
                    if self._cache.get(lid, eid) is None:
                        self._cache.put_many(lid, [eid], [data], len(data))
            self._dirty |= metas.keys()
            self._pending_deletes |= deletes
            self._flushing = None
            if isinstance(exc, OSError | lmdb.Error):
                self._io_failed = exc
                log.error("flush failed, the bookie turns read-only: %s", exc)
                raise api.StorageIOError(f"flush failed: {exc}") from exc
            raise
        finally:
            done, self._flush_done = self._flush_done, asyncio.Event()
            done.set()
        self._flushing = None
        self._log_usage.update(touched)
        self._flushes += 1
        await self._release_journal(checkpoint)

    async def _release_journal(self, checkpoint: journal.Position) -> None:
        """Delete the journal files the flush made redundant, in the flush thread: unlinking a
        full journal file blocks for as long as the kernel takes to free its blocks."""
        paths = self._journal.releasable(checkpoint)
        if paths:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._flush_pool, journal.delete_files, paths)

    def _flush_sync(
        self,
        snap: cache.WriteCache,
        metas: dict[int, index.LedgerMeta],
        deletes: frozenset[int],
        skip: frozenset[int],
        checkpoint: journal.Position,
    ) -> dict[int, dict[int, int]]:
        """In the flush thread: entry logs (sorted), fdatasync, one LMDB transaction."""
        locations: list[tuple[bytes, bytes]] = []
        added: dict[int, dict[int, int]] = {}
        for lid in sorted(snap.ledgers):
            if lid in skip:
                continue
            for log_id, nbytes in self._writer.append_ledger(lid, snap.ledgers[lid], locations):
                usage = added.setdefault(log_id, {})
                usage[lid] = usage.get(lid, 0) + nbytes
        self._writer.sync()
        merged: dict[int, dict[int, int]] = {}
        for log_id, usage in added.items():
            full = dict(self._log_usage.get(log_id, {}))
            for lid, n in usage.items():
                full[lid] = full.get(lid, 0) + n
            merged[log_id] = full
        self._idx.commit_flush(
            locations=locations,
            ledgers=metas,
            deleted=deletes,
            log_usage=merged,
            checkpoint=checkpoint,
        )
        return merged

    async def _flush_loop(self) -> None:
        interval = self._cfg.flush_interval_s
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._flush_wakeup.wait()
            self._flush_wakeup.clear()
            if self._closed:
                return
            try:
                await self.flush()
            except Exception:
                log.exception("bookie flush failed")
            else:
                continue
            await self._sleep_or_stop(1.0)

    async def _sleep_or_stop(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stopping.wait()

    # --- garbage collection -----------------------------------------------------------------

    async def compact(self) -> int:
        async with self._flush_lock:
            await self._flush_locked()
            live = frozenset(lid for lid, st in self._ledgers.items() if not st.deleted)
            the_plan = compaction.plan(
                self._log_usage, live.__contains__, self._cfg.compaction_threshold
            )
            if not the_plan:
                return 0
            usage = {log_id: dict(u) for log_id, u in self._log_usage.items()}
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(
                self._flush_pool, self._compact_sync, the_plan, live, usage
            )
            for log_id in outcome.removed_logs:
                self._log_usage.pop(log_id, None)
            self._log_usage.update(outcome.new_usage)
            self._compactions += 1
            self._compacted_logs += len(outcome.removed_logs)
            if self._reads_in_flight:
                self._retired_logs.extend(outcome.removed_logs)
            else:
                self._close_later(self._reader.forget(outcome.removed_logs))
            log.info(
                "compaction: removed %d entry logs (%d bytes), moved %d entries",
                len(outcome.removed_logs),
                outcome.freed_bytes,
                outcome.moved_entries,
            )
            return outcome.freed_bytes

    def _close_later(self, fds: list[int]) -> None:
        """Close the descriptors of removed entry logs in the flush thread: the kernel frees
        an unlinked log's blocks at its last close, which held the event loop for 400-670 ms
        when a compaction removed 4 GB of logs (docs/benchmarks.md, "Tails: W3 and W4")."""
        if not fds:
            return
        try:
            self._flush_pool.submit(entrylog.close_fds, fds)
        except RuntimeError:  # the pool is shut down: the storage is closing
            entrylog.close_fds(fds)

    def _compact_sync(
        self, the_plan: compaction.Plan, live: frozenset[int], usage: dict[int, dict[int, int]]
    ) -> compaction.Outcome:
        current = self._writer.current_log_id
        if current in the_plan.remove or current in the_plan.rewrite:
            self._writer.roll()
        return compaction.run(
            the_plan,
            directory=self._entry_dir,
            reader=self._reader,
            writer=self._writer,
            idx=self._idx,
            is_live=live.__contains__,
            current_usage=usage,
        )

    async def _gc_loop(self) -> None:
        while not self._closed:
            await self._sleep_or_stop(self._cfg.gc_interval_s)
            if self._closed:
                return
            try:
                await self.compact()
            except Exception:
                log.exception("bookie garbage collection failed")

    # --- disk usage -------------------------------------------------------------------------

    def _check_disk(self) -> None:
        cfg = self._cfg
        usage = max(disk.used_fraction(cfg.data_dir), disk.used_fraction(cfg.journal_dir))
        self._disk_usage = usage
        if not self._disk_read_only and usage > cfg.disk_usage_threshold:
            self._disk_read_only = True
            log.warning(
                "disk usage %.1f%% over %.1f%%: bookie is read-only",
                usage * 100,
                cfg.disk_usage_threshold * 100,
            )
        elif self._disk_read_only and usage < min(cfg.disk_usage_lwm, cfg.disk_usage_threshold):
            self._disk_read_only = False
            log.warning("disk usage %.1f%%: bookie is writable again", usage * 100)

    async def _disk_loop(self) -> None:
        while not self._closed:
            await self._sleep_or_stop(self._cfg.disk_check_interval_s)
            if self._closed:
                return
            try:
                self._check_disk()
            except OSError:
                log.exception("disk usage check failed")

    # --- stats ------------------------------------------------------------------------------

    def stats(self) -> api.StorageStats:
        flushing = self._flushing
        logs = 0
        log_bytes = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir(self._entry_dir):
                if entry.name.endswith(".log"):
                    logs += 1
                    log_bytes += entry.stat().st_size
        return api.StorageStats(
            read_only=self.is_read_only,
            ledgers=sum(1 for st in self._ledgers.values() if not st.deleted),
            disk_usage_fraction=self._disk_usage,
            journal_queue_entries=self._journal.queue_entries,
            journal_queue_bytes=self._journal.queue_bytes,
            journal_files=self._journal.file_count(),
            journal_writes=self._journal.writes,
            journal_fsyncs=self._journal.fsyncs,
            journal_entries=self._journal.entries_written,
            journal_bytes=self._journal.bytes_written,
            write_cache_bytes=self._cache.bytes + (flushing.bytes if flushing else 0),
            write_cache_entries=self._cache.entries + (flushing.entries if flushing else 0),
            read_cache_bytes=self._read_cache.bytes,
            read_cache_hits=self._read_cache.hits,
            read_cache_misses=self._read_cache.misses,
            entry_logs=logs,
            entry_log_bytes=log_bytes,
            flushes=self._flushes,
            compactions=self._compactions,
            compacted_logs=self._compacted_logs,
        )
