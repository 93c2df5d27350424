"""The managed-ledger factory: the broker's entry point to topic storage.

Why this module exists: one process must hold at most one open instance per managed ledger
(two would fence each other), opens of the same name that race must share one recovery,
and deleting or listing managed ledgers that are not open must not need to own them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.acks import AckState
from magnetar.managed_ledger.cache import WATERMARK, CacheBudget
from magnetar.managed_ledger.cursor import owned_ledgers
from magnetar.managed_ledger.ledger import ManagedLedgerImpl, Options, State
from magnetar.managed_ledger.storage import storage_error
from magnetar.metadata import api as md
from magnetar.metadata import keys
from magnetar.offload.errors import OffloadError
from magnetar.offload.offloader import Offloader

log = logging.getLogger(__name__)


class ManagedLedgerFactoryImpl:
    def __init__(
        self,
        store: md.MetadataStore,
        ledgers: LedgerClient,
        *,
        default_config: api.ManagedLedgerConfig,
        trim_interval_s: float = 5.0,
        cursor_ledger_max_entries: int = 10_000,
        offloader: Offloader | None = None,
        cache_bytes: int = 64 * 1024 * 1024,
        cache_watermark: float = WATERMARK,
    ) -> None:
        self.store = store
        self.offloader = offloader
        """The broker's offloader (None: offload not configured)."""
        self.ledgers = ledgers
        self.default_config = default_config
        self.options = Options(
            trim_interval_s=trim_interval_s, cursor_ledger_max_entries=cursor_ledger_max_entries
        )
        self.cache = CacheBudget(cache_bytes, watermark=cache_watermark)
        """The entry caches' budget, shared by every managed ledger opened here (Pulsar's
        ``managedLedgerCacheSizeMB``)."""
        self._open: dict[str, ManagedLedgerImpl] = {}
        self._opening: dict[str, asyncio.Future[ManagedLedgerImpl]] = {}
        self._closed = False

    @property
    def managed_ledgers(self) -> dict[str, ManagedLedgerImpl]:
        """The managed ledgers open in this factory, by name."""
        return dict(self._open)

    async def open(
        self, name: str, config: api.ManagedLedgerConfig | None = None
    ) -> ManagedLedgerImpl:
        if self._closed:
            raise api.ManagedLedgerClosedError("the managed-ledger factory is closed")
        path = records.parse_name(name)
        ml = self._open.get(path.name)
        if ml is not None and ml.state not in (State.CLOSED, State.FENCED):
            if config is not None and config != ml.config:
                ml.update_config(config)
            return ml
        pending = self._opening.get(path.name)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[ManagedLedgerImpl] = asyncio.get_running_loop().create_future()
        self._opening[path.name] = fut
        try:
            ml = await ManagedLedgerImpl.open(
                store=self.store,
                ledgers=self.ledgers,
                path=path,
                config=config or self.default_config,
                options=self.options,
                on_closed=self._forget,
                offloader=self.offloader,
                cache=self.cache,
            )
        except BaseException as err:
            fut.set_exception(err)
            fut.exception()  # retrieved: joiners re-raise it, nobody else needs to
            raise
        finally:
            self._opening.pop(path.name, None)
        self._open[path.name] = ml
        fut.set_result(ml)
        return ml

    def _forget(self, ml: ManagedLedgerImpl) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    async def exists(self, name: str) -> bool:
        path = records.parse_name(name)
        try:
            return await self.store.get(path.info_key) is not None
        except md.MetadataError as err:
            raise storage_error(err) from err

    async def delete(self, name: str) -> None:
        path = records.parse_name(name)
        ml = self._open.get(path.name)
        if ml is not None:
            await ml.delete()
            return
        try:
            await self._delete_unopened(path)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err

    async def _delete_unopened(self, path: records.TopicPath) -> None:
        """Delete a managed ledger nobody here owns: its ledgers, cursor ledgers, records."""
        record = await self.store.get(path.info_key)
        ledger_ids: list[int] = []
        if record is not None:
            info = records.ManagedLedgerInfo.from_json(record.value)
            ledger_ids = [r.ledger_id for r in info.ledgers]
            await self._delete_offloaded(path.name, info.ledgers)
        async for cursor in self.store.scan_all(path.cursors_key):
            with contextlib.suppress(ValueError, KeyError):
                pointer = records.CursorPointer.from_json(cursor.value)
                if pointer.cursor_ledger_id != records.NO_LEDGER:
                    ledger_ids.append(pointer.cursor_ledger_id)
                ledger_ids.extend(await self._owned_ledgers(pointer))
        for lid in ledger_ids:
            await self.ledgers.delete(lid)
        await self.store.delete_prefix(path.info_key)
        log.info("%s deleted (%d ledgers)", path.name, len(ledger_ids))

    async def _delete_offloaded(self, name: str, ledgers: tuple[records.LedgerRecord, ...]) -> None:
        """The offloaded objects (complete or not) of a managed ledger being deleted; first,
        so an S3 failure fails the delete with nothing lost."""
        recorded = [r for r in ledgers if r.offloaded]
        if not recorded:
            return
        if self.offloader is None:
            log.warning(
                "%s: ledgers %s have offloaded objects but no offloader is configured; "
                "they stay in the bucket",
                name,
                [r.ledger_id for r in recorded],
            )
            return
        for r in recorded:
            assert r.offloaded is not None
            uuid = r.offloaded.get("uuid")
            if uuid:
                try:
                    await self.offloader.delete_attempt(r.ledger_id, str(uuid))
                except OffloadError as err:
                    raise storage_error(err) from err

    async def _owned_ledgers(self, pointer: records.CursorPointer) -> set[int]:
        """The ledgers a cursor owns (its properties). The pointer's properties are those of
        the cursor's first state entry in its current ledger; a later entry may name another
        ledger (e.g. a compaction since), so the last entry is read when the pointer names
        any."""
        owned = owned_ledgers(pointer.properties)
        if not owned or pointer.cursor_ledger_id == records.NO_LEDGER:
            return owned
        try:
            handle = await self.ledgers.open(pointer.cursor_ledger_id, recovery=True)
            last = handle.last_add_confirmed
            if last >= 0:
                ((_, raw),) = await handle.read(last, last)
                owned |= owned_ledgers(AckState.decode(raw).properties)
        except ledger_errors.LedgerError as err:
            log.warning("cursor ledger %d unreadable: %s", pointer.cursor_ledger_id, err)
        return owned

    async def list(self, prefix: str) -> list[str]:
        key, name_prefix = records.domain_prefix(prefix)
        try:
            children = await self.store.children(key)
        except md.MetadataError as err:
            raise storage_error(err) from err
        return [f"{name_prefix}/{keys.unsegment(c)}" for c in children]

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(
            *(ml.close() for ml in list(self._open.values())), return_exceptions=True
        )
        self._open.clear()


if TYPE_CHECKING:

    def _conforms(factory: ManagedLedgerFactoryImpl) -> api.ManagedLedgerFactory:
        return factory
