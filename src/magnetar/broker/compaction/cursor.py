"""The cursor of a ``read_compacted`` subscription (Pulsar's
``CompactedTopicImpl.asyncReadEntriesOrWait``).

It wraps the subscription's own cursor. While the next position to read is at or before
the compaction horizon, entries come from the compacted ledger -- from the first one at or
after that position, carrying their original message ids -- and the wrapped cursor's read
position follows them; past the last compacted entry it moves to the entry after the
horizon, and from there on the wrapped cursor reads the topic as usual. A rewind or a
reset to a position at or before the horizon goes back into the compacted ledger, so
redelivery and seek behave as for any subscription.

Batch-index acknowledgements of a compacted batch (re-built with the messages it keeps,
:mod:`.format`) count only when they cover the whole batch; a partly acknowledged one is
delivered whole again on redelivery.

A reader starting at the earliest message, or a subscription created at the earliest
position that has acknowledged nothing yet, reads the compacted ledger from its first
entry: the topic's own ledgers before the horizon may be gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from magnetar.broker.compaction.view import CompactedTopic
from magnetar.managed_ledger.api import (
    EARLIEST,
    CursorStats,
    Entry,
    ManagedCursor,
    Position,
)


def _after(position: Position) -> Position:
    return Position(position.ledger_id, position.entry_id + 1)


def _cap(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The first entries within ``max_bytes`` (at least one; all when it is 0)."""
    if max_bytes <= 0:
        return entries
    size = 0
    for n, entry in enumerate(entries, 1):
        size += len(entry.data)
        if size >= max_bytes:
            return entries[:n]
    return entries


class CompactedCursor:
    """A :class:`ManagedCursor` reading through a topic's compacted view."""

    def __init__(self, inner: ManagedCursor, view: CompactedTopic, *, from_earliest: bool) -> None:
        self.inner = inner
        self.view = view
        self._origin = inner.mark_delete_position if from_earliest else None
        """The mark-delete position while nothing is acknowledged (from-earliest only)."""
        self._next: Position | None = EARLIEST if from_earliest else None
        """Where the next compacted read starts when that is not the wrapped cursor's read
        position (before its mark-delete position, which a seek cannot express)."""

    # -- delegated state ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def mark_delete_position(self) -> Position:
        return self.inner.mark_delete_position

    @property
    def properties(self) -> Mapping[str, int]:
        return self.inner.properties

    @property
    def read_position(self) -> Position:
        return self._next if self._next is not None else self.inner.read_position

    # -- reads -------------------------------------------------------------------------------

    def _in_compacted(self) -> bool:
        horizon = self.view.horizon
        return horizon is not None and self.read_position <= horizon

    async def read_entries(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        while True:
            current = self.view.current
            start = self.read_position
            if current is None or start > current.horizon:
                break
            first = await current.find(start)
            if first is None:  # past the last compacted entry: the topic after the horizon
                self._next = None
                self.inner.seek(_after(current.horizon))
                return await self.inner.read_entries(max_entries, max_bytes=max_bytes)
            last = min(current.last_entry_id, first + max(1, max_entries) - 1)
            entries = _cap(await current.read(first, last), max_bytes)
            after = _after(entries[-1].position)
            self._next = after
            self.inner.seek(after)
            md = self.inner.mark_delete_position
            live = [
                e for e in entries if not (e.position > md and self.inner.is_deleted(e.position))
            ]
            if live:
                return live
        if self._next is not None:
            self.inner.seek(self._next)
            self._next = None
        return await self.inner.read_entries(max_entries, max_bytes=max_bytes)

    async def read_entries_or_wait(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        if self._in_compacted():
            entries = await self.read_entries(max_entries, max_bytes=max_bytes)
            if entries:
                return entries
        return await self.inner.read_entries_or_wait(max_entries, max_bytes=max_bytes)

    async def replay(self, positions: Iterable[Position]) -> list[Entry]:
        return await self.inner.replay(positions)

    def has_more_entries(self) -> bool:
        return self._in_compacted() or self.inner.has_more_entries()

    def rewind(self) -> None:
        self.inner.rewind()
        md = self.inner.mark_delete_position
        if self._origin is not None and md == self._origin:
            self._next = EARLIEST
        elif self.view.horizon is not None and md < self.view.horizon:
            self._next = _after(md)
        else:
            self._next = None

    def seek(self, position: Position) -> None:
        self.inner.seek(position)
        self._next = position if position < self.inner.read_position else None

    async def reset(self, position: Position) -> None:
        await self.inner.reset(position)
        # back to the earliest: rewinds go there too until something is acknowledged
        self._origin = self.inner.mark_delete_position if position == EARLIEST else None
        horizon = self.view.horizon
        if horizon is not None and position <= horizon and position < self.inner.read_position:
            self._next = position
        else:
            self._next = None

    # -- acknowledgements (the wrapped cursor's) ---------------------------------------------

    async def mark_delete(
        self, position: Position, *, properties: Mapping[str, int] | None = None
    ) -> None:
        await self.inner.mark_delete(position, properties=properties)

    async def delete(self, positions: Sequence[Position]) -> None:
        await self.inner.delete(positions)

    def _compacted(self, position: Position) -> bool:
        horizon = self.view.horizon
        return horizon is not None and position <= horizon

    async def delete_batch_indexes(
        self, position: Position, *, acked: Iterable[int], batch_size: int
    ) -> None:
        if not self._compacted(position):
            await self.inner.delete_batch_indexes(position, acked=acked, batch_size=batch_size)
        elif len(set(acked)) >= batch_size:
            await self.inner.delete([position])
        # else: a compacted batch's indexes are not the stored batch's; a partly acknowledged
        # compacted batch is delivered whole again on redelivery (at least once)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        if self._compacted(position):
            return None
        return self.inner.batch_ack_set(position)

    def is_deleted(self, position: Position) -> bool:
        return self.inner.is_deleted(position)

    def backlog(self) -> int:
        return self.inner.backlog()

    async def skip(self, n: int) -> None:
        await self.inner.skip(n)

    async def clear_backlog(self) -> None:
        await self.inner.clear_backlog()

    def stats(self) -> CursorStats:
        return self.inner.stats()

    async def flush(self) -> None:
        await self.inner.flush()

    async def close(self) -> None:
        await self.inner.close()
