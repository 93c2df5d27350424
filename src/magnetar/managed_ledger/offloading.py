"""Which of a managed ledger's ledgers to offload, and the ledger-list records that make an
offload safe (Pulsar's ``ManagedLedgerImpl`` offload rules, as pure functions).

Why a module of its own: the managed ledger's implementation is being split into parts
(issue 13); these decisions do not depend on how it is split. The offload itself is done by
:class:`magnetar.offload.offloader.Offloader`; this module decides *which* ledgers, and
how each ledger record's ``offloaded`` field moves:

1. ``None`` -> the attempt (``complete: false``, the UUID), written by compare-and-set
   *before* anything is uploaded (:func:`with_offloaded`);
2. -> the result (``complete: true``, object keys, bucket, driver) once the offloader
   returned; from then on reads of the ledger may go to S3;
3. -> ``bookieDeleted: true`` after the bookie copy was deleted, which happens no earlier
   than the deletion lag after completion (:func:`bookie_copy_deletable`).

A record left at step 1 (a broker killed mid-offload) names the attempt whose objects must
be removed before the next attempt (:func:`stale_attempt`).

:class:`OffloadRunner` runs that sequence for one managed ledger over a narrow
:class:`OffloadHost` (the ledger list, its compare-and-set, opening and deleting ledgers),
so the managed ledger only has to provide those few operations;
:class:`~magnetar.managed_ledger.ledger.ManagedLedgerImpl` is that host when the broker has
an offloader (docs/offload.md).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.common import errors
from magnetar.managed_ledger.api import ManagedLedgerConfig, ManagedLedgerError, Position
from magnetar.managed_ledger.records import LedgerRecord, ManagedLedgerInfo
from magnetar.offload.offloader import Offloader, OffloadLocation, ReadableLedger
from magnetar.offload.reader import OffloadedLedgerReader

log = logging.getLogger(__name__)

DEFAULT_DELETION_LAG_MS = 4 * 3600 * 1000
"""Pulsar's ``managedLedgerOffloadDeletionLagMs`` default (4 hours)."""


@dataclass(frozen=True, slots=True)
class OffloadPolicy:
    threshold_bytes: int = -1
    """``offloadThreshold``: bytes kept on bookies; older ledgers are offloaded. -1 off."""
    threshold_seconds: int = -1
    """``offloadThresholdInSeconds``: ledgers closed longer ago are offloaded. -1 off."""
    deletion_lag_ms: int = DEFAULT_DELETION_LAG_MS
    """``offloadDeletionLagMs``: bookie copies are deleted this long after the offload."""

    @property
    def automatic(self) -> bool:
        return self.threshold_bytes >= 0 or self.threshold_seconds >= 0

    @classmethod
    def of(cls, config: ManagedLedgerConfig) -> OffloadPolicy:
        return cls(
            config.offload_threshold_bytes,
            config.offload_threshold_s,
            config.offload_deletion_lag_ms,
        )


def location_summary(record: LedgerRecord) -> dict[str, Any] | None:
    """Where a ledger's offloaded objects are (internalStats): the complete copy, or the
    attempt under way (``complete: false``); None when nothing is recorded."""
    o = record.offloaded
    if not o:
        return None
    return {
        "complete": bool(o.get("complete")),
        "driver": o.get("driver"),
        "bucket": o.get("bucket"),
        "dataKey": o.get("dataKey"),
        "indexKey": o.get("indexKey"),
        "uuid": o.get("uuid"),
        "bookieDeleted": bool(o.get("bookieDeleted")),
    }


def is_offloaded(record: LedgerRecord) -> bool:
    """The ledger's objects are complete and verified (reads may go to S3)."""
    return bool(record.offloaded and record.offloaded.get("complete"))


def stale_attempt(record: LedgerRecord) -> str | None:
    """The UUID of an attempt that was recorded but never completed (its objects, if any,
    are orphans to delete before the next attempt)."""
    o = record.offloaded
    if o and not o.get("complete") and o.get("uuid"):
        return str(o["uuid"])
    return None


def _candidates(ledgers: Sequence[LedgerRecord], current_id: int | None) -> list[LedgerRecord]:
    """Closed, non-empty ledgers not yet offloaded, oldest first."""
    return [
        r for r in ledgers if r.ledger_id != current_id and r.entries > 0 and not is_offloaded(r)
    ]


