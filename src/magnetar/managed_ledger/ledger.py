"""A topic's log over ledgers: the managed ledger one broker owns.

Why this module exists: it is the one place that decides what the ledger list in the
metadata store says and when a ledger may be deleted; it puts together the parts that each
do one thing:

* :class:`~magnetar.managed_ledger.ledger_list.LedgerList` -- the list as last written and
  the position arithmetic over it (pure);
* :class:`~magnetar.managed_ledger.writer.LedgerWriter` -- adds, roll-over and retry;
* :class:`~magnetar.managed_ledger.reader.EntryReader` -- reads across ledgers, cache first;
* the cursors (:mod:`magnetar.managed_ledger.cursor`, registered in
  :mod:`magnetar.managed_ledger.cursors`), which see this object only through
  :class:`~magnetar.managed_ledger.cursor.CursorHost`.

Ownership
    ``open`` recovers the previous owner's open ledger (fencing it: that owner's next adds
    fail), records its final size, drops empty ledgers, creates a new ledger and writes the
    list by compare-and-set. Every later change of the list (roll-over, trim, terminate,
    close) is a compare-and-set on the version this instance last wrote: losing one means
    another broker took over, and the instance turns *fenced*.

Trimming
    Ledgers entirely before the slowest durable cursor's mark-delete position, and outside
    the retention window, are removed from the list (compare-and-set first) and then
    deleted; never the last ledger (:meth:`LedgerList.trimmable`). It runs shortly after a
    mark-delete moves (rate-limited) and on a timer, which also rolls over an idle ledger
    past its maximum age.

Offload
    With an offloader (the broker's, when configured) the managed ledger is the
    ``OffloadHost`` of its :class:`~magnetar.managed_ledger.ledger_offload.LedgerOffload`
    (``self.offload``): offload state is recorded in the ledger list by the same
    compare-and-set; trims and deletes forget the objects too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from magnetar.common.buffers import Payload
from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api, aux, ledger_stats, offloading, records
from magnetar.managed_ledger.api import Entry, Position
from magnetar.managed_ledger.cache import CacheBudget, EntryCache
from magnetar.managed_ledger.cursor import ManagedCursorImpl, PersistentHost
from magnetar.managed_ledger.cursors import CursorRegistry
from magnetar.managed_ledger.ledger_list import LedgerList, ListedPositions
from magnetar.managed_ledger.ledger_offload import LedgerOffload
from magnetar.managed_ledger.list_store import ListStore
from magnetar.managed_ledger.offloading import OffloadHost
from magnetar.managed_ledger.reader import EntryReader, ReadStats
from magnetar.managed_ledger.storage import Options, storage_error
from magnetar.managed_ledger.trimmer import TrimHost, Trimmer
from magnetar.managed_ledger.writer import AddStats, LedgerWriter, State, WriterHost
from magnetar.metadata import api as md
from magnetar.offload.offloader import Offloader

__all__ = ["ManagedLedgerImpl", "Options", "ReadStats", "State", "storage_error"]

log = logging.getLogger(__name__)


class ManagedLedgerImpl(ListedPositions):
    """One managed ledger owned by this process. Build with :meth:`open`."""

    def __init__(
        self,
        *,
        store: md.MetadataStore,
        ledgers: LedgerClient,
        path: records.TopicPath,
        config: api.ManagedLedgerConfig,
        options: Options,
        on_closed: Callable[[ManagedLedgerImpl], None] | None = None,
        offloader: Offloader | None = None,
        cache: CacheBudget,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self.path = path
        self.config = config
        self.options = options
        self._on_closed = on_closed
        self._list = LedgerList()
        self._stored = ListStore(store, path, self._list)
        self._cache = EntryCache(cache)
        self._writer = LedgerWriter(self, self._list, self._cache)
        self.offload = (
            LedgerOffload(self, offloader, config, self.check_usable) if offloader else None
        )
        """Offload of this ledger (``ledger_offload.py``); None without an offloader."""
        self._reader = EntryReader(
            path.name,
            ledgers,
            self._list,
            self._cache,
            lambda: self._writer.handle,
            self.offload.reader if self.offload is not None else None,
        )
        self._cursors = CursorRegistry(self, store, path)
        self._writer.readers = self._cursors.by_name
        self._timer: asyncio.Task[None] | None = None
        self._trimmer = Trimmer(self, self._stored, self._reader)
        self._background: set[asyncio.Task[None]] = set()

    # --- opening -----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        *,
        store: md.MetadataStore,
        ledgers: LedgerClient,
        path: records.TopicPath,
        config: api.ManagedLedgerConfig,
        options: Options,
        on_closed: Callable[[ManagedLedgerImpl], None] | None = None,
        offloader: Offloader | None = None,
        cache: CacheBudget,
    ) -> ManagedLedgerImpl:
        """Open (recover) the managed ledger; its entry cache is bounded by ``cache``, the
        budget the broker's managed ledgers share."""
        ml = cls(
            store=store,
            ledgers=ledgers,
            path=path,
            config=config,
            options=options,
            on_closed=on_closed,
            offloader=offloader,
            cache=cache,
        )
        try:
            await ml._initialize()
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            await ml._abandon()
            raise storage_error(err) from err
        except BaseException:
            await ml._abandon()
            raise
        return ml

    async def _initialize(self) -> None:
        info, kept, empty, new_handle = await self._stored.take_over(
            self._reader.recover_last, self.create_ledger, self._discard
        )
        for lid in empty:
            self._reader.handles.pop(lid, None)
            self._discard(lid)
        last_with_entries = next((r for r in reversed(kept) if r.entries > 0), None)
        lst = self._list
        if new_handle is not None:
            self._writer.set_current(new_handle)
            self._writer.state = State.WRITABLE
        else:
            self._writer.state = State.TERMINATED
        if last_with_entries is not None:
            lst.lac = Position(last_with_entries.ledger_id, last_with_entries.entries - 1)
        elif lst.current_id is not None:
            lst.lac = Position(lst.current_id, -1)
        elif info.terminated_position is not None:
            lst.lac = info.terminated_position
        await self._cursors.load()
        if self.offload is not None and self.offload.stale(lst.info.ledgers):
            self.spawn(self.offload.clean_stale())
        self._timer = asyncio.create_task(self._run_timer())
        log.info(
            "%s opened: ledgers %s, current %s, last confirmed %s",
            self.name,
            lst.ids,
            lst.current_id,
            lst.lac,
        )

    def _discard(self, ledger_id: int) -> None:
        self.spawn(self.delete_ledger(ledger_id))

    async def _abandon(self) -> None:
        """Undo a failed open: stop timers, forget handles (the ledgers stay listed)."""
        self._writer.state = State.CLOSED
        if self._timer is not None:
            self._timer.cancel()
        for cursor in list(self._cursors.by_name.values()):
            cursor.abandon()
        self._cache.close()

    def update_config(self, config: api.ManagedLedgerConfig) -> None:
        """Apply a new config (namespace policies changed): limits and retention take effect
        from now; quorum sizes from the next ledger on."""
        self.config = config
        self._writer.thresholds()
        if self.offload is not None:
            self.offload.update_config(config)
        self.request_trim()

    # --- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def store(self) -> md.MetadataStore:
        return self._store

    @property
    def state(self) -> State:
        return self._writer.state

    @property
    def total_size(self) -> int:
        total = self._list.closed_size()
        if self._writer.handle is not None and self._list.current_id is not None:
            total += self._writer.handle.length
        return total

    @property
    def entries_added(self) -> int:
        return self._writer.entries_added

    @property
    def terminated(self) -> bool:
        return self._list.info.terminated_position is not None or self.state is State.TERMINATED

    @property
    def cursors(self) -> Mapping[str, api.ManagedCursor]:
        return self._cursors.by_name

    @property
    def cache(self) -> EntryCache:
        return self._cache

    @property
    def add_stats(self) -> AddStats:
        """Entry sizes, add latencies and counts of the add path (Pulsar's ML stats)."""
        return self._writer.stats

    @property
    def read_stats(self) -> ReadStats:
        return self._reader.stats

    @property
    def current_ledger_id(self) -> int | None:
        return self._list.current_id

    def ledgers(self) -> list[api.LedgerInfo]:
        return ledger_stats.ledger_infos(self._list, self._writer.handle)

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ``internalStats`` shape (admin ``/internalStats``)."""
        return ledger_stats.internal_stats(
            self._list, self._writer, self._cursors.by_name, self._cache, self.total_size
        )

    # --- adds (the writer) --------------------------------------------------------------------

    def add(self, data: Payload, done: api.AddDone) -> None:
        """Start an add; ``done`` gets the position once durable on Aq bookies, or the error
        (:meth:`LedgerWriter.add`)."""
        self._writer.add(data, done)

    def append(self, data: Payload) -> asyncio.Future[Position]:
        """Start an add; the future gives the position once durable on Aq bookies. Futures
        complete in call order."""
        return self._writer.append(data)

    async def add_entry(self, data: Payload) -> Position:
        return await self._writer.append(data)

    async def wait_for_entries(self, after: Position) -> None:
        await self._writer.wait_for_entries(after)

    # --- reads (the reader) -------------------------------------------------------------------

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        return await self._reader.read_entries(start, max_entries=max_entries, max_bytes=max_bytes)

    async def read_entry(self, position: Position) -> Entry:
        return await self._reader.read_entry(position)

    async def read_positions(self, positions: Iterable[Position]) -> list[Entry]:
        """The entries at ``positions`` that exist, in position order, read in runs."""
        return await self._reader.read_positions(positions)

    # --- ledgers and the list (for the writer and the cursors) --------------------------------

    async def create_ledger(self, cursor: str | None = None) -> LedgerHandle:
        extra = {} if cursor is None else {"cursor": cursor}
        return await aux.create_ledger(self._ledgers, self.name, self.config, extra)

    async def create_aux_ledger(self, purpose: str) -> api.AuxLedger:
        return await aux.create(self._ledgers, self.name, self.config, purpose)

    async def open_aux_ledger(self, ledger_id: int) -> api.AuxLedger:
        return await aux.open_(self._ledgers, ledger_id)

    async def delete_aux_ledger(self, ledger_id: int) -> None:
        await aux.delete(self._ledgers, ledger_id)

    async def open_ledger(self, ledger_id: int, *, recovery: bool = False) -> LedgerHandle:
        return await self._ledgers.open(ledger_id, recovery=recovery)

    async def delete_ledger(self, ledger_id: int) -> None:
        try:
            await self._ledgers.delete(ledger_id)
        except Exception as err:
            log.warning("%s: delete of ledger %d failed: %s", self.name, ledger_id, err)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def keep_closed(self, handle: LedgerHandle) -> None:
        if handle.last_add_confirmed >= 0:
            self._reader.handles[handle.ledger_id] = handle
        else:
            self.spawn(self.delete_ledger(handle.ledger_id))

    async def record_closed(
        self, old: LedgerHandle | None, *, next_ledger: int | None, terminated: bool = False
    ) -> None:
        await self._stored.record_closed(old, next_ledger=next_ledger, terminated=terminated)

    def set_fenced(self, why: str) -> None:
        if self.state in (State.FENCED, State.CLOSED):
            return
        log.warning("%s: fenced (%s): another owner took over", self.name, why)
        self._writer.stop(State.FENCED, api.ManagedLedgerFencedError(f"{self.name}: {why}"))
        for cursor in self._cursors.by_name.values():
            cursor.abandon()

    # --- offload (the OffloadHost side; docs/offload.md) ----------------------------------------

    def ledger_records(self) -> Sequence[records.LedgerRecord]:
        return self._list.info.ledgers

    async def set_offloaded(self, ledger_id: int, offloaded: Mapping[str, Any] | None) -> None:
        self.check_usable()
        async with self._stored.lock:
            info = offloading.with_offloaded(self._list.info, ledger_id, offloaded)
            try:
                await self._stored.write(info)
            except api.ManagedLedgerFencedError as err:
                self.set_fenced(str(err))
                raise

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        """Reads of the ledger already go to S3; its bookie copy and metadata go now."""
        self._reader.handles.pop(ledger_id, None)
        await self._ledgers.delete(ledger_id)
        log.info("%s: deleted the bookie copy of offloaded ledger %d", self.name, ledger_id)

    async def delete_offloaded(self, gone: Sequence[records.LedgerRecord]) -> None:
        if self.offload is not None:
            await self.offload.forget_trimmed(gone)

    # --- cursors ------------------------------------------------------------------------------

    def check_usable(self) -> None:
        if self.state in (State.CLOSED, State.FENCED):
            raise self._writer.state_error()

    async def open_cursor(
        self,
        name: str,
        *,
        initial_position: api.InitialPosition = api.InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> api.ManagedCursor:
        self.check_usable()
        return await self._cursors.open(
            name, initial_position=initial_position, properties=properties
        )

    async def new_non_durable_cursor(
        self, name: str, start: Position, *, inclusive: bool = True
    ) -> api.ManagedCursor:
        self.check_usable()
        return self._cursors.new_non_durable(name, start, inclusive=inclusive)

    async def delete_cursor(self, name: str) -> None:
        await self._cursors.delete(name)
        self.request_trim()

    def forget_cursor(self, cursor: ManagedCursorImpl) -> None:
        self._cursors.forget(cursor)

    def slowest_mark_delete(self) -> Position | None:
        """The lowest mark-delete position of the durable cursors, None without any."""
        return self._cursors.slowest_mark_delete()

    # --- trimming (the trimmer) ---------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return self.state not in (State.CLOSED, State.FENCED)

    def request_trim(self) -> None:
        """Trim soon (rate-limited): a mark-delete position moved."""
        self._trimmer.request()

    async def trim(self) -> list[int]:
        """Delete the ledgers no durable cursor and no retention needs; their ids."""
        return await self._trimmer.trim()

    async def _run_timer(self) -> None:
        interval = self.options.trim_interval_s
        while True:
            await asyncio.sleep(interval)
            if self.state in (State.CLOSED, State.FENCED):
                return
            if self._writer.past_max_age():
                self._writer.start_roll()
            if self.offload is not None:
                self.offload.start_lagged_deletes()
            readers = [
                cur.read_position for cur in self._cursors.by_name.values() if not cur.closed
            ]
            if readers:
                low = min(readers)
                self._cache.evict_before(low.ledger_id, low.entry_id)
            self._trimmer.start()

    # --- terminate, close, delete ----------------------------------------------------------------

    async def terminate(self) -> Position:
        if self.terminated:
            return self._list.lac
        self.check_usable()
        writer = self._writer
        await writer.settle_roll()
        if writer.state is State.FENCED:
            raise writer.state_error()
        writer.state = State.TERMINATED
        writer.drop_created_ahead()
        writer.fail_queued(writer.state_error())
        try:
            await writer.close_current(terminated=True)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err
        writer.wake()
        log.info("%s terminated at %s", self.name, self._list.lac)
        return self._list.lac

    async def close(self) -> None:
        writer = self._writer
        if writer.state is State.CLOSED:
            return
        await writer.settle_roll()
        closing_state = writer.state
        writer.state = State.CLOSED
        await self._stop_timers()
        writer.fail_queued(writer.state_error())
        writer.wake()
        await asyncio.gather(
            *(c.close() for c in self._cursors.by_name.values()), return_exceptions=True
        )
        if closing_state in (State.WRITABLE, State.NO_LEDGER):
            try:
                await writer.close_current(terminated=False)
            except Exception as err:
                log.warning("%s: close of the current ledger failed: %s", self.name, err)
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        self._cache.close()
        log.info("%s closed", self.name)
        if self._on_closed is not None:
            self._on_closed(self)

    async def _stop_timers(self) -> None:
        """Stop the timer and pending trims; a trim already writing the list is awaited
        (cancelling it could lose the version it wrote). Drop a ledger created ahead."""
        self._writer.drop_created_ahead()
        if self._timer is not None:
            self._timer.cancel()
        await self._trimmer.stop()
        if self.offload is not None:
            await self.offload.stop()

    async def delete(self) -> None:
        if self.offload is not None:  # first, so a failure leaves the topic whole
            await self.offload.stop()
            try:
                await self.offload.forget(self._list.info.ledgers)
            except Exception as err:
                raise storage_error(err) from err
        writer = self._writer
        await writer.settle_roll()
        writer.state = State.CLOSED
        await self._stop_timers()
        writer.fail_queued(writer.state_error())
        writer.wake()
        try:
            for cursor in list(self._cursors.by_name.values()):
                await cursor.destroy()
            self._cursors.by_name.clear()
            if writer.handle is not None and not writer.handle.closed:
                with contextlib.suppress(ledger_errors.LedgerError):
                    await writer.handle.close()
            for lid in list(self._list.ids):
                await self.delete_ledger(lid)
            await self._store.delete_prefix(self.path.info_key)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err
        finally:
            if self._background:
                await asyncio.gather(*list(self._background), return_exceptions=True)
            self._cache.close()
            if self._on_closed is not None:
                self._on_closed(self)
        log.info("%s deleted", self.name)


if TYPE_CHECKING:

    def _conforms(ml: ManagedLedgerImpl) -> api.ManagedLedger:
        return ml

    def _hosts(
        ml: ManagedLedgerImpl,
    ) -> tuple[PersistentHost, WriterHost, TrimHost, OffloadHost]:
        return ml, ml, ml, ml
