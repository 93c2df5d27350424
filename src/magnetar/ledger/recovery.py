"""Ledger recovery: how a new owner closes the previous writer's open ledger safely.

Steps (BookKeeper's): mark the metadata IN_RECOVERY; fence the ledger on the bookies of its
last fragment until no write set can still gather an ack quorum of unfenced bookies (so the
old writer's next adds fail); read forward from the highest LAC the bookies report, keeping
every entry any replica holds, until enough replicas of an entry's write set say it does
not exist that it can never have been acknowledged; re-replicate those tail entries to their
full write set; close the ledger at the last one. Every entry the old writer acknowledged
reached Aq bookies, so it is found and kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import replace

from magnetar.common import backoff
from magnetar.ledger import entry
from magnetar.ledger.errors import NoSuchEntryError, RecoveryError
from magnetar.ledger.io import LedgerIO
from magnetar.ledger.metadata import LedgerMetadata, LedgerState
from magnetar.metadata import api

log = logging.getLogger(__name__)


def fencing_covers(meta: LedgerMetadata, fenced_positions: set[int]) -> bool:
    """True when no write set of the last fragment has Aq unfenced positions left."""
    e, wq, aq = meta.ensemble_size, meta.write_quorum, meta.ack_quorum
    for start in range(e):
        write_set = {(start + i) % e for i in range(wq)}
        if len(write_set - fenced_positions) >= aq:
            return False
    return True


class LedgerRecoveryOp:
    """One recovery of one ledger; ``run`` returns the closed metadata and its version."""

    def __init__(
        self,
        client: LedgerIO,
        ledger_id: int,
        *,
        max_attempts: int = 3,
        lost: Collection[str] = (),
    ) -> None:
        self._client = client
        self.ledger_id = ledger_id
        self.max_attempts = max_attempts
        self.lost = frozenset(lost)
        """Bookies known gone for good (autorecovery): a tail entry re-replicated to every
        other bookie of its write set is enough, the re-replication that follows restores
        the lost copies."""

    async def run(self) -> tuple[LedgerMetadata, api.Version]:
        meta, version = await self._client.read_metadata(self.ledger_id)
        while not meta.closed:
            if meta.state is LedgerState.OPEN:
                try:
                    marked = replace(meta, state=LedgerState.IN_RECOVERY)
                    version = await self._client.store_metadata(marked, version)
                    meta = marked
                except api.BadVersionError:
                    meta, version = await self._client.read_metadata(self.ledger_id)
                    continue
            lac = await self._fence(meta)
            last, length = await self._recover_tail(meta, lac)
            closed = replace(meta, state=LedgerState.CLOSED, last_entry_id=last, length=length)
            try:
                version = await self._client.store_metadata(closed, version)
            except api.BadVersionError:
                meta, version = await self._client.read_metadata(self.ledger_id)
                continue  # someone else recovered/closed it meanwhile: take theirs
            meta = closed
            log.info("ledger %d recovered: closed at entry %d", self.ledger_id, last)
            await self._client.write_lac_best_effort(meta, last)
        return meta, version

    async def _fence(self, meta: LedgerMetadata) -> int:
        ensemble = meta.last_fragment.ensemble
        results = await asyncio.gather(
            *(self._client.bookie(b).fence(meta.ledger_id, meta.password) for b in ensemble),
            return_exceptions=True,
        )
        fenced = {i for i, r in enumerate(results) if not isinstance(r, BaseException)}
        if not fencing_covers(meta, fenced):
            errors = [str(r) for r in results if isinstance(r, BaseException)]
            raise RecoveryError(
                f"ledger {meta.ledger_id}: fenced on {len(fenced)} of {len(ensemble)} bookies, "
                f"not enough to stop the writer: {errors}"
            )
        lacs = [r[0] for r in results if isinstance(r, tuple)]
        # Entries before the last fragment were all confirmed when it was created.
        return max([*lacs, meta.last_fragment.first_entry_id - 1])

    async def _read_for_recovery(self, meta: LedgerMetadata, entry_id: int) -> bytes | None:
        """The entry's bytes if any replica has it; None when it can never have been acked."""
        delays = backoff.Backoff(initial_s=0.1, max_s=1.0)
        for _attempt in range(self.max_attempts):
            write_set = meta.write_set(entry_id)
            results = await asyncio.gather(
                *(
                    self._client.bookie(b).read(meta.ledger_id, entry_id, entry_id, past_lac=True)
                    for b in write_set
                ),
                return_exceptions=True,
            )
            missing = 0
            for r in results:
                if isinstance(r, list) and r:
                    return r[0][1]
                if isinstance(r, NoSuchEntryError) or (isinstance(r, list) and not r):
                    missing += 1
            if missing >= meta.write_quorum - meta.ack_quorum + 1:
                return None
            await asyncio.sleep(delays.next())
        raise RecoveryError(
            f"ledger {meta.ledger_id}: cannot decide whether entry {entry_id} exists"
        )

    async def _recover_tail(self, meta: LedgerMetadata, lac: int) -> tuple[int, int]:
        last = lac
        length = 0
        if lac >= 0:
            stored = await self._client.read_entries(meta, lac, lac)
            length = entry.unwrap(stored[0][1])[0]
        entry_id = lac + 1
        while True:
            data = await self._read_for_recovery(meta, entry_id)
            if data is None:
                break
            await self._rereplicate(meta, entry_id, data=data, lac=last)
            length = entry.unwrap(data)[0]
            last = entry_id
            entry_id += 1
        return last, length

    async def _rereplicate(
        self, meta: LedgerMetadata, entry_id: int, data: bytes, lac: int
    ) -> None:
        futures = [
            self._client.bookie(b).add_future(
                ledger_id=meta.ledger_id,
                entry_id=entry_id,
                master_key=meta.password,
                lac=lac,
                data=data,
                recovery=True,
            )
            for b in meta.write_set(entry_id)
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        ok = sum(1 for r in results if not isinstance(r, BaseException))
        reachable = sum(1 for b in meta.write_set(entry_id) if b not in self.lost)
        if ok < min(meta.ack_quorum, max(reachable, 1)):
            raise RecoveryError(
                f"ledger {meta.ledger_id}: entry {entry_id} re-replicated to {ok} bookies, "
                f"fewer than Aq={meta.ack_quorum}"
            )
