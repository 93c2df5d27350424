"""The managed-ledger contract the broker programs against.

Why this module exists: the broker (topics, subscriptions, dispatchers, admin stats) and
the storage of a topic's log are built and tested independently; this is the seam. It
follows Pulsar's ManagedLedger/ManagedCursor:

* A managed ledger is a topic's log: an ordered list of ledgers, of which the last is open
  for writes. It rolls over to a new ledger at a size, entry-count or age limit; ledgers
  every cursor has passed (and no retention needs) are deleted; positions are
  (ledger id, entry id) and totally ordered.
* A cursor is a subscription's position: the mark-delete position (everything at or before
  it is acknowledged), plus the individually deleted (acknowledged) positions after it, plus
  partially acknowledged batches (batch-index ack sets). Durable cursors persist that state
  at a bounded rate; non-durable cursors (readers) keep it in memory only.
* Entries are opaque bytes here (the broker stores the Pulsar headers-and-payload as is).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.common import errors
from magnetar.common.buffers import Payload

# --- positions and entries -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Position:
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


EARLIEST = Position(-1, -1)
"""Before the first entry of any managed ledger."""
LATEST = Position(2**63 - 1, 2**63 - 1)
"""After the last entry of any managed ledger."""

AddDone = Callable[[Position | None, BaseException | None], None]
"""An add's outcome: (its position, None) once durable, or (None, the error)."""


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: Payload
    """The payload: ``bytes``, or a view into the stored entry (magnetar.common.buffers)."""


