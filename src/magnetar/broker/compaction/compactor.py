"""The two-phase compactor (Pulsar's ``TwoPhaseCompactor``).

One compaction of a topic:

1. **Phase one** reads what compaction has not folded in yet -- the current compacted
   ledger, then the topic's entries after its horizon (all of the topic the first time) up
   to the last entry stored when it started -- and keeps, per key, the id of the key's last
   message; a tombstone (empty payload) deletes the key.
2. **Phase two** reads the same again and writes to a new ledger (through the managed
   ledger, with the topic's quorums) each entry holding a key's last message, batches
   re-built with only those messages.
3. The horizon (the last entry read) and the new ledger's id become the ``__compaction``
   cursor's mark-delete position and ``CompactedTopicLedger`` property in one cursor write,
   persisted before the topic switches to the new ledger; then the previous compacted
   ledger is deleted. A failure before the switch deletes the new ledger and leaves the
   view as it was.

Memory is one dict entry per live key (phase one); entries are streamed, never all held.
An entry whose metadata cannot be parsed is skipped (no key can be read from it); a batch
compressed with a codec not available here (only ZLIB is) fails the compaction with
:class:`CompactionError` rather than leave its keys out of the view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from magnetar.broker.compaction import format as fmt
from magnetar.broker.compaction.view import CURSOR, LEDGER_PROPERTY, CompactedLedger, CompactedTopic
from magnetar.broker.subscriptions.dispatch import TxnReadFilter
from magnetar.broker.subscriptions.entries import read_meta
from magnetar.managed_ledger.api import (
    Entry,
    InitialPosition,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.wire.errors import UnsupportedCompressionError, WireError

log = logging.getLogger(__name__)

READ_BATCH: Final = 500
MAX_PENDING_ADDS: Final = 1000


class CompactionError(Exception):
    """The topic holds an entry compaction cannot look into (its view would be wrong)."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    ledger_id: int
    """The new compacted ledger (-1: nothing new to compact, the view is unchanged)."""
    horizon: Position
    entries_read: int
    bytes_read: int
    entries_written: int
    keys: int
    seconds: float
    messages_read: int = 0
    """Messages (batches counted per message) compaction folded in."""


def _hidden_by(txn: TxnReadFilter, entry: Entry) -> bool:
    try:
        return txn.hides(read_meta(entry.data))
    except WireError:
        return False  # garbage: phase one reports it


async def _source(
    ml: ManagedLedger,
    previous: CompactedLedger | None,
    end: Position,
    hidden: Callable[[Entry], bool] | None = None,
) -> AsyncIterator[Entry]:
    """The previous compacted ledger, then the topic after its horizon up to ``end``
    without the entries ``hidden`` says no consumer sees (transaction markers, aborted
    transactions' messages)."""
    if previous is not None:
        last = previous.last_entry_id
        first = 0
        while first <= last:
            upto = min(last, first + READ_BATCH - 1)
            for entry in await previous.read(first, upto):
                yield entry
            first = upto + 1
        start = ml.next_position(previous.horizon)
    else:
        start = ml.first_position
    position = start
    while position <= end:
        entries = await ml.read_entries(position, max_entries=READ_BATCH)
        if not entries:
            return
        for entry in entries:
            if entry.position > end:
                return
            if hidden is None or not hidden(entry):
                yield entry
        position = ml.next_position(entries[-1].position)


async def compact(
    ml: ManagedLedger, view: CompactedTopic, txn: TxnReadFilter | None = None
) -> CompactionResult:
    """Compact ``ml`` once (the caller makes sure only one runs per topic). With a
    transaction buffer (``txn``), as Pulsar: no further than its max read position (an open
    transaction's messages are not decided yet), and without markers and aborted messages."""
    started = time.monotonic()
    cursor = await ml.open_cursor(CURSOR, initial_position=InitialPosition.EARLIEST)
    end = ml.last_confirmed_entry
    hidden: Callable[[Entry], bool] | None = None
    if txn is not None and txn.active:
        limit = txn.max_read_position
        if limit is not None and limit < end:
            end = limit
        hidden = partial(_hidden_by, txn)
    previous = view.current
    if end.entry_id < 0 or (previous is not None and end <= previous.horizon):
        horizon = previous.horizon if previous is not None else end
        return CompactionResult(-1, horizon, 0, 0, 0, 0, time.monotonic() - started)

    # phase one: each key's last message
    latest: dict[str, fmt.MessageKey] = {}
    entries_read = bytes_read = messages_read = 0
    async for entry in _source(ml, previous, end, hidden):
        entries_read += 1
        bytes_read += len(entry.data)
        try:
            for key, message, tombstone in fmt.iter_keys(entry.position, entry.data):
                messages_read += 1
                if tombstone:
                    latest.pop(key, None)
                else:
                    latest[key] = message
        except UnsupportedCompressionError as err:
            raise CompactionError(f"entry {entry.position}: {err}") from None
        except WireError as err:  # garbage: no key can be read from it
            log.warning("%s: compaction skips entry %s: %s", ml.name, entry.position, err)

    # phase two: the entries holding them, into a new ledger
    ledger = await ml.create_aux_ledger("compacted")
    written = 0
    try:
        pending: list[asyncio.Future[int]] = []
        if latest:
            first_kept = min(m[0] for m in latest.values())
            async for entry in _source(ml, previous, end, hidden):
                if entry.position < first_kept:
                    continue
                try:
                    kept = fmt.retain(entry.position, entry.data, latest)
                except WireError:
                    continue  # reported in phase one
                if kept is None:
                    continue
                pending.append(ledger.append(fmt.encode_raw(entry.position, kept)))
                written += 1
                if len(pending) >= MAX_PENDING_ADDS:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
        await ledger.close()
        # the horizon and the ledger, in one cursor write, durable before the switch
        await cursor.mark_delete(end, properties={LEDGER_PROPERTY: ledger.ledger_id})
        await cursor.flush()
        reader = await ml.open_aux_ledger(ledger.ledger_id)
    except BaseException:
        with contextlib.suppress(ManagedLedgerError):
            await ml.delete_aux_ledger(ledger.ledger_id)
        raise
    old = view.switch(reader, end)
    if old is not None and old.ledger_id != ledger.ledger_id:
        try:
            await ml.delete_aux_ledger(old.ledger_id)
        except ManagedLedgerError as err:
            log.warning("%s: deleting compacted ledger %d: %s", ml.name, old.ledger_id, err)
    seconds = time.monotonic() - started
    log.info(
        "%s: compacted up to %s into ledger %d: %d entries (%d bytes) read, %d written, "
        "%d keys, %.2f s",
        ml.name,
        end,
        ledger.ledger_id,
        entries_read,
        bytes_read,
        written,
        len(latest),
        seconds,
    )
    return CompactionResult(
        ledger.ledger_id,
        end,
        entries_read,
        bytes_read,
        written,
        len(latest),
        seconds,
        messages_read,
    )
