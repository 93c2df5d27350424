"""Garbage collection of entry logs: reclaim the space of deleted ledgers.

Why this module exists: entry logs are append-only and mix ledgers, so deleting a ledger only
marks it (and drops its index entries); the bytes stay until the logs holding them are
collected. As in BookKeeper's GarbageCollectorThread, each log's usage (bytes per ledger,
kept in the index) tells its live fraction: a log with no live bytes is deleted outright, a log
below the threshold is *compacted* — its live entries (those the index still points at) are
copied to the current log, the index is switched to the copies in one transaction, then the old
file is deleted.

:func:`plan` is pure (unit-tested); :func:`run` does the I/O and is called from the storage's
flush thread while the storage holds its flush lock, so it never races a flush.

Compaction shares the interpreter with the threads serving clients (in a standalone, with the
broker too): a thread that keeps the interpreter busy makes every other thread wait up to the
switch interval (5 ms) each time it wakes, which a synchronous producer saw as 15-20 ms sends
for as long as a 512 MiB log was scanned. So, as BookKeeper throttles its compaction, the scan
steps over dead records from their headers alone and :class:`Pacer` pauses it briefly after
every millisecond of work (docs/architecture.md, "The write path").
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.bookie.storage import entrylog, index, journal

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Plan:
    remove: list[int] = field(default_factory=list)
    """Logs with no live bytes: delete."""
    rewrite: list[int] = field(default_factory=list)
    """Logs whose live fraction is under the threshold: copy live entries, then delete."""

    def __bool__(self) -> bool:
        return bool(self.remove or self.rewrite)


def plan(
    log_usage: Mapping[int, Mapping[int, int]],
    is_live: Callable[[int], bool],
    threshold: float,
) -> Plan:
    """Choose the logs to collect from their per-ledger usage and the set of live ledgers."""
    remove: list[int] = []
    rewrite: list[int] = []
    for log_id in sorted(log_usage):
        usage = log_usage[log_id]
        total = sum(usage.values())
        live = sum(n for lid, n in usage.items() if is_live(lid))
        if live == 0:
            remove.append(log_id)
        elif total > 0 and live / total < threshold:
            rewrite.append(log_id)
    return Plan(remove=remove, rewrite=rewrite)


class Pacer:
    """Called between records: after ``work_s`` of running, sleeps ``pause_s`` (a sleep
    releases the interpreter, so a client thread waiting for it runs at once)."""

    def __init__(self, work_s: float = 0.001, pause_s: float = 0.0005) -> None:
        self.work_s, self.pause_s = work_s, pause_s
        self.pauses = 0
        self._since = time.monotonic()

    def __call__(self) -> None:
        if time.monotonic() - self._since >= self.work_s:
            time.sleep(self.pause_s)
            self.pauses += 1
            self._since = time.monotonic()


@dataclass(frozen=True, slots=True)
class Outcome:
    freed_bytes: int
    removed_logs: list[int]
    new_usage: dict[int, dict[int, int]]
    """The full usage of the logs the copies went to (replaces the storage's entries)."""
    moved_entries: int


def run(
    the_plan: Plan,
    *,
    directory: Path,
    reader: entrylog.EntryLogReader,
    writer: entrylog.EntryLogWriter,
    idx: index.Index,
    is_live: Callable[[int], bool],
    current_usage: Mapping[int, Mapping[int, int]],
    pace: Callable[[], None] | None = None,
) -> Outcome:
    """Execute a plan (synchronous: call it from the flush thread)."""
    moves: list[tuple[bytes, bytes]] = []
    new_usage: dict[int, dict[int, int]] = {}
    done: list[int] = list(the_plan.remove)
    pace = pace or Pacer()

    def current(ledger_id: int, entry_id: int, where: entrylog.Location) -> bool:
        # a live ledger's entry the index still points at (not deleted, not superseded)
        return is_live(ledger_id) and idx.get(ledger_id, entry_id) == where

    for log_id in the_plan.rewrite:
        try:
            records = list(reader.scan(log_id, keep=current, pace=pace))
        except Exception:
            log.exception("entry log %08x cannot be compacted; left in place", log_id)
            continue
        for rec in records:
            pace()
            loc = writer.append(rec.ledger_id, rec.entry_id, rec.data)
            moves.append(
                (index.LOC_KEY.pack(rec.ledger_id, rec.entry_id), index.LOC_VAL.pack(*loc))
            )
            usage = new_usage.setdefault(loc.log_id, {})
            usage[rec.ledger_id] = usage.get(rec.ledger_id, 0) + loc.size
        done.append(log_id)
    if moves:
        writer.sync()
    merged: dict[int, dict[int, int]] = {}
    for log_id, usage in new_usage.items():
        total = dict(current_usage.get(log_id, {}))
        for lid, n in usage.items():
            total[lid] = total.get(lid, 0) + n
        merged[log_id] = total
    idx.commit_compaction(moves=moves, removed_logs=done, log_usage=merged)
    freed = 0
    for log_id in done:
        path = directory / entrylog.file_name(log_id)
        with contextlib.suppress(FileNotFoundError):
            freed += os.stat(path).st_size
            os.unlink(path)
    if done:
        journal.fsync_dir(directory)
    return Outcome(freed_bytes=freed, removed_logs=done, new_usage=merged, moved_entries=len(moves))
