"""The bookie's gRPC service: the bookie protocol (proto/rpc/bookie.proto) over LedgerStorage.

Adds arrive on a bidirectional stream; each request is handed to the storage as one batch as
soon as it is read, without waiting for the previous batch to become durable, so the
journal's group commit sees everything the client pipelined. Responses are written back in
the order batches were read. Per-entry failures travel as gRPC status code numbers inside the
response, so one fenced ledger does not break a stream other ledgers share; whole-call
failures (unknown ledger, read past the LAC, bad arguments) are gRPC errors with a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from magnetar import __version__
from magnetar.bookie import metrics
from magnetar.bookie.storage import api as storage
from magnetar.rpc import bookie_pb2

log = logging.getLogger(__name__)

DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024
_MAX_IN_FLIGHT_BATCHES = 1024

_ADD_ERROR_CODES: dict[type[storage.StorageError], grpc.StatusCode] = {
    storage.LedgerFencedError: grpc.StatusCode.FAILED_PRECONDITION,
    storage.EntryTooLargeError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    storage.BadMasterKeyError: grpc.StatusCode.PERMISSION_DENIED,
    storage.ReadOnlyError: grpc.StatusCode.UNAVAILABLE,
    storage.NoSuchLedgerError: grpc.StatusCode.NOT_FOUND,
}


def status_of(err: BaseException) -> grpc.StatusCode:
    for cls, code in _ADD_ERROR_CODES.items():
        if isinstance(err, cls):
            return code
    if isinstance(err, storage.NoSuchEntryError):
        return grpc.StatusCode.NOT_FOUND
    return grpc.StatusCode.INTERNAL


def _code_number(code: grpc.StatusCode) -> int:
    return int(code.value[0])


class _Refused(Exception):
    """A request answered with a gRPC status (over gRPC: the call's; locally: a code)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Garbled:
    """A request whose bytes did not decode (gRPC would answer UNKNOWN by itself)."""

    reason: str


def _tolerant(message_type: Any) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return message_type.FromString(raw)
        except DecodeError as err:
            return Garbled(str(err))

    return deserialize


def _checked(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Answer INVALID_ARGUMENT to a garbled unary request instead of calling ``method``, and
    a refusal or a storage error of ``method`` with its status. The status is sent after the
    except block, not from it: structure/test_compiled_handlers.py."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Any) -> Any:
        if isinstance(request, Garbled):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}"
            )
        try:
            return await method(self, request, context)
        except _Refused as refused:
            code, message = refused.code, refused.message
        except storage.StorageError as err:
            code, message = status_of(err), str(err)
        return await context.abort(code, message)

    return wrapper


