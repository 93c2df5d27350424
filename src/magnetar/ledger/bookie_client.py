"""One gRPC connection per bookie, shared by every ledger a broker writes or reads.

Adds go on a single long-lived bidirectional stream: callers queue entries and get a future
per entry; a sender task drains the queue and coalesces consecutive entries of one ledger
into one request, a reader task resolves futures as the bookie confirms durability. When the
stream breaks or an add outlives its timeout, every pending future fails with a BookieError
(the ledger handle then changes its ensemble) and the next add opens a fresh stream.

Over TLS (``tls``, the broker's bookkeeperTLS* settings) the client follows certificate
rotation: when its files changed, new streams and calls go on a new channel with the new
credentials; the old channel stays open for the stream and calls still on it and is closed once
they are over, so a rotation drops nothing established.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from magnetar.common import aio, grpctls
from magnetar.ledger.errors import BookieError, NoSuchEntryError
from magnetar.rpc import bookie_pb2, bookie_pb2_grpc

log = logging.getLogger(__name__)

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
OUT_OF_RANGE = grpc.StatusCode.OUT_OF_RANGE.value[0]
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]

_MAX_ENTRIES_PER_REQUEST = 512
_MAX_BYTES_PER_REQUEST = 4 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]


AddCallback = Callable[[BaseException | None], None]
"""Called once per add: with None when the bookie made the entry durable, else the error."""


class _QueuedAdd:
    """One add waiting for its bookie (a plain class: see ``handle.PendingAddOp``)."""

    __slots__ = ("callback", "data", "done", "entry_id", "lac", "ledger_id", "master_key",
                 "queued_at", "recovery")  # fmt: skip

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        lac: int,
        recovery: bool,
        data: bytes,
        callback: AddCallback,
        queued_at: float,
    ) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.master_key = master_key
        self.lac = lac
        self.recovery = recovery
        self.data = data
        self.callback = callback
        self.queued_at = queued_at
        self.done = False

    def finish(self, error: BaseException | None) -> None:
        if not self.done:
            self.done = True
            self.callback(error)


def _code_of(err: grpc.aio.AioRpcError) -> int:
    code: Any = err.code()
    return int(code.value[0]) if code is not None else UNAVAILABLE


class BookieClient:
    """Client of one bookie. ``add`` pipelines; reads and control calls are unary."""

    def __init__(
        self,
        bookie_id: str,
        *,
        add_timeout: float = 10.0,
        rpc_timeout: float = 10.0,
        tls: grpctls.ClientTls | None = None,
    ):
        self.bookie_id = bookie_id
        self.add_timeout = add_timeout
        self.rpc_timeout = rpc_timeout
        self._tls = tls
        self._tls_generation = tls.refresh() if tls is not None else 0
        self._channel = grpctls.open_channel(bookie_id, GRPC_OPTIONS, tls)
        self._current_stub = bookie_pb2_grpc.BookieStub(self._channel)
        self._stream_channel: grpc.aio.Channel | None = None
        """The channel the add stream runs on (an older one after a rotation)."""
        self._retired: set[grpc.aio.Channel] = set()
        self._closers: set[asyncio.Task[None]] = set()
        self._queue: deque[_QueuedAdd] = deque()
        self._wakeup = asyncio.Event()
        self._pending: dict[tuple[int, int], _QueuedAdd] = {}
        self._stream_task: asyncio.Task[None] | None = None
        self._closed = False

    # --- the channel -------------------------------------------------------------------------

    @property
    def _stub(self) -> Any:
        """The stub for a new stream or call: on a new channel once the TLS files rotated."""
        if self._tls is not None and not self._closed:
            generation = self._tls.refresh()
            if generation != self._tls_generation:
                self._tls_generation = generation
                old = self._channel
                self._channel = self._tls.channel(self.bookie_id, GRPC_OPTIONS)
                self._current_stub = bookie_pb2_grpc.BookieStub(self._channel)
                self._retired.add(old)
                log.info("bookie %s: TLS rotated; new calls on a new channel", self.bookie_id)
                if old is not self._stream_channel:
                    self._close_later(old)
        return self._current_stub

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        """Close a retired channel once the unary calls still on it had their time."""

        async def close() -> None:
            await asyncio.sleep(self.rpc_timeout)
            self._retired.discard(channel)
            await channel.close()

        task = asyncio.create_task(close())
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    # --- adds -----------------------------------------------------------------------------

    def add(
        self,
        *,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        lac: int,
        data: bytes,
        callback: AddCallback,
        recovery: bool = False,
    ) -> None:
        """Queue one entry; ``callback`` runs (synchronously, from the stream's reader) when
        the bookie made it durable or the add failed. No Future per entry: on the hot path
        that would cost an event-loop hop per entry and bookie."""
        if self._closed:
            callback(BookieError(self.bookie_id, UNAVAILABLE, "client closed"))
            return
        item = _QueuedAdd(
            ledger_id, entry_id, master_key, lac, recovery, data, callback, time.monotonic()
        )
        self._queue.append(item)
        if not self._wakeup.is_set():
            self._wakeup.set()
        if self._stream_task is None or self._stream_task.done():
            self._stream_task = asyncio.create_task(self._run_stream())

    def add_future(
        self,
        *,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        lac: int,
        data: bytes,
        recovery: bool = False,
    ) -> asyncio.Future[None]:
        """``add`` for callers off the hot path: a future resolved when durable."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None) -> None:
            aio.settle(fut, None, error)

        self.add(
            ledger_id=ledger_id,
            entry_id=entry_id,
            master_key=master_key,
            lac=lac,
            data=data,
            recovery=recovery,
            callback=done,
        )
        return fut

    async def _run_stream(self) -> None:
        call = self._stub.AddEntries(wait_for_ready=False)
        channel = self._stream_channel = self._channel
        reader = asyncio.create_task(self._read_responses(call))
        watchdog = asyncio.create_task(self._watch_timeouts())
        error: BookieError | None = None
        try:
            while not self._closed:
                if not self._queue:
                    self._wakeup.clear()
                    waiter = asyncio.create_task(self._wakeup.wait())
                    done, _ = await asyncio.wait(
                        {waiter, reader, watchdog}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if waiter not in done:
                        waiter.cancel()
                        break
                    continue
                for request in self._drain_requests():
                    await call.write(request)
        except grpc.aio.AioRpcError as err:
            error = BookieError(self.bookie_id, _code_of(err), err.details() or "stream failed")
        except asyncio.CancelledError:
            error = BookieError(self.bookie_id, UNAVAILABLE, "client closed")
            raise
        finally:
            if error is None:
                if reader.done() and not reader.cancelled() and reader.exception():
                    exc = reader.exception()
                    error = (
                        exc
                        if isinstance(exc, BookieError)
                        else BookieError(self.bookie_id, UNAVAILABLE, str(exc))
                    )
                elif watchdog.done() and not watchdog.cancelled() and watchdog.exception():
                    exc = watchdog.exception()
                    assert isinstance(exc, BookieError)
                    error = exc
                else:
                    error = BookieError(self.bookie_id, UNAVAILABLE, "stream ended")
            for task in (reader, watchdog):
                task.cancel()
            call.cancel()
            if self._stream_channel is channel:
                self._stream_channel = None
            if channel in self._retired and not self._closed:
                self._close_later(channel)
            self._fail_all(error)

    def _drain_requests(self) -> list[Any]:
        requests: list[Any] = []
        current: Any = None
        count = size = 0
        while self._queue:
            item = self._queue.popleft()
            if item.done:
                continue
            key = (item.ledger_id, item.entry_id)
            self._pending[key] = item
            if (
                current is None
                or current.ledger_id != item.ledger_id
                or current.recovery != item.recovery
                or count >= _MAX_ENTRIES_PER_REQUEST
                or size >= _MAX_BYTES_PER_REQUEST
            ):
                current = bookie_pb2.AddRequest(
                    ledger_id=item.ledger_id, master_key=item.master_key, recovery=item.recovery
                )
                requests.append(current)
                count = size = 0
            current.last_add_confirmed = max(current.last_add_confirmed, item.lac)
            current.entries.add(entry_id=item.entry_id, data=item.data)
            count += 1
            size += len(item.data)
        return requests

    async def _read_responses(self, call: Any) -> None:
        while True:
            try:
                response = await call.read()
            except grpc.aio.AioRpcError as err:
                raise BookieError(
                    self.bookie_id, _code_of(err), err.details() or "stream failed"
                ) from None
            if response is grpc.aio.EOF:
                raise BookieError(self.bookie_id, UNAVAILABLE, "stream closed by bookie")
            ledger_id = response.ledger_id
            pending = self._pending
            for result in response.results:
                item = pending.pop((ledger_id, result.entry_id), None)
                if item is None:
                    continue
                if result.code == 0:
                    item.finish(None)
                else:
                    item.finish(BookieError(self.bookie_id, result.code, result.message))

    async def _watch_timeouts(self) -> None:
        interval = min(1.0, self.add_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            oldest = min((i.queued_at for i in self._pending.values()), default=now)
            if now - oldest > self.add_timeout:
                raise BookieError(
                    self.bookie_id, DEADLINE_EXCEEDED, f"add not confirmed in {self.add_timeout}s"
                )

    def _fail_all(self, error: BookieError) -> None:
        items = list(self._pending.values()) + list(self._queue)
        self._pending.clear()
        self._queue.clear()
        for item in items:
            item.finish(error)

    # --- unary calls -------------------------------------------------------------------------

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self.rpc_timeout)
        except grpc.aio.AioRpcError as err:
            code = _code_of(err)
            if code in (NOT_FOUND, OUT_OF_RANGE):
                raise NoSuchEntryError(f"{self.bookie_id}: {err.details()}") from None
            raise BookieError(self.bookie_id, code, err.details() or str(code)) from None

    async def read(
        self,
        ledger_id: int,
        first: int,
        last: int,
        *,
        past_lac: bool = False,
        fence: bool = False,
        master_key: bytes = b"",
        max_bytes: int = 0,
    ) -> list[tuple[int, bytes]]:
        response = await self._call(
            self._stub.ReadEntries,
            bookie_pb2.ReadRequest(
                ledger_id=ledger_id,
                first_entry_id=first,
                last_entry_id=last,
                past_lac=past_lac,
                fence=fence,
                master_key=master_key,
                max_bytes=max_bytes,
            ),
        )
        return [(e.entry_id, e.data) for e in response.entries]

    async def read_lac(self, ledger_id: int) -> tuple[int, int, bool]:
        """(last add confirmed, last entry stored, fenced) as this bookie knows them."""
        r = await self._call(self._stub.ReadLac, bookie_pb2.ReadLacRequest(ledger_id=ledger_id))
        return int(r.last_add_confirmed), int(r.last_entry_id), bool(r.fenced)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        await self._call(
            self._stub.WriteLac,
            bookie_pb2.WriteLacRequest(
                ledger_id=ledger_id, master_key=master_key, last_add_confirmed=lac
            ),
        )

    async def fence(self, ledger_id: int, master_key: bytes) -> tuple[int, int]:
        """Fence the ledger here; returns (last add confirmed, last entry stored)."""
        r = await self._call(
            self._stub.Fence, bookie_pb2.FenceRequest(ledger_id=ledger_id, master_key=master_key)
        )
        return int(r.last_add_confirmed), int(r.last_entry_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._call(
            self._stub.DeleteLedger, bookie_pb2.DeleteLedgerRequest(ledger_id=ledger_id)
        )

    async def info(self) -> Any:
        return await self._call(self._stub.Info, bookie_pb2.InfoRequest())

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        if self._stream_task is not None:
            self._stream_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stream_task
        self._fail_all(BookieError(self.bookie_id, UNAVAILABLE, "client closed"))
        for task in list(self._closers):
            task.cancel()
        for channel in (*self._retired, self._channel):
            await channel.close()
        self._retired.clear()


class LocalBookie(Protocol):
    """A bookie running in this process (standalone): its add path, called directly."""

    async def add_local(
        self,
        ledger_id: int,
        master_key: bytes,
        lac: int,
        recovery: bool,
        entries: list[tuple[int, bytes]],
    ) -> list[tuple[int, int, str]]:
        """Store one batch; ``(entry_id, status code number, message)`` per entry, 0 = ok."""
        ...

    async def read_local(
        self,
        ledger_id: int,
        first: int,
        last: int,
        *,
        past_lac: bool,
        fence: bool,
        master_key: bytes,
        max_bytes: int,
    ) -> tuple[int, str, list[tuple[int, bytes]]]:
        """A ReadEntries: ``(status code number, message, entries)``, 0 = ok."""
        ...


class LocalBookieClient(BookieClient):
    """Client of a bookie in this process: adds skip gRPC (no serialisation, no loopback
    socket, no hand-off to gRPC's threads) and go to the bookie's add path in batches, one
    per event-loop turn and ledger, like BookKeeper's local transport for a bookie in the
    client's JVM. Entry reads go to the bookie's read path the same way; the other calls
    (LAC, fence, delete, info) use gRPC (the inherited methods). The bookie's checks
    (master key, fencing, size, read-only, LAC) and metrics are the same either way."""

    def __init__(
        self,
        bookie_id: str,
        local: LocalBookie,
        *,
        add_timeout: float = 10.0,
        rpc_timeout: float = 10.0,
    ):
        super().__init__(bookie_id, add_timeout=add_timeout, rpc_timeout=rpc_timeout)
        self._local = local
        self._batch: list[_QueuedAdd] = []
        self._batch_scheduled = False
        self._local_tasks: set[asyncio.Task[None]] = set()

    def add(
        self,
        *,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        lac: int,
        data: bytes,
        callback: AddCallback,
        recovery: bool = False,
    ) -> None:
        if self._closed:
            callback(BookieError(self.bookie_id, UNAVAILABLE, "client closed"))
            return
        self._batch.append(
            _QueuedAdd(ledger_id, entry_id, master_key, lac, recovery, data, callback, 0.0)
        )
        if not self._batch_scheduled:
            self._batch_scheduled = True
            asyncio.get_running_loop().call_soon(self._submit)

    def _submit(self) -> None:
        self._batch_scheduled = False
        items, self._batch = self._batch, []
        start = 0
        for i in range(1, len(items) + 1):
            if (
                i == len(items)
                or i - start >= _MAX_ENTRIES_PER_REQUEST
                or items[i].ledger_id != items[start].ledger_id
                or items[i].master_key != items[start].master_key
                or items[i].recovery != items[start].recovery
            ):
                task = asyncio.create_task(self._store(items[start:i]))
                self._local_tasks.add(task)
                task.add_done_callback(self._local_tasks.discard)
                start = i

    async def _store(self, items: list[_QueuedAdd]) -> None:
        first = items[0]
        try:
            results = await self._local.add_local(
                first.ledger_id,
                first.master_key,
                max(i.lac for i in items),
                first.recovery,
                [(i.entry_id, i.data) for i in items],
            )
        except asyncio.CancelledError:
            for item in items:
                item.finish(BookieError(self.bookie_id, UNAVAILABLE, "client closed"))
            raise
        except Exception as err:
            log.warning("local add to %s failed: %s", self.bookie_id, err)
            for item in items:
                item.finish(BookieError(self.bookie_id, UNAVAILABLE, str(err)))
            return
        for item, (_, code, message) in zip(items, results, strict=True):
            item.finish(None if code == 0 else BookieError(self.bookie_id, code, message))

    async def read(
        self,
        ledger_id: int,
        first: int,
        last: int,
        *,
        past_lac: bool = False,
        fence: bool = False,
        master_key: bytes = b"",
        max_bytes: int = 0,
    ) -> list[tuple[int, bytes]]:
        if self._closed:
            raise BookieError(self.bookie_id, UNAVAILABLE, "client closed")
        code, message, entries = await self._local.read_local(
            ledger_id,
            first,
            last,
            past_lac=past_lac,
            fence=fence,
            master_key=master_key,
            max_bytes=max_bytes,
        )
        if code == 0:
            return entries
        if code in (NOT_FOUND, OUT_OF_RANGE):
            raise NoSuchEntryError(f"{self.bookie_id}: {message}")
        raise BookieError(self.bookie_id, code, message)

    async def close(self) -> None:
        self._closed = True
        error = BookieError(self.bookie_id, UNAVAILABLE, "client closed")
        items, self._batch = self._batch, []
        for item in items:
            item.finish(error)
        tasks = list(self._local_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await super().close()
