"""A ledger as one client sees it: the single writer's pipelined adds, and reads.

Every in-flight add is its own object (:class:`PendingAddOp`), sent to the Wq bookies of its
write set; it completes once Aq of them confirmed, and completions are delivered strictly
in entry order, advancing the last-add-confirmed (LAC), which travels with later adds. A
bookie that fails or times out triggers an ensemble change: a replacement takes its position
in a new fragment recorded by compare-and-set on the ledger metadata, and every pending add
is re-sent where its write set changed — no acknowledged entry is lost, and the caller sees
no error. A fenced answer (another client recovered the ledger) fails the handle.

An add's outcome reaches its caller through a plain callback (:meth:`LedgerHandle.add`), not
a future: completions are collected and delivered together, in entry order, from one
event-loop callback, so a group of adds that one journal sync made durable costs one hop
through the loop instead of one per entry (docs/architecture.md, "The write path").
:meth:`LedgerHandle.append` wraps it in a future for callers off the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from magnetar.common import aio
from magnetar.common.buffers import Payload
from magnetar.ledger import entry
from magnetar.ledger.bookie_client import FAILED_PRECONDITION
from magnetar.ledger.errors import (
    BookieError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NoSuchEntryError,
)
from magnetar.ledger.io import LedgerIO
from magnetar.ledger.metadata import BookieId, LedgerMetadata, LedgerState
from magnetar.metadata import api

log = logging.getLogger(__name__)

AddDone = Callable[[int, BaseException | None], None]
"""An add's outcome: (entry id, None) once durable, or (-1, the error)."""


class PendingAddOp:
    """One entry on its way to its write set.

    A plain class, not a dataclass: in the compiled build a dataclass's generated
    ``__init__`` stays interpreted, and one of these is made per entry."""

    __slots__ = ("acked", "done", "entry_id", "finished", "length", "sent_to", "stored")

    def __init__(self, entry_id: int, stored: bytes, length: int, done: AddDone) -> None:
        self.entry_id = entry_id
        self.stored = stored
        self.length = length
        self.done = done
        self.finished = False
        """Completed (or failed): its outcome is on its way to ``done``."""
        self.sent_to: dict[int, BookieId] = {}
        """Ensemble position -> bookie the entry was last sent to at that position."""
        self.acked: dict[int, BookieId] = {}
        """Ensemble position -> bookie that confirmed it durable."""


