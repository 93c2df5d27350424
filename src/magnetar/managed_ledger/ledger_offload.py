"""A managed ledger's offload side (docs/offload.md): what the topic's owners ask of it.

Why this module exists: offload is one concern of the managed ledger with its own life
(an :class:`~magnetar.managed_ledger.offloading.OffloadRunner` per ledger, background runs,
cleanups), kept out of ``ledger.py``. The managed ledger stays the runner's
:class:`~magnetar.managed_ledger.offloading.OffloadHost` (its ledger list, written by the same
compare-and-set, and its ledgers); this class is what the broker calls: a manual offload
(admin ``PUT .../offload``), the thresholds (the policy loop), the status, and the hooks the
managed ledger runs when it opens, trims, closes and is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from magnetar.managed_ledger import api, offloading, records
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.offloading import OffloadHost, OffloadRunner, OffloadStatus
from magnetar.offload.offloader import Offloader
from magnetar.offload.reader import OffloadedLedgerReader

log = logging.getLogger(__name__)


class LedgerOffload:
    """Offload of one managed ledger (``ManagedLedgerImpl.offload``; None on a broker
    without an offloader)."""

    def __init__(
        self,
        host: OffloadHost,
        offloader: Offloader,
        config: api.ManagedLedgerConfig,
        check_usable: Callable[[], None],
    ) -> None:
        self._name = host.name
        self._runner = OffloadRunner(host, offloader, offloading.OffloadPolicy.of(config))
        self._check_usable = check_usable

    def update_config(self, config: api.ManagedLedgerConfig) -> None:
        self._runner.policy = offloading.OffloadPolicy.of(config)

    def reader(self, record: records.LedgerRecord) -> Awaitable[OffloadedLedgerReader] | None:
        """The S3 reader of an offloaded ledger (None: read it from its bookies)."""
        if not offloading.is_offloaded(record):
            return None
        return self._runner.reader(record)

    def prefix(self, upto: Position) -> None:
        """Start offloading every closed ledger before ``upto``'s ledger (admin ``PUT
        .../offload``); :attr:`status` tells how it goes. Raises OffloadInProgressError
        when an offload is running, the managed ledger's error when it is closed or fenced."""
        self._check_usable()
        self._runner.start_prefix(upto)

    def maybe(self) -> bool:
        """Start the offload the thresholds ask for (the broker's policy loop calls this);
        whether one was started."""
        try:
            self._check_usable()
        except api.ManagedLedgerError:
            return False
        return self._runner.start_thresholds() is not None

    @property
    def status(self) -> OffloadStatus:
        return self._runner.status

    @staticmethod
    def stale(ledgers: Sequence[records.LedgerRecord]) -> bool:
        """Whether an attempt a killed owner left incomplete is recorded."""
        return any(offloading.stale_attempt(r) for r in ledgers)

    async def clean_stale(self) -> None:
        """Remove incomplete attempts (objects and record); S3 down: the next offload run
        of the ledger retries it."""
        try:
            await self._runner.clean_stale()
        except Exception as err:
            log.warning("%s: cleanup of incomplete offload attempts failed: %s", self._name, err)

    async def forget(self, gone: Sequence[records.LedgerRecord]) -> None:
        """Delete the offloaded objects of ledgers removed from the list (raises)."""
        if any(r.offloaded for r in gone):
            await self._runner.forget(gone)

    async def forget_trimmed(self, gone: Sequence[records.LedgerRecord]) -> None:
        """The trimmer's hook: objects of trimmed ledgers go too (failures are logged; the
        objects are then left in the bucket, named in the log)."""
        try:
            await self.forget(gone)
        except Exception as err:
            log.warning(
                "%s: offloaded objects of trimmed ledgers %s not deleted: %s",
                self._name,
                [r.ledger_id for r in gone if r.offloaded],
                err,
            )

    def start_lagged_deletes(self) -> None:
        """Delete the bookie copies whose deletion lag has passed (the ledger's timer)."""
        self._runner.start_lagged_deletes()

    async def stop(self) -> None:
        await self._runner.stop()
