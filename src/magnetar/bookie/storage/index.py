"""The bookie's index and ledger metadata, in LMDB.

Why this module exists: a read needs (ledger, entry) -> (entry log, offset, size), and the
bookie must remember per ledger its master key, fenced flag, LAC, highest entry and whether it
was deleted, across restarts. Like BookKeeper's DbLedgerStorage (which uses RocksDB) we keep
this in a real embedded KV store rather than a home-made tree: LMDB (ordered keys, ACID
transactions, ``fsync`` on commit, lock-free readers from any thread).

Each flush commits, in ONE transaction: the new locations, the changed ledger records, the
index deletions of deleted ledgers, the per-entry-log usage (bytes per ledger, which drives
compaction) and the journal checkpoint. So after a crash the checkpoint never points past
data the index does not have.

Databases: ``loc`` (>QQ ledger, entry -> >IQI log, offset, size), ``ledger`` (>Q ->
:class:`LedgerMeta`), ``logs`` (>I log id -> repeated >QQ ledger, bytes), ``meta``
(``checkpoint`` -> >QQ journal seq, offset).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import lmdb

from magnetar.bookie.storage import entrylog
from magnetar.bookie.storage.journal import Position

LOC_KEY = struct.Struct(">QQ")
LOC_VAL = entrylog.LOCATION
_LEDGER_KEY = struct.Struct(">Q")
_LEDGER_VAL = struct.Struct(">BqqI")  # flags, lac, last entry, key length (+ key)
_LOG_KEY = struct.Struct(">I")
_USAGE = struct.Struct(">QQ")
_CHECKPOINT = struct.Struct(">QQ")
_HAS_KEY, _FENCED, _DELETED = 1, 2, 4


class LedgerMeta(NamedTuple):
    master_key: bytes | None
    fenced: bool
    deleted: bool
    lac: int
    last_entry: int


def encode_meta(meta: LedgerMeta) -> bytes:
    flags = (
        (_HAS_KEY if meta.master_key is not None else 0)
        | (_FENCED if meta.fenced else 0)
        | (_DELETED if meta.deleted else 0)
    )
    key = meta.master_key or b""
    return _LEDGER_VAL.pack(flags, meta.lac, meta.last_entry, len(key)) + key


def decode_meta(raw: bytes) -> LedgerMeta:
    flags, lac, last, klen = _LEDGER_VAL.unpack_from(raw, 0)
    key = bytes(raw[_LEDGER_VAL.size : _LEDGER_VAL.size + klen])
    return LedgerMeta(
        master_key=key if flags & _HAS_KEY else None,
        fenced=bool(flags & _FENCED),
        deleted=bool(flags & _DELETED),
        lac=lac,
        last_entry=last,
    )


def encode_usage(usage: dict[int, int]) -> bytes:
    return b"".join(_USAGE.pack(lid, n) for lid, n in sorted(usage.items()))


def decode_usage(raw: bytes) -> dict[int, int]:
    return {lid: n for lid, n in _USAGE.iter_unpack(raw)}


class Index:
    """One LMDB environment. Reads from any thread; writes from one thread at a time."""

    def __init__(self, path: Path, *, map_size: int, sync: bool = True) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(
            str(path), map_size=map_size, max_dbs=4, sync=sync, metasync=sync, readahead=False
        )
        self._loc = self._env.open_db(b"loc")
        self._ledger = self._env.open_db(b"ledger")
        self._logs = self._env.open_db(b"logs")
        self._meta = self._env.open_db(b"meta")

    def close(self) -> None:
        self._env.close()

    # reads

    def get(self, ledger_id: int, entry_id: int) -> entrylog.Location | None:
        with self._env.begin(db=self._loc, buffers=False) as txn:
            raw = txn.get(LOC_KEY.pack(ledger_id, entry_id))
        return None if raw is None else entrylog.Location._make(LOC_VAL.unpack(raw))

    def load_ledgers(self) -> dict[int, LedgerMeta]:
        with self._env.begin(db=self._ledger) as txn:
            return {_LEDGER_KEY.unpack(k)[0]: decode_meta(v) for k, v in txn.cursor().iternext()}

    def load_log_usage(self) -> dict[int, dict[int, int]]:
        with self._env.begin(db=self._logs) as txn:
            return {_LOG_KEY.unpack(k)[0]: decode_usage(v) for k, v in txn.cursor().iternext()}

    def checkpoint(self) -> Position | None:
        with self._env.begin(db=self._meta) as txn:
            raw = txn.get(b"checkpoint")
        return None if raw is None else Position(*_CHECKPOINT.unpack(raw))

    # writes (one transaction each)

    def commit_flush(
        self,
        *,
        locations: list[tuple[bytes, bytes]],
        ledgers: dict[int, LedgerMeta],
        deleted: Iterable[int],
        log_usage: dict[int, dict[int, int]],
        checkpoint: Position,
    ) -> None:
        with self._env.begin(write=True) as txn:
            if locations:
                txn.cursor(db=self._loc).putmulti(locations)
            for lid in deleted:
                self._delete_locations(txn, lid)
            for lid, meta in ledgers.items():
                txn.put(_LEDGER_KEY.pack(lid), encode_meta(meta), db=self._ledger)
            for log_id, usage in log_usage.items():
                txn.put(_LOG_KEY.pack(log_id), encode_usage(usage), db=self._logs)
            txn.put(
                b"checkpoint", _CHECKPOINT.pack(checkpoint.seq, checkpoint.offset), db=self._meta
            )

    def _delete_locations(self, txn: lmdb.Transaction, ledger_id: int) -> None:
        cursor = txn.cursor(db=self._loc)
        if not cursor.set_range(LOC_KEY.pack(ledger_id, 0)):
            return
        while True:
            key = cursor.key()
            if not key or LOC_KEY.unpack(key)[0] != ledger_id:
                return
            if not cursor.delete():
                return

    def commit_compaction(
        self,
        *,
        moves: list[tuple[bytes, bytes]],
        removed_logs: Iterable[int],
        log_usage: dict[int, dict[int, int]],
    ) -> None:
        with self._env.begin(write=True) as txn:
            if moves:
                txn.cursor(db=self._loc).putmulti(moves)
            for log_id in removed_logs:
                txn.delete(_LOG_KEY.pack(log_id), db=self._logs)
            for log_id, usage in log_usage.items():
                txn.put(_LOG_KEY.pack(log_id), encode_usage(usage), db=self._logs)
