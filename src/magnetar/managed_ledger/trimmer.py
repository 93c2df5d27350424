"""Trimming: deleting the ledgers no durable cursor and no retention needs any more.

Why this module exists: trimming runs in the background, triggered by moving mark-delete
positions (at most every ``TRIM_MIN_INTERVAL_S``) and by the managed ledger's timer; one trim
at a time. Which ledgers go is the ledger list's answer
(:meth:`~magnetar.managed_ledger.ledger_list.LedgerList.trimmable`); they are removed from
the stored list first (compare-and-set) and deleted after (bookie copy, then offloaded
objects), so a crash in between leaves only unlisted ledgers behind, never a listed one
that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.list_store import ListStore
from magnetar.managed_ledger.reader import EntryReader

log = logging.getLogger(__name__)

TRIM_MIN_INTERVAL_S = 0.2
"""Trims requested by moving mark-delete positions run at most this often."""


class TrimHost(Protocol):
    """What the trimmer needs from the managed ledger."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> api.ManagedLedgerConfig: ...
    @property
    def total_size(self) -> int: ...
    @property
    def usable(self) -> bool:
        """Neither closed nor fenced."""

    def slowest_mark_delete(self) -> Position | None: ...
    def set_fenced(self, why: str) -> None: ...
    async def delete_ledger(self, ledger_id: int) -> None: ...
    async def delete_offloaded(self, gone: Sequence[records.LedgerRecord]) -> None:
        """Delete the offloaded objects of ledgers removed from the list (if any)."""


class Trimmer:
    def __init__(self, host: TrimHost, stored: ListStore, reader: EntryReader) -> None:
        self._host = host
        self._stored = stored
        self._reader = reader
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._last = 0.0

    def request(self) -> None:
        """Trim soon (rate-limited): a mark-delete position moved."""
        if self._handle is not None or self._task is not None or not self._host.usable:
            return
        delay = max(0.0, self._last + TRIM_MIN_INTERVAL_S - time.monotonic())
        self._handle = asyncio.get_running_loop().call_later(delay, self.start)

    def start(self) -> None:
        """Trim now in the background, unless a trim is running."""
        self._handle = None
        if self._task is None and self._host.usable:
            self._task = asyncio.create_task(self._trim_safely())

    async def _trim_safely(self) -> None:
        try:
            await self.trim()
        except api.ManagedLedgerFencedError as err:
            self._host.set_fenced(str(err))
        except Exception as err:
            log.warning("%s: trim failed: %s", self._host.name, err)
        finally:
            self._task = None

    async def trim(self) -> list[int]:
        """Delete the ledgers no durable cursor and no retention needs; their ids."""
        self._last = time.monotonic()
        host = self._host
        if not host.usable:
            return []
        lst = self._stored.ledgers
        slowest = host.slowest_mark_delete()
        if slowest is None:
            slowest = lst.lac
        async with self._stored.lock:
            doomed = lst.trimmable(
                slowest,
                total_size=host.total_size,
                now_ms=int(time.time() * 1000),
                retention_time_s=host.config.retention_time_s,
                retention_bytes=host.config.retention_bytes,
            )
            if not doomed:
                return []
            await self._stored.write(lst.info.with_ledgers(lst.info.ledgers[len(doomed) :]))
        ids = [r.ledger_id for r in doomed]
        self._reader.forget(ids)
        for lid in ids:
            await host.delete_ledger(lid)
        await host.delete_offloaded(doomed)
        log.info("%s: trimmed ledgers %s", host.name, ids)
        return ids

    async def stop(self) -> None:
        """No more trims; one already writing the list is awaited (cancelling it could lose
        the version it wrote)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
