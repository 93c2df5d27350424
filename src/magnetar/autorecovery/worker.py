"""The recovery worker: moves marked ledgers off their lost bookies.

For each ledger the auditor marked (``/underreplication/ledgers``), a worker first claims it
(``/underreplication/locks/<id>``, leased by its session: two workers never work on one
ledger at once, and a killed worker's claim dies with its lease). Then, for every fragment
whose ensemble holds a bookie of the mark:

1. the placement policy picks a replacement for that position (rack-aware: a rack the rest
   of the ensemble lacks when there is one), never one of the marked bookies;
2. every entry that position stores is read from the surviving replicas and written to the
   replacement (a recovery add, accepted on fenced ledgers too);
3. the ledger metadata is updated by compare-and-set, replacing the bookie in that fragment
   only if it is still there (a concurrent change is re-read and the step retried).

Only then is the mark cleared, and only if the auditor did not change it meanwhile.

``rate_bytes`` (BookKeeper's ``replicationRateByBytes``) caps what a worker copies per second,
so re-replication does not take the disks and the network from the cluster's traffic: before
each batch is written the worker waits until its bytes fit the rate (:class:`Pacer`).

Open ledgers as in BookKeeper: fragments before the last are immutable and copied while the
writer goes on; the last fragment belongs to the writer, which replaces a failed bookie itself
when its next add fails. When the last fragment still holds a marked bookie
``open_ledger_grace`` seconds after the mark, the writer is gone or idle: the worker recovers
the ledger (fences it on its bookies, so an old writer's next add fails — never two writers
— and closes it at its last recoverable entry), then copies the now-closed fragment.

A worker killed mid-copy leaves entries on a bookie the metadata does not name (harmless: the
copy is redone, the orphan is garbage) and the mark in place, so the next claim starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from magnetar.autorecovery import metrics
from magnetar.common import backoff
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import LedgerError, NoSuchLedgerError
from magnetar.ledger.metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.ledger.recovery import LedgerRecoveryOp
from magnetar.metadata import api

log = logging.getLogger(__name__)

COPY_BATCH = 256
"""Entries read (and written) per round trip of a fragment copy."""
COPY_BATCHES_IN_FLIGHT = 4
"""Batches written while the next one is read (bounds the memory of a copy)."""


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    poll_interval: float = 2.0
    open_ledger_grace: float = 30.0
    """BookKeeper's ``openLedgerRereplicationGracePeriod``, seconds."""
    session_ttl: float = 10.0
    rate_bytes: int = -1
    """BookKeeper's ``replicationRateByBytes``: bytes copied per second, at most (0 or less:
    no limit)."""