class BookieService:
    """The Bookie gRPC service (see bookie_pb2_grpc.add_BookieServicer_to_server)."""

    def __init__(self, store: storage.LedgerStorage, *, bookie_id: str, rack: str) -> None:
        self.storage = store
        self.bookie_id = bookie_id
        self.rack = rack
        self.decommissioning = False
        """Set once an operator started this bookie's decommission: a writer's adds are
        refused (it changes ensembles), recovery adds and reads go on until its ledgers moved
        off."""

    # --- adds ------------------------------------------------------------------------------

    async def AddEntries(self, request_iterator: Any, context: Any) -> None:
        batches: asyncio.Queue[tuple[int, asyncio.Task[list[storage.AddResult]]] | None] = (
            asyncio.Queue(maxsize=_MAX_IN_FLIGHT_BATCHES)
        )
        writer = asyncio.create_task(self._write_results(batches, context))
        # not a `finally` that waits for the writer: structure/test_compiled_handlers.py
        failed: BaseException | None = None
        try:
            while True:
                request = await context.read()
                if request is grpc.aio.EOF:
                    break
                if isinstance(request, Garbled):
                    await batches.put(None)
                    await writer
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}"
                    )
                await batches.put((request.ledger_id, asyncio.create_task(self._add(request))))
                if writer.done():
                    break
        except BaseException as exc:  # the writer still ends first
            failed = exc
        with contextlib.suppress(asyncio.QueueFull):
            batches.put_nowait(None)
        if not writer.done():
            await writer
        if failed is not None:
            raise failed

    async def _add(self, request: Any) -> list[storage.AddResult]:
        ledger_id = storage.LedgerId(request.ledger_id)
        entries = [
            storage.AddRequest(
                ledger_id,
                storage.EntryId(e.entry_id),
                request.master_key,
                request.last_add_confirmed,
                e.data,
                request.recovery,
            )
            for e in request.entries
        ]
        return await self._store(ledger_id, entries)

    async def add_local(
        self,
        ledger_id: int,
        master_key: bytes,
        lac: int,
        recovery: bool,
        entries: list[tuple[int, bytes]],
    ) -> list[tuple[int, int, str]]:
        """An add batch from a ledger client in this process (standalone), without gRPC:
        the same storage call, checks and metrics as an AddEntries request; one
        ``(entry_id, status code number, message)`` per entry, code 0 when durable."""
        lid = storage.LedgerId(ledger_id)
        requests = [
            storage.AddRequest(lid, storage.EntryId(eid), master_key, lac, data, recovery)
            for eid, data in entries
        ]
        return [
            (r.entry_id, 0, "")
            if r.error is None
            else (r.entry_id, _code_number(status_of(r.error)), str(r.error))
            for r in await self._store(lid, requests)
        ]

    async def _store(
        self, ledger_id: storage.LedgerId, entries: list[storage.AddRequest]
    ) -> list[storage.AddResult]:
        if self.decommissioning and not all(e.recovery for e in entries):
            # A writer's adds are refused (it changes its ensemble); recovery adds — a new
            # owner closing a ledger — still land, as on BookKeeper's read-only bookies.
            refused = storage.ReadOnlyError(f"bookie {self.bookie_id} is being decommissioned")
            metrics.ADD_FAILURES.inc(len(entries))
            return [storage.AddResult(ledger_id, e.entry_id, refused) for e in entries]
        started = time.perf_counter()
        try:
            results = await self.storage.add_entries(entries)
        except Exception as err:  # the whole batch failed (storage closing, disk error)
            log.warning("add batch for ledger %d failed: %s", ledger_id, err)
            failure = err if isinstance(err, storage.StorageError) else storage.StorageError(err)
            metrics.ADD_FAILURES.inc(len(entries))
            return [storage.AddResult(ledger_id, e.entry_id, failure) for e in entries]
        elapsed = time.perf_counter() - started
        metrics.ADD_ENTRY.observe(elapsed)
        metrics.ADD_ENTRIES.inc(len(entries))
        metrics.ADD_BYTES.inc(sum(len(e.data) for e in entries))
        failed = sum(1 for r in results if r.error is not None)
        if failed:
            metrics.ADD_FAILURES.inc(failed)
        return results

    async def _write_results(
        self,
        batches: asyncio.Queue[tuple[int, asyncio.Task[list[storage.AddResult]]] | None],
        context: Any,
    ) -> None:
        while True:
            item = await batches.get()
            if item is None:
                return
            ledger_id, task = item
            response = bookie_pb2.AddResponse(ledger_id=ledger_id)
            for r in await task:
                if r.error is None:
                    response.results.append(bookie_pb2.AddResult(entry_id=r.entry_id))
                else:
                    response.results.append(
                        bookie_pb2.AddResult(
                            entry_id=r.entry_id,
                            code=_code_number(status_of(r.error)),
                            message=str(r.error),
                        )
                    )
            await context.write(response)

    # --- reads -----------------------------------------------------------------------------

    @_checked
    async def ReadEntries(self, request: Any, context: Any) -> Any:
        entries, lac, fenced = await self._read_request(  # refusals: @_checked answers them
            request.ledger_id,
            request.first_entry_id,
            request.last_entry_id,
            past_lac=request.past_lac,
            fence=request.fence,
            master_key=request.master_key,
            max_bytes=request.max_bytes,
        )
        return bookie_pb2.ReadResponse(
            entries=[bookie_pb2.Entry(entry_id=eid, data=data) for eid, data in entries],
            last_add_confirmed=lac,
            fenced=fenced,
        )

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
        """A ReadEntries from a ledger client in this process (standalone), without gRPC
        (no copies into and out of protobuf): ``(status code number, message, entries)``,
        code 0 when the entries are there, else the code ReadEntries would answer."""
        try:
            entries, _, _ = await self._read_request(
                ledger_id,
                first,
                last,
                past_lac=past_lac,
                fence=fence,
                master_key=master_key,
                max_bytes=max_bytes,
            )
        except _Refused as refused:
            return _code_number(refused.code), refused.message, []
        return 0, "", list(entries)

    async def _read_request(
        self,
        ledger_id_: int,
        first: int,
        last: int,
        *,
        past_lac: bool,
        fence: bool,
        master_key: bytes,
        max_bytes: int,
    ) -> tuple[list[tuple[storage.EntryId, bytes]], int, bool]:
        """(entries, LAC, fenced) for a read request; raises _Refused."""
        ledger_id = storage.LedgerId(ledger_id_)
        if first < 0 or last < first:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"bad entry range {first}..{last}")
        started = time.perf_counter()
        try:
            if fence:
                await self.storage.fence(ledger_id, master_key)
            lac = await self.storage.last_add_confirmed(ledger_id)
            if not past_lac:
                if first > lac:
                    raise _Refused(
                        grpc.StatusCode.OUT_OF_RANGE,
                        f"ledger {ledger_id}: entry {first} is past the last add confirmed {lac}",
                    )
                last = min(last, lac)
            entries = await self._read(ledger_id, first, last, max_bytes or DEFAULT_READ_MAX_BYTES)
            fenced = await self.storage.is_fenced(ledger_id)
        except storage.StorageError as err:
            raise _Refused(status_of(err), str(err)) from None
        metrics.READ_ENTRY.observe(time.perf_counter() - started)
        metrics.READ_ENTRIES.inc(len(entries))
        return entries, lac, fenced

    async def _read(
        self, ledger_id: storage.LedgerId, first: int, last: int, max_bytes: int
    ) -> list[tuple[storage.EntryId, bytes]]:
        """Entries first..last held here, skipping entries this bookie does not store (its
        stripe when E > Wq), up to ``max_bytes``. The first entry must exist."""
        if first == last:
            return [
                (
                    storage.EntryId(first),
                    await self.storage.read_entry(ledger_id, storage.EntryId(first)),
                )
            ]
        end = min(last, await self.storage.last_entry_id(ledger_id))
        out: list[tuple[storage.EntryId, bytes]] = []
        size = 0
        cur = first
        while cur <= end and size < max_bytes:
            try:
                got = await self.storage.read_range(
                    ledger_id, storage.EntryId(cur), storage.EntryId(end), max_bytes - size
                )
            except storage.NoSuchEntryError:
                if cur == first:
                    raise
                cur += 1
                continue
            out.extend(got)
            size += sum(len(d) for _, d in got)
            cur = got[-1][0] + 1
        return out

    @_checked
    async def ReadLac(self, request: Any, context: Any) -> Any:
        ledger_id = storage.LedgerId(request.ledger_id)
        return bookie_pb2.ReadLacResponse(
            last_add_confirmed=await self.storage.last_add_confirmed(ledger_id),
            last_entry_id=await self.storage.last_entry_id(ledger_id),
            fenced=await self.storage.is_fenced(ledger_id),
        )

    @_checked
    async def WriteLac(self, request: Any, context: Any) -> Any:
        await self.storage.write_lac(
            storage.LedgerId(request.ledger_id),
            request.master_key,
            request.last_add_confirmed,
        )
        return bookie_pb2.WriteLacResponse()

    @_checked
    async def Fence(self, request: Any, context: Any) -> Any:
        ledger_id = storage.LedgerId(request.ledger_id)
        lac = await self.storage.fence(ledger_id, request.master_key)
        last = await self.storage.last_entry_id(ledger_id)
        return bookie_pb2.FenceResponse(last_add_confirmed=lac, last_entry_id=last)

    @_checked
    async def DeleteLedger(self, request: Any, context: Any) -> Any:
        await self.storage.delete_ledger(storage.LedgerId(request.ledger_id))
        return bookie_pb2.DeleteLedgerResponse()

    @_checked
    async def Info(self, request: Any, context: Any) -> Any:
        stats = self.storage.stats()
        usage = shutil.disk_usage(".")
        return bookie_pb2.InfoResponse(
            bookie_id=self.bookie_id,
            read_only=stats.read_only,
            free_bytes=usage.free,
            total_bytes=usage.total,
            rack=self.rack,
            version=__version__,
        )


