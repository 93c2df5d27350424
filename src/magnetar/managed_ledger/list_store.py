"""The ledger list in the metadata store: read on open, then changed only by compare-and-set.

Why this module exists: every change of a managed ledger's list (roll-over, trim, terminate,
close) is a compare-and-set on the version this owner last wrote -- losing one means another
broker took over (the owner turns *fenced*), and an unknown outcome (the store unreachable)
is resolved by reading the list back. Changes are serialised by one lock, and the in-memory
:class:`~magnetar.managed_ledger.ledger_list.LedgerList` takes each list once it is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from magnetar.common import backoff
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.metadata import api as md

log = logging.getLogger(__name__)

CAS_ATTEMPTS = 5
OPEN_ATTEMPTS = 5


class ListStore:
    """The stored list of one managed ledger, and its in-memory copy ``ledgers``."""

    def __init__(
        self, store: md.MetadataStore, path: records.TopicPath, ledgers: LedgerList
    ) -> None:
        self._store = store
        self._path = path
        self.ledgers = ledgers
        self.version = md.NOT_EXISTS
        self.lock = asyncio.Lock()
        """Held around read-modify-write of the list."""

    async def read(self) -> tuple[records.ManagedLedgerInfo, md.Version]:
        """The ledger list and its version, created empty when the key does not exist."""
        key = self._path.info_key
        record = await self._store.get(key)
        if record is not None:
            return records.ManagedLedgerInfo.from_json(record.value), record.version
        info = records.ManagedLedgerInfo()
        try:
            return info, await self._store.put(key, info.to_json(), expected_version=md.NOT_EXISTS)
        except md.BadVersionError:
            record = await self._store.get(key)
            if record is None:
                raise api.ManagedLedgerFencedError(
                    f"{self._path.name}: deleted while opened"
                ) from None
            return records.ManagedLedgerInfo.from_json(record.value), record.version

    async def take_over(
        self,
        recover_last: Callable[[records.LedgerRecord], Awaitable[records.LedgerRecord]],
        create_ledger: Callable[[], Awaitable[LedgerHandle]],
        discard: Callable[[int], None],
    ) -> tuple[
        records.ManagedLedgerInfo, tuple[records.LedgerRecord, ...], list[int], LedgerHandle | None
    ]:
        """Become the owner: recover the previous owner's last ledger (``recover_last`` fences
        it and gives its final record), drop empty ledgers, list a new ledger (unless the
        list is terminated) and write the list over the version read. Returns the list read,
        the ledgers kept, the empty ones dropped (for ``discard``) and the new ledger."""
        name = self._path.name
        new_handle: LedgerHandle | None = None
        for _attempt in range(OPEN_ATTEMPTS):
            info, version = await self.read()
            ledger_list = list(info.ledgers)
            if ledger_list:
                ledger_list[-1] = await recover_last(ledger_list[-1])
            empty = [r.ledger_id for r in ledger_list if r.entries == 0]
            kept = tuple(r for r in ledger_list if r.entries > 0)
            if info.terminated_position is None:
                if new_handle is None:
                    new_handle = await create_ledger()
                kept = (*kept, records.LedgerRecord(new_handle.ledger_id))
            new_info = info.with_ledgers(kept)
            try:
                self.version = await self._store.put(
                    self._path.info_key, new_info.to_json(), expected_version=version
                )
                break
            except md.BadVersionError:
                # The previous owner changed the list meanwhile (a roll-over it had under way
                # when its ledger was fenced): read it again and recover its new last ledger.
                log.info("%s: ledger list changed while opening; again", name)
        else:
            if new_handle is not None:
                discard(new_handle.ledger_id)
            raise api.ManagedLedgerFencedError(f"{name}: another owner keeps changing the list")
        if new_handle is not None and info.terminated_position is not None:
            discard(new_handle.ledger_id)  # terminated meanwhile
            new_handle = None
        self.ledgers.apply(new_info)
        return info, kept, empty, new_handle

    async def write(self, info: records.ManagedLedgerInfo) -> None:
        """Write the list on top of the version this owner last wrote (call with ``lock``
        held); a lost race raises ManagedLedgerFencedError."""
        raw = info.to_json()
        key = self._path.info_key
        delays = backoff.Backoff(initial_s=0.1, max_s=2.0)
        for attempt in range(CAS_ATTEMPTS):
            try:
                self.version = await self._store.put(key, raw, expected_version=self.version)
                break
            except md.BadVersionError:
                record = await self._store.get(key)
                if record is not None and record.value == raw:
                    self.version = record.version  # our earlier attempt landed
                    break
                raise api.ManagedLedgerFencedError(
                    f"{self._path.name}: the ledger list was changed by another owner"
                ) from None
            except md.StoreUnavailableError:
                if attempt == CAS_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delays.next())
        self.ledgers.apply(info)

    async def record_closed(
        self, old: LedgerHandle | None, *, next_ledger: int | None, terminated: bool = False
    ) -> None:
        """``old`` (the last listed ledger) closed at its end -- dropped when empty --, then
        ``next_ledger`` (when given) listed; ``terminated``: the last confirmed entry is the
        end for good."""
        async with self.lock:
            lst = self.ledgers
            ledgers_now = list(lst.info.ledgers)
            if old is not None and ledgers_now and ledgers_now[-1].ledger_id == old.ledger_id:
                last = ledgers_now[-1]
                final = records.LedgerRecord(
                    last.ledger_id,
                    entries=old.last_add_confirmed + 1,
                    size=old.length,
                    timestamp_ms=int(time.time() * 1000),
                    offloaded=last.offloaded,
                )
                ledgers_now[-1:] = [final] if final.entries > 0 else []
            if next_ledger is not None:
                ledgers_now.append(records.LedgerRecord(next_ledger))
            info = lst.info.with_ledgers(tuple(ledgers_now))
            if terminated:
                info = records.ManagedLedgerInfo(info.ledgers, lst.lac, info.properties)
            await self.write(info)
