"""The auditor: finds ledgers that lost a replica and marks them under-replicated.

One auditor runs in a cluster at a time: every candidate (each ``magnetar autorecovery``
process, each bookie started with ``--autorecovery``) tries to create the auditor key under
its session; the one that did audits until its session is lost (killed, cut off from the
store), then the key's lease runs out and another candidate takes over. The audit itself is
idempotent (marks only grow until a worker clears them), so an auditor killed mid-audit
leaves nothing half done: the next one simply audits again.

Each audit (every ``audit_interval`` seconds):

* bookies not registered (no live lease) are *lost* once they have been missing for
  ``lost_bookie_recovery_delay`` seconds (BookKeeper's ``lostBookieRecoveryDelay``,
  counted from when this auditor first saw them missing); decommissioning bookies count as
  lost at once;
* every ledger whose ensembles hold a lost bookie is marked
  (:func:`magnetar.ledger.underreplication.mark`);
* a decommissioning bookie that no ledger references in two audits in a row is finished:
  its cookie is removed and its state recorded ``decommissioned``.

Every ``periodic_check_interval`` seconds (``auditorPeriodicCheckInterval``) it also checks
closed ledgers' copies: for every fragment and ensemble position it asks that bookie for the
first and the last entry the position stores; a replica that answers "no such entry" (or
"no such ledger") is missing data, and the ledger is marked with that bookie.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass

from magnetar.autorecovery import metrics
from magnetar.common import backoff
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import NoSuchEntryError
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import api, keys

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AuditorOptions:
    lost_bookie_recovery_delay: float = 30.0
    audit_interval: float = 5.0
    periodic_check_interval: float = 604800.0
    """Seconds between checks of closed ledgers' copies (0: never)."""
    session_ttl: float = 10.0