@dataclass
class Pacer:
    """At most ``rate`` bytes per second on average, a batch at a time: each batch of ``n``
    bytes goes once the previous ones' ``bytes / rate`` seconds have passed, and reserves
    ``n / rate`` seconds for itself. Time the worker spent idle or slower than the rate is
    not saved up for a burst."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _next_at: float = field(default=float("-inf"), init=False)

    async def take(self, n: int) -> None:
        now = self.clock()
        if self._next_at > now:
            await self.sleep(self._next_at - now)
        else:
            self._next_at = now
        self._next_at += n / self.rate


class ReplicationWorker:
    def __init__(
        self,
        store: api.MetadataStore,
        client: LedgerClient,
        options: WorkerOptions,
        *,
        name: str,
    ) -> None:
        self.store = store
        self.client = client
        self.options = options
        self.name = name
        self.recovered = 0
        self.pacer = Pacer(options.rate_bytes) if options.rate_bytes > 0 else None

    async def run(self) -> None:
        """Claim and recover marked ledgers, forever (cancel to stop)."""
        delays = backoff.Backoff(initial_s=0.5, max_s=5.0)
        while True:
            session: api.Session | None = None
            try:
                session = await self.store.session(self.options.session_ttl)
                delays.reset()
                while not session.lost:
                    if not await self.run_once(session):
                        await asyncio.sleep(self.options.poll_interval)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the store may be unreachable for a while
                log.warning("recovery worker %s: %s", self.name, err)
                await asyncio.sleep(delays.next())
            finally:
                if session is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(session.close())

    async def run_once(self, session: api.Session) -> bool:
        """One pass over the marks; True when a ledger was recovered."""
        done = False
        for found in await ur.marks(self.store):
            if session.lost:
                break
            if not await ur.claim(self.store, session, found.ledger_id, self.name):
                continue
            try:
                done = await self.recover(found.ledger_id) or done
            except (LedgerError, api.MetadataError) as err:
                log.warning(
                    "recovery worker %s: ledger %d: %s (left marked)",
                    self.name,
                    found.ledger_id,
                    err,
                )
            finally:
                await ur.release(self.store, found.ledger_id)
        return done

    async def recover(self, ledger_id: int) -> bool:
        """Move ``ledger_id`` off its marked bookies (the caller holds the claim); True when
        the mark was cleared."""
        found = await ur.mark_of(self.store, ledger_id)
        if found is None:
            return False
        lost = await self._still_lost(found)
        try:
            meta, _ = await self.client.read_metadata(ledger_id)
        except NoSuchLedgerError:
            await ur.clear(self.store, found)
            return False
        if not lost & {b for f in meta.fragments for b in f.ensemble}:
            # Already moved (a mark re-added from an audit that read the old metadata).
            await ur.clear(self.store, found)
            return False
        if not meta.closed and lost & set(meta.last_fragment.ensemble):
            age = time.time() - found.ctime_ms / 1000
            if meta.state is LedgerState.OPEN and age < self.options.open_ledger_grace:
                log.info(
                    "ledger %d: open, its writer may still replace %s itself (%.0fs of %.0fs)",
                    ledger_id,
                    sorted(lost),
                    age,
                    self.options.open_ledger_grace,
                )
            else:
                log.info("ledger %d: open past the grace period: fencing and recovering", ledger_id)
                meta, _ = await LedgerRecoveryOp(self.client, ledger_id, lost=lost).run()
        for index in range(len(meta.fragments)):
            meta = await self._recover_fragment(meta, index, lost)
        meta, _ = await self.client.read_metadata(ledger_id)
        if lost & {b for f in meta.fragments for b in f.ensemble}:
            return False
        if await ur.clear(self.store, found):
            metrics.RECOVERED_LEDGERS.inc()
            self.recovered += 1
            log.info("ledger %d: re-replicated off %s", ledger_id, sorted(lost))
            return True
        return False

    async def _still_lost(self, found: ur.Mark) -> set[str]:
        """The mark's bookies that are still to be moved off: those found lacking entries, and
        the others unless they are registered again and not decommissioning (a bookie back
        with its cookie verified still has its data)."""
        healthy = {
            s.bookie_id
            for s in await ur.bookie_statuses(self.store)
            if s.registered and s.state in (ur.BookieState.RW, ur.BookieState.RO)
        }
        return {b for b in found.missing if b in found.lacking or b not in healthy}

    async def _recover_fragment(
        self, meta: LedgerMetadata, index: int, lost: set[str]
    ) -> LedgerMetadata:
        fragment = meta.fragments[index]
        positions = [i for i, b in enumerate(fragment.ensemble) if b in lost]
        last_fragment = index + 1 == len(meta.fragments)
        if not positions or (last_fragment and not meta.closed):
            return meta
        end = meta.last_entry_id if last_fragment else meta.fragments[index + 1].first_entry_id - 1
        bookies = await self.client.bookies()
        ensemble = list(fragment.ensemble)
        for pos in positions:
            replacement = self.client.placement.replace(bookies, ensemble, pos, exclude=lost)
            await self._copy(meta, fragment, pos, end, replacement)
            ensemble[pos] = replacement
        return await self._swap(meta.ledger_id, fragment, tuple(ensemble))

    async def _copy(
        self, meta: LedgerMetadata, fragment: Fragment, pos: int, end: int, target: str
    ) -> None:
        """Write every entry of ``fragment`` (up to ``end``) that position ``pos`` stores to
        ``target``, read from the surviving replicas."""
        first = fragment.first_entry_id
        writing: deque[asyncio.Future[list[None]]] = deque()
        try:
            copied = await self._copy_batches(meta, pos, first, end, target, writing)
        finally:
            for pending in writing:  # after a failure: nobody waits for these any more
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
        log.info(
            "ledger %d: fragment %d position %d (%s): %d entries copied to %s",
            meta.ledger_id,
            first,
            pos,
            fragment.ensemble[pos],
            copied,
            target,
        )

    async def _copy_batches(
        self,
        meta: LedgerMetadata,
        pos: int,
        first: int,
        end: int,
        target: str,
        writing: deque[asyncio.Future[list[None]]],
    ) -> int:
        lac = end  # every entry of a fragment before the last, or of a closed one, is confirmed
        copied = 0
        lo = first
        while lo <= end:
            hi = min(end, lo + COPY_BATCH - 1)
            wanted = [e for e in range(lo, hi + 1) if pos in meta.write_set_indices(e)]
            if wanted:
                got = dict(await self.client.read_entries(meta, wanted[0], wanted[-1]))
                if self.pacer is not None:
                    await self.pacer.take(sum(len(got[e]) for e in wanted))
                writes = []
                for entry_id in wanted:
                    data = got[entry_id]
                    writes.append(
                        self.client.bookie(target).add_future(
                            ledger_id=meta.ledger_id,
                            entry_id=entry_id,
                            master_key=meta.password,
                            lac=lac,
                            data=data,
                            recovery=True,
                        )
                    )
                    metrics.RECOVERY_BYTES.inc(len(data))
                # Read the next batch while this one is written; a few batches in flight.
                writing.append(asyncio.gather(*writes))
                while len(writing) > COPY_BATCHES_IN_FLIGHT:
                    await writing.popleft()
                metrics.RECOVERY_ENTRIES.inc(len(wanted))
                copied += len(wanted)
            lo = hi + 1
        while writing:
            await writing.popleft()
        return copied

    async def _swap(
        self, ledger_id: int, old: Fragment, ensemble: tuple[str, ...]
    ) -> LedgerMetadata:
        """Replace ``old``'s ensemble in the stored metadata by compare-and-set, keeping every
        other change; positions whose bookie changed meanwhile are left as they are."""
        while True:
            current, version = await self.client.read_metadata(ledger_id)
            fragments = list(current.fragments)
            for i, f in enumerate(fragments):
                if f.first_entry_id != old.first_entry_id:
                    continue
                merged = tuple(
                    new if have == was else have
                    for have, was, new in zip(f.ensemble, old.ensemble, ensemble, strict=True)
                )
                fragments[i] = Fragment(f.first_entry_id, merged)
            updated = replace(current, fragments=tuple(fragments))
            if updated == current:
                return current
            try:
                await self.client.store_metadata(updated, version)
                return updated
            except api.BadVersionError:
                continue