def ledgers_over_threshold(
    ledgers: Sequence[LedgerRecord], current_id: int | None, policy: OffloadPolicy, now_ms: int
) -> list[int]:
    """Ledgers the thresholds say to offload, oldest first: walking from the newest ledger,
    every ledger once the bytes summed so far exceed ``threshold_bytes``, and every ledger
    closed more than ``threshold_seconds`` ago (Pulsar's ``maybeOffload``)."""
    if not policy.automatic:
        return []
    wanted: set[int] = set()
    summed = 0
    for r in reversed(ledgers):
        summed += r.size
        if r.ledger_id == current_id or r.entries == 0 or is_offloaded(r):
            continue
        over_size = policy.threshold_bytes >= 0 and summed > policy.threshold_bytes
        too_old = (
            policy.threshold_seconds >= 0
            and r.timestamp_ms > 0
            and now_ms - r.timestamp_ms > policy.threshold_seconds * 1000
        )
        if over_size or too_old:
            wanted.add(r.ledger_id)
    return [r.ledger_id for r in _candidates(ledgers, current_id) if r.ledger_id in wanted]


def ledgers_before(
    ledgers: Sequence[LedgerRecord], current_id: int | None, position: Position
) -> list[int]:
    """Ledgers a manual offload up to ``position`` covers: every closed, non-empty ledger
    before the one holding ``position`` that is not offloaded yet (Pulsar's
    ``offloadPrefix``: the ledger of the position itself stays)."""
    return [
        r.ledger_id for r in _candidates(ledgers, current_id) if r.ledger_id < position.ledger_id
    ]


def first_unoffloaded(
    ledgers: Sequence[LedgerRecord], current_id: int | None = None
) -> Position | None:
    """The first position not in an offloaded ledger: of the first closed, non-empty ledger
    not offloaded, else of the current ledger ``current_id`` (None: everything is offloaded
    or the list is empty)."""
    for r in ledgers:
        if not is_offloaded(r) and (r.entries > 0 or r.ledger_id == current_id):
            return Position(r.ledger_id, 0)
    return None


def with_offloaded(
    info: ManagedLedgerInfo, ledger_id: int, offloaded: Mapping[str, Any] | None
) -> ManagedLedgerInfo:
    """``info`` with ledger ``ledger_id``'s ``offloaded`` replaced (KeyError when the
    ledger is no longer in the list: it was trimmed meanwhile)."""
    out = []
    found = False
    for r in info.ledgers:
        if r.ledger_id == ledger_id:
            found = True
            r = LedgerRecord(
                r.ledger_id,
                r.entries,
                r.size,
                r.timestamp_ms,
                dict(offloaded) if offloaded is not None else None,
            )
        out.append(r)
    if not found:
        raise KeyError(ledger_id)
    return info.with_ledgers(tuple(out))


def bookie_copy_deletable(record: LedgerRecord, policy: OffloadPolicy, now_ms: int) -> bool:
    """The ledger is offloaded, its bookie copy still exists, and the deletion lag since
    the offload completed has passed."""
    o = record.offloaded
    if not o or not o.get("complete") or o.get("bookieDeleted"):
        return False
    return now_ms - int(o.get("timestamp", now_ms)) >= policy.deletion_lag_ms


def mark_bookie_deleted(offloaded: Mapping[str, Any]) -> dict[str, Any]:
    return {**offloaded, "bookieDeleted": True}


