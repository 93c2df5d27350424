"""Message deduplication: each producer's last sequence id per topic, so a resent message is
acknowledged without being stored twice (Pulsar's ``MessageDeduplication``).

How it works (docs/architecture.md, "Deduplication"):

* On the publish path one dict lookup and one update: ``pushed[producer]`` is the highest
  sequence id accepted for storage, ``persisted[producer]`` the highest one stored. A SEND
  whose (highest) sequence id is at or below ``persisted`` is a **duplicate**: it gets a
  receipt with ledger = entry = -1 and nothing is stored. One at or below ``pushed`` but above
  ``persisted`` is still **in flight**: it is refused with a SEND_ERROR, so the client
  reconnects and resends, and by then it is a known duplicate or was lost with the broker.
* Every ``entries_interval`` stored entries a **snapshot** of ``persisted`` becomes the
  properties of the ``pulsar.dedup`` cursor's mark-delete, written atomically with the
  position they describe.
* When a topic loads with deduplication on, the snapshot is read back and the entries after
  it are **replayed** (their metadata carries producer name and sequence ids) before any
  producer is accepted, so the state is exactly what was stored.
* Chunks of one message share a sequence id: only the last chunk is checked and recorded.
* Entries stored by another cluster's replicator are recorded under the replicator's name and
  the sequence id derived from their source position (``broker/replication.py``), as the
  replicator sent them, not under the original producer's.
* A disconnected producer is forgotten after the inactivity timeout; turning deduplication
  off deletes the cursor and the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Mapping
from typing import Final

from magnetar.broker import replication
from magnetar.broker.subscriptions.entries import split_entry
from magnetar.common.buffers import Payload
from magnetar.managed_ledger.api import (
    CursorNotFoundError,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    Position,
)
from magnetar.metadata import keys
from magnetar.wire import batch, frames
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

CURSOR: Final = keys.DEDUP_CURSOR
"""The cursor holding the snapshots (a system cursor, never a subscription)."""

_REPLAY_BATCH: Final = 500


class Status(enum.Enum):
    DISABLED = "Disabled"
    RECOVERING = "Recovering"
    ENABLED = "Enabled"
    FAILED = "Failed"


class Verdict(enum.Enum):
    NEW = 0
    DUPLICATE = 1
    IN_FLIGHT = 2


class Deduplication:
    """One topic's deduplication state."""

    def __init__(
        self,
        managed_ledger: ManagedLedger,
        *,
        entries_interval: int,
        inactivity_s: float,
        max_producers: int,
    ) -> None:
        self._ml = managed_ledger
        self._interval = max(1, entries_interval)
        self._inactivity_s = inactivity_s
        self._max_producers = max_producers
        self.status = Status.DISABLED
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self._inactive_since: dict[str, float] = {}
        self._cursor: ManagedCursor | None = None
        self._since_snapshot = 0
        self._last_position: Position | None = None
        self._snapshotting: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.status is Status.ENABLED

    # --- lifecycle ------------------------------------------------------------------------

    async def enable(self) -> None:
        """Open (or create) the snapshot cursor, restore the snapshot and replay the entries
        stored after it. Idempotent."""
        if self.status in (Status.ENABLED, Status.RECOVERING):
            return
        self.status = Status.RECOVERING
        try:
            cursor = await self._ml.open_cursor(CURSOR, initial_position=InitialPosition.LATEST)
            restored = {k: int(v) for k, v in cursor.properties.items()}
            self.pushed, self.persisted = dict(restored), dict(restored)
            replayed = await self._replay(cursor)
        except BaseException:
            self.status = Status.FAILED
            raise
        self._cursor = cursor
        self._last_position = cursor.mark_delete_position
        self._since_snapshot = replayed
        self.status = Status.ENABLED
        log.info(
            "%s: deduplication on: %d producers, %d entries replayed",
            self._ml.name,
            len(self.persisted),
            replayed,
        )

    async def _replay(self, cursor: ManagedCursor) -> int:
        count = 0
        cursor.rewind()
        while cursor.has_more_entries():
            entries = await cursor.read_entries(_REPLAY_BATCH)
            if not entries:
                break
            for entry in entries:
                count += 1
                self._last_position = entry.position
                try:
                    raw_meta, payload = split_entry(entry.data)
                    meta = frames.parse_message_metadata(raw_meta)
                    if meta.HasField("chunk_id") and meta.chunk_id < meta.num_chunks_from_msg - 1:
                        continue
                    seq = batch.highest_sequence_id(meta, payload)
                except WireError as exc:
                    log.warning("%s: replay of %s: %s", self._ml.name, entry.position, exc)
                    continue
                name = meta.producer_name
                replicated = replication.replayed_sequence_id(meta)
                if replicated is not None:  # stored by another cluster's replicator
                    name, seq = replicated
                if seq > self.persisted.get(name, -1):
                    self.persisted[name] = seq
                    self.pushed[name] = seq
        return count

    async def disable(self) -> None:
        """Forget everything and delete the snapshot cursor (also one left over from when
        deduplication was last on: it would hold ledgers back)."""
        was = self.status
        self.status = Status.DISABLED
        self.pushed.clear()
        self.persisted.clear()
        self._inactive_since.clear()
        self._cursor = None
        if self._snapshotting is not None:
            self._snapshotting.cancel()
        if CURSOR in self._ml.cursors:
            with contextlib.suppress(CursorNotFoundError):
                await self._ml.delete_cursor(CURSOR)
        if was is not Status.DISABLED:
            log.info("%s: deduplication off", self._ml.name)

    # --- publish path ---------------------------------------------------------------------

    def check(self, producer: str, sequence_id: int, highest_sequence_id: int) -> Verdict:
        """Classify one SEND; a new one is recorded as pushed."""
        last = self.pushed.get(producer)
        if last is not None and sequence_id <= last:
            if highest_sequence_id <= self.persisted.get(producer, -1):
                return Verdict.DUPLICATE
            return Verdict.IN_FLIGHT
        self.pushed[producer] = highest_sequence_id
        return Verdict.NEW

    @staticmethod
    def highest_sequence_id(data: Payload) -> int | None:
        """The highest sequence id of a SEND's entry whose command did not say it (a batch
        from a C++-based client): its last message's (wire.batch.highest_sequence_id), so a
        producer reconnecting after a crash is told the last id really stored, and an
        overlapping resend is dropped, where Pulsar records the batch's first id; None for an
        entry that does not parse (the SEND is then judged by its first id)."""
        try:
            raw_meta, payload = split_entry(data)
            return batch.highest_sequence_id(frames.parse_message_metadata(raw_meta), payload)
        except WireError:
            return None

    def stored(self, producer: str, highest_sequence_id: int, position: Position) -> None:
        """A NEW entry is durable: record it, and snapshot every ``entries_interval``."""
        if highest_sequence_id > self.persisted.get(producer, -1):
            self.persisted[producer] = highest_sequence_id
        self._last_position = position
        self._since_snapshot += 1
        if self._since_snapshot >= self._interval and self._snapshotting is None:
            self._since_snapshot = 0
            self._snapshotting = asyncio.get_running_loop().create_task(self._snapshot())

    def forget_pushed(self, producer: str) -> None:
        """A store failed: what was pushed but not persisted may be sent again."""
        persisted = self.persisted.get(producer)
        if persisted is None:
            self.pushed.pop(producer, None)
        else:
            self.pushed[producer] = persisted

    def last_sequence_id(self, producer: str) -> int:
        """What PRODUCER_SUCCESS announces (-1: nothing stored from that producer)."""
        return self.persisted.get(producer, -1)

    # --- snapshots and expiry ------------------------------------------------------------

    async def _snapshot(self) -> None:
        try:
            await self.take_snapshot()
        except Exception as exc:
            log.warning("%s: deduplication snapshot failed: %s", self._ml.name, exc)
        finally:
            self._snapshotting = None

    async def take_snapshot(self) -> None:
        """Write the persisted sequence ids as the cursor's mark-delete properties, at the
        position of the last entry they cover."""
        cursor, position = self._cursor, self._last_position
        if cursor is None or position is None or self.status is not Status.ENABLED:
            return
        if position <= cursor.mark_delete_position and cursor.properties == self.persisted:
            return
        snapshot = self.persisted
        if len(snapshot) > self._max_producers:
            keep = sorted(snapshot, key=snapshot.__getitem__)[-self._max_producers :]
            snapshot = {name: snapshot[name] for name in keep}
        await cursor.mark_delete(
            max(position, cursor.mark_delete_position), properties=dict(snapshot)
        )

    def producer_connected(self, producer: str) -> None:
        self._inactive_since.pop(producer, None)

    def producer_disconnected(self, producer: str) -> None:
        self._inactive_since[producer] = time.monotonic()

    def purge_inactive(self, now: float | None = None) -> list[str]:
        """Forget producers disconnected for longer than the inactivity timeout."""
        now = time.monotonic() if now is None else now
        gone = [n for n, t in self._inactive_since.items() if now - t >= self._inactivity_s]
        for name in gone:
            del self._inactive_since[name]
            self.pushed.pop(name, None)
            self.persisted.pop(name, None)
        return gone

    def stats(self) -> Mapping[str, int]:
        return dict(self.persisted)
