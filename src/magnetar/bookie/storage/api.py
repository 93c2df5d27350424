"""The interface between a bookie's network service and its local storage engine.

Why this module exists: the gRPC service (``magnetar.bookie.server``/``service``) and the
storage strategies are built and tested independently. The service only ever sees this
module — typed requests and results, named errors and the :class:`LedgerStorage` protocol —
so a storage strategy can be swapped (or faked in a test) without touching the network code.

Semantics follow BookKeeper's bookie:

* An add is acknowledged only when its entry is durable in the journal (one ``fdatasync``
  per group commit). Every entry gets its own :class:`AddResult`, so one bad entry (fenced
  ledger, oversize entry, wrong master key) fails alone and the rest of the batch proceeds.
* A ledger's master key is fixed by the first add or fence that reaches this bookie; later
  adds and fences must present the same key.
* A fenced ledger refuses adds unless they are recovery adds (re-replication of the tail by
  the new owner). Fencing is persisted before :meth:`LedgerStorage.fence` returns.
* Reads are not bounded by the LAC here: the service applies the LAC bound where the
  protocol asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NewType, Protocol

from magnetar.common import errors

LedgerId = NewType("LedgerId", int)
EntryId = NewType("EntryId", int)

NO_ENTRY = -1
"""The LAC / last entry id of a ledger with nothing confirmed / stored."""


# --- errors ---------------------------------------------------------------------------------


class StorageError(errors.MagnetarError):
    """Base of the errors the bookie storage raises (or returns in an :class:`AddResult`)."""


class NoSuchLedgerError(StorageError, errors.PermanentError):
    """This bookie has never seen the ledger, or it was deleted."""


class NoSuchEntryError(StorageError, errors.PermanentError):
    """The ledger is known here but the entry is not stored on this bookie."""


class LedgerFencedError(StorageError, errors.PermanentError):
    """The ledger is fenced: only recovery adds are accepted."""


class EntryTooLargeError(StorageError, errors.PermanentError):
    """The entry is larger than the configured maximum entry size."""


class BadMasterKeyError(StorageError, errors.PermanentError):
    """The master key differs from the one the ledger was created with on this bookie."""


class ReadOnlyError(StorageError, errors.TemporaryError):
    """The bookie is read-only (disk usage over the threshold, or a failed disk): write
    elsewhere; it becomes writable again when space is freed."""


class StorageCorruptedError(StorageError, errors.PermanentError):
    """A stored record failed its checksum or is malformed."""


class StorageIOError(StorageError, errors.TemporaryError):
    """The disk failed an operation (write, fsync); the bookie turns read-only."""


# --- requests and results -------------------------------------------------------------------


class AddRequest(NamedTuple):
    """One entry to add. A NamedTuple, not a dataclass: one is built per entry on the hot path."""

    ledger_id: LedgerId
    entry_id: EntryId
    master_key: bytes
    last_add_confirmed: int
    """The writer's LAC piggybacked on the add (``NO_ENTRY`` if none)."""
    data: bytes | memoryview
    recovery: bool = False
    """A recovery add (accepted on a fenced ledger)."""


class AddResult(NamedTuple):
    """The outcome of one :class:`AddRequest`: ``error is None`` means durable."""

    ledger_id: LedgerId
    entry_id: EntryId
    error: StorageError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class StorageStats:
    """A point-in-time view for metrics (``bookie_journal_*``, ``bookie_ledger_*``)."""

    read_only: bool
    ledgers: int
    """Known, not deleted ledgers."""
    disk_usage_fraction: float
    """The highest used fraction among the journal and data disks."""
    journal_queue_entries: int
    journal_queue_bytes: int
    journal_files: int
    journal_writes: int
    """Group writes done (each one write syscall batch; a sync covers every group written
    before it began)."""
    journal_fsyncs: int
    journal_entries: int
    """Entries made durable through the journal since start."""
    journal_bytes: int
    write_cache_bytes: int
    """Bytes of entries not yet in entry logs (active + being flushed)."""
    write_cache_entries: int
    read_cache_bytes: int
    read_cache_hits: int
    read_cache_misses: int
    entry_logs: int
    entry_log_bytes: int
    flushes: int
    compactions: int
    compacted_logs: int
    """Entry logs removed by garbage collection / compaction since start."""


# --- the interface --------------------------------------------------------------------------


class LedgerStorage(Protocol):
    """A bookie's local storage. All methods run on the event loop; none blocks it on disk I/O."""

    @property
    def is_read_only(self) -> bool: ...

    async def start(self) -> None:
        """Open the directories, replay the journal, start background tasks."""

    async def close(self) -> None:
        """Stop accepting work, finish in-flight adds, flush, release files."""

    async def add_entries(self, entries: Sequence[AddRequest]) -> list[AddResult]:
        """Add many entries; return one result per request, in request order, once every
        accepted entry is durable in the journal. Raises only when the whole batch cannot be
        considered (storage closed)."""

    async def read_entry(self, ledger_id: LedgerId, entry_id: EntryId) -> bytes:
        """Raises NoSuchLedgerError, NoSuchEntryError, StorageCorruptedError."""

    async def read_range(
        self, ledger_id: LedgerId, first: EntryId, last: EntryId, max_bytes: int
    ) -> list[tuple[EntryId, bytes]]:
        """Consecutive entries from ``first`` up to ``last`` (inclusive), stopping at the first
        entry not stored here or before the total data size would pass ``max_bytes`` (at least
        one entry is returned). Raises NoSuchEntryError if ``first`` is not stored."""

    async def last_add_confirmed(self, ledger_id: LedgerId) -> int:
        """The highest LAC piggybacked so far (-1 if none). Raises NoSuchLedgerError."""

    async def last_entry_id(self, ledger_id: LedgerId) -> int:
        """The highest entry id stored here (-1 if none). Raises NoSuchLedgerError."""

    async def write_lac(self, ledger_id: LedgerId, master_key: bytes, lac: int) -> None:
        """Record an explicit LAC (sent on close); durable before returning."""

    async def fence(self, ledger_id: LedgerId, master_key: bytes) -> int:
        """Fence the ledger (creating its record here if this bookie has never seen it), durably
        before returning; returns the LAC. Raises BadMasterKeyError, NoSuchLedgerError (deleted),
        ReadOnlyError."""

    async def is_fenced(self, ledger_id: LedgerId) -> bool:
        """Raises NoSuchLedgerError."""

    async def delete_ledger(self, ledger_id: LedgerId) -> None:
        """Forget the ledger (durably); its space is reclaimed by compaction. Idempotent."""

    async def list_ledgers(self) -> list[LedgerId]:
        """Known, not deleted ledgers, ascending."""

    async def flush(self) -> None:
        """Move everything in the write cache to entry logs + index and checkpoint the journal."""

    async def compact(self) -> int:
        """Garbage-collect entry logs now; returns the number of bytes of entry logs freed."""

    def stats(self) -> StorageStats: ...