_METHODS: dict[str, tuple[str, Any, Any]] = {
    # name: (kind, request type, response type)
    "AddEntries": ("stream_stream", bookie_pb2.AddRequest, bookie_pb2.AddResponse),
    "ReadEntries": ("unary_unary", bookie_pb2.ReadRequest, bookie_pb2.ReadResponse),
    "ReadLac": ("unary_unary", bookie_pb2.ReadLacRequest, bookie_pb2.ReadLacResponse),
    "WriteLac": ("unary_unary", bookie_pb2.WriteLacRequest, bookie_pb2.WriteLacResponse),
    "Fence": ("unary_unary", bookie_pb2.FenceRequest, bookie_pb2.FenceResponse),
    "DeleteLedger": (
        "unary_unary",
        bookie_pb2.DeleteLedgerRequest,
        bookie_pb2.DeleteLedgerResponse,
    ),
    "Info": ("unary_unary", bookie_pb2.InfoRequest, bookie_pb2.InfoResponse),
}


def generic_handler(service: BookieService) -> Any:
    """The gRPC handler for ``service``: like the generated registration, but requests that
    do not decode reach the service as :class:`Garbled` (-> INVALID_ARGUMENT)."""
    handlers = {}
    for name, (kind, request_type, response_type) in _METHODS.items():
        factory = getattr(grpc, f"{kind}_rpc_method_handler")
        handlers[name] = factory(
            getattr(service, name),
            request_deserializer=_tolerant(request_type),
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler("magnetar.bookie.v1.Bookie", handlers)