class InitialPosition(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"


# --- errors ------------------------------------------------------------------------------------


class ManagedLedgerError(errors.MagnetarError):
    """Base of managed-ledger errors."""


class ManagedLedgerFencedError(ManagedLedgerError, errors.PermanentError):
    """Another broker took the managed ledger over: this instance must close."""


class ManagedLedgerClosedError(ManagedLedgerError, errors.PermanentError):
    pass


class ManagedLedgerTerminatedError(ManagedLedgerError, errors.PermanentError):
    """The topic was terminated: no more adds."""


class CursorNotFoundError(ManagedLedgerError, errors.PermanentError):
    pass


class CursorAlreadyExistsError(ManagedLedgerError, errors.PermanentError):
    pass


class InvalidPositionError(ManagedLedgerError, errors.PermanentError, ValueError):
    pass


class StorageUnavailableError(ManagedLedgerError, errors.TemporaryError):
    """Bookies or the metadata store failed the operation; it may succeed later."""


# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagedLedgerConfig:
    ensemble_size: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1
    max_entries_per_ledger: int = 50_000
    max_ledger_bytes: int = 2 * 1024**3
    max_ledger_age_s: float = 4 * 3600.0
    min_ledger_age_s: float = 0.0
    """A ledger is not rolled over before this age (except on ownership change)."""
    retention_time_s: float = 0.0
    """Keep acknowledged data this long (-1: forever). Both retention limits 0: no
    retention; one of them 0 and the other not: the 0 one does not limit."""
    retention_bytes: int = 0
    """Keep acknowledged ledgers while the managed ledger is at most this many bytes
    (-1: unlimited). A fully acknowledged ledger is deleted once it is outside either
    window (Pulsar's rule), oldest first, never the current one."""
    cursor_persist_interval_s: float = 1.0
    """Durable cursors persist their state at most this often (the crash redelivery window)."""
    offload_threshold_bytes: int = -1
    """Pulsar's ``offloadThreshold``: bytes kept on bookies, older closed ledgers are
    offloaded (-1: off; needs an offloader, docs/offload.md)."""
    offload_threshold_s: int = -1
    """``offloadThresholdInSeconds``: closed ledgers older than this are offloaded (-1: off)."""
    offload_deletion_lag_ms: int = 4 * 3600 * 1000
    """``managedLedgerOffloadDeletionLagMs``: an offloaded ledger's bookie copy is deleted
    this long after the offload completed."""


# --- stats (admin internalStats) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int
    offloaded: bool = False
    """The ledger's offloaded copy is complete and verified (reads go to it)."""
    offload_location: Mapping[str, Any] | None = None
    """Where the offloaded copy is (driver, bucket, object keys, attempt UUID, whether the
    bookie copy was deleted), or the attempt under way (``complete: false``)."""

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ``internalStats`` shape of one ledger (plus ``offloadLocation`` once an
        offload of it was recorded)."""
        out: dict[str, Any] = {
            "ledgerId": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "timestamp": self.timestamp_ms,
            "offloaded": self.offloaded,
        }
        if self.offload_location is not None:
            out["offloadLocation"] = dict(self.offload_location)
        return out


@dataclass(frozen=True, slots=True)
class CursorStats:
    name: str
    durable: bool
    mark_delete_position: Position
    read_position: Position
    individually_deleted: str
    """Pulsar's format, e.g. ``[(3:1..3:3], (3:5..3:6]]``: open-closed ranges."""
    messages_consumed: int
    cursor_ledger_id: int
    state: str
    properties: Mapping[str, int] = field(default_factory=dict)

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ``internalStats`` shape of one cursor."""
        return {
            "markDeletePosition": str(self.mark_delete_position),
            "readPosition": str(self.read_position),
            "individuallyDeletedMessages": self.individually_deleted,
            "messagesConsumedCounter": self.messages_consumed,
            "cursorLedger": self.cursor_ledger_id,
            "state": self.state,
            "properties": dict(self.properties),
            "durable": self.durable,
        }


# --- interfaces ------------------------------------------------------------------------------


OWNED_LEDGER_PROPERTIES: tuple[str, ...] = ("CompactedTopicLedger",)
"""Cursor properties that name a ledger the cursor owns (the ``__compaction`` cursor's
compacted ledger, as Pulsar stores it): deleting the cursor deletes that ledger too."""


class AuxLedger(Protocol):
    """A ledger kept beside a managed ledger's list (a compacted topic's ledger): written
    once by its creator, closed, then read by entry id. A
    :class:`~magnetar.ledger.handle.LedgerHandle` is one."""

    @property
    def ledger_id(self) -> int: ...

    last_add_confirmed: int
    """The last entry id written (-1: none)."""

    @property
    def length(self) -> int:
        """Bytes of entries written."""

    def append(self, data: Payload) -> asyncio.Future[int]:
        """Start an add; the future gives the entry id once durable. In order."""

    async def close(self) -> None: ...

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]:
        """Entries ``first..last`` (inclusive) as (entry id, data)."""


class ManagedCursor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def properties(self) -> Mapping[str, int]:
        """The properties stored with the mark-delete position (``mark_delete(...,
        properties=)``), e.g. deduplication snapshots."""

    @property
    def read_position(self) -> Position:
        """The next position ``read_entries`` returns."""

    async def read_entries(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position (skipping individually
        deleted ones), advancing it; returns at once, possibly empty."""

    async def read_entries_or_wait(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        """Like read_entries, but waits until at least one entry is available. Cancellable."""

    async def replay(self, positions: Iterable[Position]) -> list[Entry]:
        """The entries at ``positions`` that still exist and are not deleted (redelivery)."""

    def has_more_entries(self) -> bool: ...

    def rewind(self) -> None:
        """Read position back to the first position after the mark-delete position."""

    def seek(self, position: Position) -> None:
        """Move the read position (not the acknowledgements)."""

    async def reset(self, position: Position) -> None:
        """Reset the cursor to ``position``: it becomes the read position and everything
        before it counts as acknowledged (Pulsar's resetCursor / SEEK)."""

    async def mark_delete(
        self, position: Position, *, properties: Mapping[str, int] | None = None
    ) -> None:
        """Cumulative acknowledgement up to and including ``position``."""

    async def delete(self, positions: Sequence[Position]) -> None:
        """Individual acknowledgements; the mark-delete position advances over any prefix
        of acknowledged positions."""

    async def delete_batch_indexes(
        self, position: Position, *, acked: Iterable[int], batch_size: int
    ) -> None:
        """Acknowledge messages ``acked`` (indexes) of the batch entry at ``position``;
        when every index of the batch is acknowledged the entry itself is deleted."""

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """The still-unacknowledged batch indexes of a partially acknowledged entry, as
        Pulsar's ack_set bitmap words (bit set = not yet acknowledged), or None."""

    def is_deleted(self, position: Position) -> bool: ...

    def backlog(self) -> int:
        """Entries after the mark-delete position that are not acknowledged."""

    async def skip(self, n: int) -> None:
        """Acknowledge the next ``n`` unacknowledged entries (admin skip)."""

    async def clear_backlog(self) -> None:
        """Acknowledge everything up to the last confirmed entry."""

    def stats(self) -> CursorStats: ...

    async def flush(self) -> None:
        """Persist the state now (durable cursors; nothing for others): after it returns a
        crash finds the mark-delete position and properties as they are."""

    async def close(self) -> None:
        """Persist the state now (durable cursors) and stop."""


class ManagedLedger(Protocol):
    @property
    def name(self) -> str:
        """``tenant/namespace/domain/topic`` (the managed ledger's key path)."""

    @property
    def last_confirmed_entry(self) -> Position:
        """The last entry written; (ledger, -1) of the current ledger when none yet."""

    @property
    def first_position(self) -> Position:
        """The first entry still stored (or the position after the last when empty)."""

    @property
    def number_of_entries(self) -> int: ...

    @property
    def total_size(self) -> int:
        """Bytes of entries stored (all ledgers)."""

    @property
    def entries_added(self) -> int:
        """Entries added by this instance since it opened."""

    @property
    def terminated(self) -> bool: ...

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """Durable and non-durable cursors by name."""

    def add(self, data: Payload, done: AddDone) -> None:
        """Start an add; ``done`` gets (the position, None) once durable on Aq bookies, in
        call order, or (None, the error); never from inside this call. The hot path: no
        future per message."""

    def append(self, data: Payload) -> asyncio.Future[Position]:
        """:meth:`add` with a future for the position. Futures complete in call order."""

    async def add_entry(self, data: Payload) -> Position:
        """Append; returns once durable on Aq bookies. Concurrent calls complete in order
        (the positions increase in call order)."""

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        """Entries from ``start`` (inclusive) on, up to the last confirmed entry."""

    async def read_entry(self, position: Position) -> Entry: ...

    def next_position(self, position: Position) -> Position:
        """The position following ``position`` (crossing ledger boundaries)."""

    async def open_cursor(
        self,
        name: str,
        *,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> ManagedCursor:
        """The durable cursor ``name``, created at the initial position if it is new."""

    async def new_non_durable_cursor(
        self, name: str, start: Position, *, inclusive: bool = True
    ) -> ManagedCursor:
        """A reader's cursor at ``start`` (EARLIEST/LATEST allowed), in memory only."""

    async def delete_cursor(self, name: str) -> None: ...

    async def wait_for_entries(self, after: Position) -> None:
        """Return when an entry after ``after`` is confirmed (or the ledger closes)."""

    async def terminate(self) -> Position:
        """No more adds; returns the last position."""

    def ledgers(self) -> list[LedgerInfo]: ...

    async def create_aux_ledger(self, purpose: str) -> AuxLedger:
        """A new ledger outside the list, with this managed ledger's quorums; ``purpose`` is
        recorded in its metadata (e.g. ``compacted``). Its owner deletes it."""

    async def open_aux_ledger(self, ledger_id: int) -> AuxLedger:
        """A read handle of a ledger created by :meth:`create_aux_ledger` (recovered and
        closed when its writer is gone). StorageUnavailableError when it cannot be read."""

    async def delete_aux_ledger(self, ledger_id: int) -> None:
        """Delete a ledger created by :meth:`create_aux_ledger` (nothing if it is gone)."""

    async def close(self) -> None:
        """Close the current ledger and persist cursors; the next owner opens it again."""

    async def delete(self) -> None:
        """Delete every ledger, cursor and the managed ledger's metadata."""


class ManagedLedgerFactory(Protocol):
    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """Open (or create) the managed ledger ``name``, recovering the previous owner's open
        ledger (fencing it) and starting a new one."""

    async def exists(self, name: str) -> bool: ...

    async def delete(self, name: str) -> None: ...

    async def list(self, prefix: str) -> list[str]:
        """Names of managed ledgers under ``tenant/namespace/domain``."""

    async def close(self) -> None: ...