class LedgerHandle:
    """Writer (``writable=True``, from create) or reader (from open) of one ledger."""

    def __init__(
        self,
        client: LedgerIO,
        metadata: LedgerMetadata,
        version: api.Version,
        *,
        writable: bool,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        self._client = client
        self.metadata = metadata
        self._version = version
        self.writable = writable
        self.last_add_confirmed = last_add_confirmed
        self._length = length  # bytes confirmed (writer) / known (reader)
        self._next_entry_id = last_add_confirmed + 1
        self._pushed_length = length
        self._pending: deque[PendingAddOp] = deque()
        self._failed: LedgerError | None = None
        self._changing = False
        self._failed_bookies: set[BookieId] = set()
        self._change_task: asyncio.Task[None] | None = None
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outcomes: list[tuple[AddDone, int, BaseException | None]] = []
        """Outcomes not yet delivered (:meth:`_deliver` runs once for all of them)."""
        self._drained: asyncio.Future[None] | None = None
        """Set once no add is pending (``close`` waits on it)."""

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def length(self) -> int:
        return self._length

    @property
    def closed(self) -> bool:
        return self.metadata.closed

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    # --- adds ------------------------------------------------------------------------------

    def add(self, data: Payload, done: AddDone) -> Payload:
        """Start adding ``data``; ``done`` gets its entry id once durable on Aq bookies, or
        the error. Outcomes are delivered in entry order, from the event loop, never from
        inside this call.

        Returns the payload as the ledger keeps it: a view into the stored entry, the one
        copy made of ``data`` (which may be a view into a receive buffer), or under
        ``entry.VIEW_MIN`` bytes a copy of it. A caller that keeps the payload (an entry
        cache) keeps this, not ``data``."""
        if self._loop is None:  # bound on first use: get_running_loop() costs a getpid()
            self._loop = asyncio.get_running_loop()
        if not self.writable or self.metadata.closed or self._closing:
            self._deliver_later(done, LedgerClosedError(f"ledger {self.ledger_id} is not writable"))
            return data
        if self._failed is not None:
            self._deliver_later(done, self._failed)
            return data
        self._pushed_length += len(data)
        stored = entry.wrap(self._pushed_length, data)
        op = PendingAddOp(
            entry_id=self._next_entry_id,
            stored=stored,
            length=self._pushed_length,
            done=done,
        )
        self._next_entry_id += 1
        self._pending.append(op)
        self._send(op)
        return entry.payload_of(stored)

    def append(self, data: Payload) -> asyncio.Future[int]:
        """:meth:`add` with a future for the entry id. Futures complete in entry order."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.add(data, functools.partial(aio.settle, fut))
        return fut

    def _deliver_later(
        self, done: AddDone, error: BaseException | None, entry_id: int = -1
    ) -> None:
        outcomes = self._outcomes
        if not outcomes:
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._deliver)
        outcomes.append((done, entry_id, error))

    def _deliver(self) -> None:
        """Hand every collected outcome to its caller, in the order they were collected."""
        outcomes, self._outcomes = self._outcomes, []
        for done, entry_id, error in outcomes:
            try:
                done(entry_id, error)
            except Exception:  # one caller's failure must not keep the others' outcomes
                log.exception("ledger %d: an add's completion callback failed", self.ledger_id)

    def _settled(self) -> None:
        """No add is pending any more: wake ``close``."""
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def add_entry(self, data: Payload) -> int:
        return await self.append(data)

    def _send(self, op: PendingAddOp) -> None:
        """Send ``op`` to every position of its write set it has not been sent to."""
        ensemble = self.metadata.last_fragment.ensemble
        for idx in self.metadata.write_set_indices(op.entry_id):
            bookie = ensemble[idx]
            if op.sent_to.get(idx) == bookie or bookie in self._failed_bookies:
                continue
            op.sent_to[idx] = bookie
            op.acked.pop(idx, None)
            self._client.bookie(bookie).add(
                ledger_id=self.ledger_id,
                entry_id=op.entry_id,
                master_key=self.metadata.password,
                lac=self.last_add_confirmed,
                data=op.stored,
                callback=functools.partial(self._on_add, op=op, idx=idx, bookie=bookie),
            )

    def _on_add(
        self, exc: BaseException | None, *, op: PendingAddOp, idx: int, bookie: str
    ) -> None:
        if self._failed is not None or op.finished or op.sent_to.get(idx) != bookie:
            return
        if exc is None:
            op.acked[idx] = bookie
            self._complete_in_order()
            return
        if isinstance(exc, BookieError) and exc.code == FAILED_PRECONDITION:
            self._fail(LedgerFencedError(f"ledger {self.ledger_id} fenced by {bookie}"))
            return
        log.warning(
            "ledger %d: add of entry %d to %s failed: %s", self.ledger_id, op.entry_id, bookie, exc
        )
        self._bookie_failed(bookie)

    def _complete_in_order(self) -> None:
        if self._changing:
            return  # BookKeeper's rule: no completions while the ensemble is changing
        aq = self.metadata.ack_quorum
        ensemble = self.metadata.last_fragment.ensemble
        pending = self._pending
        completed = False
        while pending:
            op = pending[0]
            confirmed = sum(1 for i, b in op.acked.items() if ensemble[i] == b)
            if confirmed < aq:
                break
            pending.popleft()
            self.last_add_confirmed = op.entry_id
            self._length = op.length
            if not op.finished:
                op.finished = True
                self._deliver_later(op.done, None, op.entry_id)
            completed = True
        if completed and not pending:
            self._settled()

    def _fail(self, error: LedgerError) -> None:
        if self._failed is None:
            self._failed = error
        while self._pending:
            op = self._pending.popleft()
            if not op.finished:
                op.finished = True
                self._deliver_later(op.done, error)
        self._settled()

    # --- ensemble change --------------------------------------------------------------------

    def _bookie_failed(self, bookie: BookieId) -> None:
        self._failed_bookies.add(bookie)
        self._changing = True
        if self._change_task is None or self._change_task.done():
            self._change_task = asyncio.create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while True:
                ensemble = self.metadata.last_fragment.ensemble
                failed = [i for i, b in enumerate(ensemble) if b in self._failed_bookies]
                if not failed:
                    break
                await self._replace(failed)
        except LedgerError as err:
            log.error("ledger %d: ensemble change failed: %s", self.ledger_id, err)
            self._fail(err)
            return
        except Exception as err:  # keep the handle consistent whatever went wrong
            log.exception("ledger %d: ensemble change failed", self.ledger_id)
            self._fail(LedgerError(f"ensemble change failed: {err}"))
            return
        finally:
            self._changing = False
        for op in list(self._pending):
            self._send(op)
        self._complete_in_order()

    async def _replace(self, positions: list[int]) -> None:
        bookies = await self._client.bookies()
        ensemble = list(self.metadata.last_fragment.ensemble)
        for idx in positions:
            ensemble[idx] = self._client.placement.replace(
                bookies, ensemble, idx, exclude=self._failed_bookies
            )
        first = self.last_add_confirmed + 1
        new = self.metadata.with_fragment(first, tuple(ensemble))
        raced = False
        try:
            self._version = await self._client.store_metadata(new, self._version)
        except api.BadVersionError:
            raced = True
        if raced:  # read outside the handler (structure/test_compiled_handlers.py)
            current, version = await self._client.read_metadata(self.ledger_id)
            if current.state is not LedgerState.OPEN:
                raise LedgerFencedError(f"ledger {self.ledger_id} is {current.state.value}: fenced")
            self.metadata, self._version = current, version
            return  # loop again on the fresh metadata
        log.info(
            "ledger %d: ensemble change at entry %d: %s -> %s",
            self.ledger_id,
            first,
            list(self.metadata.last_fragment.ensemble),
            ensemble,
        )
        self.metadata = new

    # --- close ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Wait for pending adds, then record the ledger closed at its LAC."""
        if self.metadata.closed or not self.writable:
            return
        self._closing = True
        if self._pending:
            drained = self._drained
            if drained is None or drained.done():  # a second close() waits on the same one
                drained = self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(drained)  # a cancelled close() leaves it to the others
        if self._change_task is not None and not self._change_task.done():
            with contextlib.suppress(Exception):
                await self._change_task
        if isinstance(self._failed, LedgerFencedError):
            raise self._failed
        while True:
            closed = replace(
                self.metadata,
                state=LedgerState.CLOSED,
                last_entry_id=self.last_add_confirmed,
                length=self._length,
            )
            raced = False
            try:
                self._version = await self._client.store_metadata(closed, self._version)
            except api.BadVersionError:
                raced = True
            if not raced:
                break
            current, version = await self._client.read_metadata(self.ledger_id)
            if current.closed and current.last_entry_id == self.last_add_confirmed:
                self.metadata, self._version = current, version
                return
            if current.state is LedgerState.OPEN and (
                current.last_fragment == self.metadata.last_fragment
            ):
                # Re-replication moved an earlier fragment: keep its ensembles, close.
                self.metadata, self._version = current, version
                continue
            raise LedgerFencedError(f"ledger {self.ledger_id} was recovered by another client")
        self.metadata = closed
        await self._client.write_lac_best_effort(self.metadata, self.last_add_confirmed)

    # --- reads ------------------------------------------------------------------------------

    async def refresh_lac(self) -> int:
        """Reader of an open ledger: learn the LAC from the bookies (or the closed end)."""
        if self.writable:
            return self.last_add_confirmed
        current, self._version = await self._client.read_metadata(self.ledger_id)
        self.metadata = current
        if current.closed:
            self.last_add_confirmed = current.last_entry_id
            self._length = current.length
        else:
            lac = await self._client.read_lac(current)
            self.last_add_confirmed = max(self.last_add_confirmed, lac)
        return self.last_add_confirmed

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]:
        """Entries ``first..last`` (inclusive) as (entry id, payload), with failover to the
        other replicas of each entry. Only entries up to the LAC are readable. Each payload
        is a view into the entry as read, or a copy under ``entry.VIEW_MIN`` bytes."""
        if first < 0 or last < first:
            raise ValueError(f"bad range {first}..{last}")
        if last > self.last_add_confirmed:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is past the last add confirmed "
                f"{self.last_add_confirmed}"
            )
        failed: NoSuchEntryError | BookieError | None = None
        try:
            stored = await self._client.read_entries(self.metadata, first, last)
        except (NoSuchEntryError, BookieError) as exc:
            failed = exc
        if failed is not None:  # retried outside the handler (structure/test_compiled_handlers)
            if not await self._adopt_moved_fragments():
                raise failed
            stored = await self._client.read_entries(self.metadata, first, last)
        payload_of = entry.payload_of
        return [(eid, payload_of(data)) for eid, data in stored]

    async def _adopt_moved_fragments(self) -> bool:
        """After a failed read: take the stored metadata when re-replication has since moved
        fragments to other bookies (True), so the retry reads the restored copies. A writer
        adopts it only while its own last fragment is unchanged and no ensemble change runs."""
        current, version = await self._client.read_metadata(self.ledger_id)
        if current.fragments == self.metadata.fragments:
            return False
        if self.writable:
            if (
                self._changing
                or current.state is not LedgerState.OPEN
                or current.last_fragment != self.metadata.last_fragment
            ):
                return False
            self.metadata, self._version = current, version
            return True
        self.metadata = current
        self._version = version
        return True