class Auditor:
    def __init__(
        self,
        store: api.MetadataStore,
        client: LedgerClient,
        options: AuditorOptions,
        *,
        name: str,
    ) -> None:
        self.store = store
        self.client = client
        self.options = options
        self.name = name
        self.elected = False
        self._missing_since: dict[str, float] = {}
        self._unreferenced: dict[str, int] = {}
        self._last_periodic = 0.0
        self.audits = 0
        """Audits completed by this auditor (tests wait on it)."""

    # --- election --------------------------------------------------------------------------

    async def run(self) -> None:
        """Stand for election, audit while elected; forever (cancel to stop)."""
        delays = backoff.Backoff(initial_s=0.5, max_s=5.0)
        while True:
            session: api.Session | None = None
            try:
                session = await self.store.session(self.options.session_ttl)
                await self._wait_elected(session)
                delays.reset()
                self.elected = True
                metrics.AUDITOR_ELECTED.set(1)
                log.info("auditor %s: elected", self.name)
                self._missing_since.clear()
                self._last_periodic = time.monotonic()
                while not session.lost:
                    await self.audit()
                    await asyncio.sleep(self.options.audit_interval)
                log.warning("auditor %s: session lost; standing again", self.name)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the store may be unreachable for a while
                log.warning("auditor %s: %s", self.name, err)
                await asyncio.sleep(delays.next())
            finally:
                self.elected = False
                metrics.AUDITOR_ELECTED.set(0)
                if session is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(session.close())

    async def _wait_elected(self, session: api.Session) -> None:
        value = json.dumps({"format": 1, "auditor": self.name}).encode()
        delays = backoff.Backoff(initial_s=0.5, max_s=2.0)
        while True:
            if session.lost:
                raise api.SessionLostError("lost before being elected")
            try:
                await self.store.put(
                    keys.AUDITOR, value, expected_version=api.NOT_EXISTS, session=session
                )
                return
            except api.BadVersionError:  # another auditor holds it: stand again soon
                await asyncio.sleep(delays.next())

    # --- one audit -------------------------------------------------------------------------

    async def audit(self) -> None:
        """Mark every ledger on a lost or decommissioning bookie (see the module doc)."""
        now = time.monotonic()
        statuses = {s.bookie_id: s for s in await ur.bookie_statuses(self.store)}
        registered = {b for b, s in statuses.items() if s.registered}
        leaving = {b for b, s in statuses.items() if s.state is ur.BookieState.DECOMMISSIONING}
        for gone in list(self._missing_since):
            if gone in registered:
                del self._missing_since[gone]
        periodic = (
            self.options.periodic_check_interval > 0
            and now - self._last_periodic >= self.options.periodic_check_interval
        )
        references: dict[str, int] = {b: 0 for b in leaving}
        marked = 0
        async for record in self.store.scan_all(keys.LEDGERS):
            try:
                meta = LedgerMetadata.from_json(record.value)
            except (ValueError, KeyError, TypeError):
                continue
            on = {b for f in meta.fragments for b in f.ensemble}
            lost: set[str] = set()
            for bookie in on:
                if bookie in leaving:
                    references[bookie] += 1
                    lost.add(bookie)
                elif bookie not in registered:
                    since = self._missing_since.setdefault(bookie, now)
                    if now - since >= self.options.lost_bookie_recovery_delay:
                        lost.add(bookie)
            lacking = (
                await self._missing_copies(meta, registered - lost)
                if periodic and meta.closed
                else set()
            )
            if (lost or lacking) and await ur.mark(
                self.store, meta.ledger_id, lost, lacking=lacking
            ):
                marked += 1
                log.info("auditor: ledger %d under-replicated (%s)", meta.ledger_id, sorted(lost))
        if periodic:
            self._last_periodic = now
        for bookie, count in references.items():
            metrics.DECOMMISSION_REMAINING.labels(bookie).set(count)
            if count:
                self._unreferenced.pop(bookie, None)
                continue
            self._unreferenced[bookie] = self._unreferenced.get(bookie, 0) + 1
            if self._unreferenced[bookie] >= 2:
                await ur.finish_decommission(self.store, bookie, statuses[bookie].instance_id)
                metrics.DECOMMISSION_REMAINING.remove(bookie)
                self._unreferenced.pop(bookie, None)
                log.info("auditor: bookie %s decommissioned (no ledger references it)", bookie)
        marks = await ur.marks(self.store)
        metrics.UNDER_REPLICATED.set(len(marks))
        self.audits += 1
        if marked:
            log.info("auditor: %d ledger(s) newly marked, %d marked in all", marked, len(marks))

    async def _missing_copies(self, meta: LedgerMetadata, alive: set[str]) -> set[str]:
        """Live bookies of a closed ledger that lack the first or last entry they store in a
        fragment (the periodic check)."""
        missing: set[str] = set()
        for i, fragment in enumerate(meta.fragments):
            end = (
                meta.fragments[i + 1].first_entry_id - 1
                if i + 1 < len(meta.fragments)
                else meta.last_entry_id
            )
            if end < fragment.first_entry_id:
                continue
            for pos, bookie in enumerate(fragment.ensemble):
                if bookie not in alive or bookie in missing:
                    continue
                stored = _stored_ends(meta, pos, fragment.first_entry_id, end)
                for entry_id in stored:
                    try:
                        await self.client.bookie(bookie).read(
                            meta.ledger_id, entry_id, entry_id, past_lac=True
                        )
                    except NoSuchEntryError:
                        log.warning(
                            "auditor: ledger %d entry %d missing on %s",
                            meta.ledger_id,
                            entry_id,
                            bookie,
                        )
                        missing.add(bookie)
                        break
                    except Exception as err:  # unreachable now: the loss rule covers it
                        log.info("auditor: check of %s: %s", bookie, err)
                        break
        return missing


def _stored_ends(meta: LedgerMetadata, pos: int, first: int, last: int) -> list[int]:
    """The first and the last entry of ``first..last`` that ensemble position ``pos`` stores."""
    e = meta.ensemble_size
    lo = next(
        (x for x in range(first, min(last, first + e - 1) + 1) if pos in meta.write_set_indices(x)),
        None,
    )
    hi = next(
        (
            x
            for x in range(last, max(first, last - e + 1) - 1, -1)
            if pos in meta.write_set_indices(x)
        ),
        None,
    )
    return sorted({x for x in (lo, hi) if x is not None})