class OffloadState(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class OffloadStatus:
    """What ``GET .../offload`` answers (Pulsar's ``OffloadProcessStatus``)."""

    status: OffloadState = OffloadState.NOT_RUN
    last_error: str = ""
    first_unoffloaded: Position | None = None

    def to_json(self, partition_index: int = -1) -> dict[str, Any]:
        p = self.first_unoffloaded
        return {
            "status": self.status.value,
            "lastError": self.last_error,
            "firstUnoffloadedMessage": {
                "ledgerId": p.ledger_id if p else -1,
                "entryId": p.entry_id if p else -1,
                "partitionIndex": partition_index,
            },
        }


class OffloadInProgressError(ManagedLedgerError, errors.TemporaryError):
    """An offload of this managed ledger is already running (``PUT .../offload`` answers
    409 Conflict, as Pulsar)."""


class OffloadHost(Protocol):
    """What :class:`OffloadRunner` needs of a managed ledger."""

    @property
    def name(self) -> str: ...

    @property
    def current_ledger_id(self) -> int | None: ...

    def ledger_records(self) -> Sequence[LedgerRecord]:
        """The ledger list as last written (oldest first)."""
        ...

    async def set_offloaded(self, ledger_id: int, offloaded: Mapping[str, Any] | None) -> None:
        """Write the list with ledger ``ledger_id``'s ``offloaded`` replaced, by
        compare-and-set under the list's lock (:func:`with_offloaded`); KeyError when the
        ledger is no longer listed."""
        ...

    async def open_ledger(self, ledger_id: int) -> ReadableLedger:
        """A read handle of the closed ledger (from its bookies)."""
        ...

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        """Delete the ledger from its bookies (and its ledger metadata)."""
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


RETRY_AFTER_FAILURE_S = 10.0
"""After a failed offload the thresholds wait this long before trying again (a manual
``PUT .../offload`` may try at once)."""


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and (err := task.exception()) is not None:
        log.warning("background offload task failed: %s", err)


class OffloadRunner:
    """Offloads one managed ledger's closed ledgers, one offload at a time, and keeps the
    status ``GET .../offload`` reports."""

    def __init__(self, host: OffloadHost, offloader: Offloader, policy: OffloadPolicy) -> None:
        self._host = host
        self._offloader = offloader
        self.policy = policy
        self.status = OffloadStatus()
        self._running = asyncio.Lock()
        self._readers: dict[int, OffloadedLedgerReader] = {}
        self._task: asyncio.Task[OffloadStatus | None] | None = None
        self._lag_task: asyncio.Task[list[int]] | None = None
        self.retry_after = 0.0
        """Monotonic time before which the thresholds do not start another offload (set
        after a failed one, so an unreachable S3 is not hammered)."""

    @property
    def running(self) -> bool:
        return self._running.locked() or (self._task is not None and not self._task.done())

    def start_prefix(self, upto: Position) -> asyncio.Task[OffloadStatus | None]:
        """Start :meth:`offload_prefix` in the background (``PUT .../offload`` answers at
        once, the status tells how it went); OffloadInProgressError when one is running."""
        if self._task is not None and not self._task.done():
            raise OffloadInProgressError(f"{self._host.name}: an offload is already running")
        self.status = OffloadStatus(
            OffloadState.RUNNING,
            "",
            first_unoffloaded(self._host.ledger_records(), self._host.current_ledger_id),
        )
        self._task = asyncio.ensure_future(self._prefix_when_free(upto))
        self._task.add_done_callback(_log_failure)
        return self._task

    async def _prefix_when_free(self, upto: Position) -> OffloadStatus:
        async with self._running:  # after a cleanup of stale attempts, if one runs
            ids = ledgers_before(self._host.ledger_records(), self._host.current_ledger_id, upto)
            return await self._run(ids)

    def start_thresholds(self) -> asyncio.Task[OffloadStatus | None] | None:
        """Start :meth:`maybe_offload` in the background unless an offload runs, the
        thresholds are off or select nothing, or a failed one is being backed off from."""
        if self.running or not self.policy.automatic or time.monotonic() < self.retry_after:
            return None
        wanted = ledgers_over_threshold(
            self._host.ledger_records(), self._host.current_ledger_id, self.policy, _now_ms()
        )
        if not wanted:
            return None
        self._task = asyncio.ensure_future(self.maybe_offload())
        self._task.add_done_callback(_log_failure)
        return self._task

    def start_lagged_deletes(self) -> None:
        """Start :meth:`delete_lagged_bookie_copies` in the background when some offloaded
        ledger's bookie copy is due (and no such run is under way)."""
        if self._lag_task is not None and not self._lag_task.done():
            return
        now = _now_ms()
        if not any(bookie_copy_deletable(r, self.policy, now) for r in self._host.ledger_records()):
            return
        self._lag_task = asyncio.ensure_future(self.delete_lagged_bookie_copies(now))
        self._lag_task.add_done_callback(_log_failure)

    async def stop(self) -> None:
        """Cancel a background offload (its attempt stays recorded as not complete; the
        next run or owner removes its objects) and wait for it to end."""
        tasks = [t for t in (self._task, self._lag_task) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._readers.clear()

    async def clean_stale(self) -> list[int]:
        """Remove the objects of attempts recorded but never completed (a broker killed
        mid-offload) and clear their records; the ledgers cleaned."""
        done = []
        async with self._running:
            for r in list(self._host.ledger_records()):
                stale = stale_attempt(r)
                if stale is None:
                    continue
                await self._offloader.delete_attempt(r.ledger_id, stale)
                try:
                    await self._host.set_offloaded(r.ledger_id, None)
                except KeyError:
                    continue
                done.append(r.ledger_id)
        if done:
            log.info("%s: removed incomplete offload attempts of ledgers %s", self._host.name, done)
        return done

    async def offload_prefix(self, upto: Position) -> OffloadStatus:
        """Offload every closed ledger before ``upto``'s ledger (the admin ``PUT
        .../offload``); raises OffloadInProgressError when one is running."""
        if self._running.locked():
            raise OffloadInProgressError(f"{self._host.name}: an offload is already running")
        async with self._running:
            ids = ledgers_before(self._host.ledger_records(), self._host.current_ledger_id, upto)
            return await self._run(ids)

    async def maybe_offload(self, now_ms: int | None = None) -> OffloadStatus | None:
        """The thresholds' offload (after a roll-over, on a timer); None when the thresholds
        select nothing or an offload is already running."""
        if self._running.locked():
            return None
        async with self._running:
            ids = ledgers_over_threshold(
                self._host.ledger_records(),
                self._host.current_ledger_id,
                self.policy,
                _now_ms() if now_ms is None else now_ms,
            )
            if not ids:
                return None
            return await self._run(ids)

    async def _run(self, ids: Sequence[int]) -> OffloadStatus:
        self.status = OffloadStatus(
            OffloadState.RUNNING,
            "",
            first_unoffloaded(self._host.ledger_records(), self._host.current_ledger_id),
        )
        try:
            for lid in ids:
                await self._offload_one(lid)
        except Exception as err:  # the status carries S3's (or the bookies') message
            log.warning("%s: offload failed: %s", self._host.name, err)
            self.retry_after = time.monotonic() + RETRY_AFTER_FAILURE_S
            self.status = OffloadStatus(
                OffloadState.ERROR,
                f"{type(err).__name__}: {err}",
                first_unoffloaded(self._host.ledger_records(), self._host.current_ledger_id),
            )
        else:
            self.status = OffloadStatus(
                OffloadState.SUCCESS,
                "",
                first_unoffloaded(self._host.ledger_records(), self._host.current_ledger_id),
            )
        return self.status

    def _record(self, ledger_id: int) -> LedgerRecord | None:
        for r in self._host.ledger_records():
            if r.ledger_id == ledger_id:
                return r
        return None

    async def _offload_one(self, ledger_id: int) -> None:
        record = self._record(ledger_id)
        if record is None or is_offloaded(record):
            return  # trimmed meanwhile, or done by an earlier run
        stale = stale_attempt(record)
        if stale is not None:  # a previous attempt died: its objects go first
            await self._offloader.delete_attempt(ledger_id, stale)
        attempt = self._offloader.begin(ledger_id)
        await self._host.set_offloaded(ledger_id, attempt.to_record())
        handle = await self._host.open_ledger(ledger_id)
        # on failure the offloader removed what it could; the record stays "not complete"
        # and names the attempt, so the next run removes whatever is left
        result = await self._offloader.offload(handle, attempt, topic=self._host.name)
        try:
            await self._host.set_offloaded(ledger_id, result.to_record())
        except KeyError:  # trimmed while it was offloaded
            await self._offloader.delete_attempt(ledger_id, attempt.uuid)

    async def delete_lagged_bookie_copies(self, now_ms: int | None = None) -> list[int]:
        """Delete the bookie copy of every offloaded ledger whose deletion lag has passed,
        then record it; the ledgers done."""
        now = _now_ms() if now_ms is None else now_ms
        done: list[int] = []
        for r in list(self._host.ledger_records()):
            if r.offloaded is None or not bookie_copy_deletable(r, self.policy, now):
                continue
            await self._host.delete_bookie_copy(r.ledger_id)
            try:
                await self._host.set_offloaded(r.ledger_id, mark_bookie_deleted(r.offloaded))
            except KeyError:
                continue
            done.append(r.ledger_id)
        return done

    async def reader(self, record: LedgerRecord) -> OffloadedLedgerReader:
        """The reader of an offloaded ledger (kept while the ledger is listed)."""
        reader = self._readers.get(record.ledger_id)
        if reader is None:
            if not record.offloaded:
                raise ValueError(f"ledger {record.ledger_id} is not offloaded")
            location = OffloadLocation.from_record(record.ledger_id, record.offloaded)
            reader = await self._offloader.open_reader(location, topic=self._host.name)
            self._readers[record.ledger_id] = reader
        return reader

    async def forget(self, trimmed: Sequence[LedgerRecord]) -> None:
        """Ledgers removed from the list (retention, topic deletion): delete their offloaded
        objects, complete or not."""
        for r in trimmed:
            self._readers.pop(r.ledger_id, None)
            if is_offloaded(r) and r.offloaded is not None:
                location = OffloadLocation.from_record(r.ledger_id, r.offloaded)
                await self._offloader.delete_offloaded(location, topic=self._host.name)
            elif (stale := stale_attempt(r)) is not None:
                await self._offloader.delete_attempt(r.ledger_id, stale)
