"""One topic's compactions: at most one at a time, their status, and the threshold.

Why this module exists: compaction is started three ways -- the admin API (``PUT
.../compaction``: 409 while one runs), the ``compactionThreshold`` policy checked by the
broker's periodic loop (:mod:`magnetar.broker.enforcement`), and tests -- and the admin API
reports the last one's outcome as Pulsar's ``LongRunningProcessStatus`` (``NOT_RUN``,
``RUNNING``, ``SUCCESS``, ``ERROR`` with ``lastError``). The status lives with the loaded
topic (as in Pulsar, it starts as ``NOT_RUN`` when the topic loads).

The threshold (Pulsar's ``checkCompaction``): compaction starts when the ``__compaction``
cursor's backlog -- the bytes stored after the horizon, all of the topic before the first
compaction -- exceeds the effective ``compaction_threshold`` (topic over namespace over the
broker's default; 0: never). While a threshold is set the cursor exists from the start, so
nothing published is trimmed before a compaction has seen it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import Any

from magnetar.broker.compaction.compactor import CompactionResult, compact
from magnetar.broker.compaction.view import CURSOR, CompactedTopic
from magnetar.broker.subscriptions.dispatch import TxnReadFilter
from magnetar.managed_ledger.api import InitialPosition, ManagedLedger, Position

log = logging.getLogger(__name__)


class Status(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class AlreadyRunningError(Exception):
    """A compaction of the topic is already running."""


class TopicCompaction:
    """A topic's compacted view and the compactions that write it."""

    def __init__(self, managed_ledger: ManagedLedger, view: CompactedTopic) -> None:
        self.managed_ledger = managed_ledger
        self.view = view
        self.status = Status.NOT_RUN
        self.last_error = ""
        self.last_result: CompactionResult | None = None
        self._succeeded_ms = 0
        self._failed_ms = 0
        self._task: asyncio.Task[CompactionResult] | None = None
        self.txn: TxnReadFilter | None = None
        """The topic's transaction buffer when transactions are enabled (set when attached)."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(self) -> asyncio.Task[CompactionResult]:
        """Start a compaction in the background; AlreadyRunningError while one runs."""
        if self.running:
            raise AlreadyRunningError(f"{self.managed_ledger.name}: compaction already in progress")
        self.status = Status.RUNNING
        self.last_error = ""
        task = asyncio.get_running_loop().create_task(
            self._run(), name=f"compaction {self.managed_ledger.name}"
        )
        task.add_done_callback(_retrieve)
        self._task = task
        return task

    async def _run(self) -> CompactionResult:
        try:
            result = await compact(self.managed_ledger, self.view, self.txn)
        except asyncio.CancelledError:
            self.status, self.last_error = Status.ERROR, "compaction was cancelled"
            raise
        except Exception as err:
            log.warning("%s: compaction failed: %s", self.managed_ledger.name, err)
            self.status, self.last_error = Status.ERROR, f"{type(err).__name__}: {err}"
            self._failed_ms = int(time.time() * 1000)
            raise
        self.status, self.last_result = Status.SUCCESS, result
        self._succeeded_ms = int(time.time() * 1000)
        return result

    async def compact(self) -> CompactionResult:
        """Compact now and wait for it (AlreadyRunningError while one runs)."""
        return await self.trigger()

    def status_json(self) -> dict[str, Any]:
        """Pulsar's ``LongRunningProcessStatus``."""
        return {"status": self.status.value, "lastError": self.last_error}

    def stats(self) -> dict[str, int]:
        """Pulsar's ``compaction`` of topic stats (CompactionStats): messages the last
        compaction removed (keyed messages read minus keys kept), when the last one succeeded
        and failed (ms, 0: never), how long the last successful one took."""
        result = self.last_result
        return {
            "lastCompactionRemovedEventCount": (
                max(0, result.messages_read - result.keys) if result is not None else 0
            ),
            "lastCompactionSucceedTimestamp": self._succeeded_ms,
            "lastCompactionFailedTimestamp": self._failed_ms,
            "lastCompactionDurationTimeInMills": (
                int(result.seconds * 1000) if result is not None else 0
            ),
        }

    def backlog_bytes(self) -> int:
        """Bytes stored after the compaction horizon (all of the topic before the first)."""
        ml = self.managed_ledger
        cursor = ml.cursors.get(CURSOR)
        after = cursor.mark_delete_position if cursor is not None else Position(-1, -1)
        total = 0
        for info in ml.ledgers():
            if info.ledger_id > after.ledger_id:
                total += info.size
            elif info.ledger_id == after.ledger_id and info.entries > 0:
                left = info.entries - 1 - after.entry_id
                total += info.size * max(0, left) // info.entries
        return total

    async def ensure_cursor(self) -> None:
        """Create the ``__compaction`` cursor (at the earliest entry) if it does not exist:
        with a threshold set, what is published must be kept until the first compaction
        has seen it, not trimmed before (Pulsar creates it with the topic then)."""
        if CURSOR not in self.managed_ledger.cursors:
            await self.managed_ledger.open_cursor(CURSOR, initial_position=InitialPosition.EARLIEST)

    def check_threshold(self, threshold: int) -> bool:
        """Start a compaction when the backlog is over ``threshold`` bytes (> 0); True when
        one was started."""
        if threshold <= 0 or self.running:
            return False
        if self.backlog_bytes() <= threshold:
            return False
        log.info(
            "%s: compaction backlog over %d bytes: compacting", self.managed_ledger.name, threshold
        )
        self.trigger()
        return True

    async def close(self) -> None:
        """The topic unloads: stop a compaction in progress (the view stays as recorded)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _retrieve(task: asyncio.Task[CompactionResult]) -> None:
    if not task.cancelled():
        task.exception()  # logged by _run; retrieved so asyncio does not warn
