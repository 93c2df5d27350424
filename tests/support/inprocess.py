"""The broker core in one process, for unit tests: a real ``BrokerService`` on the embedded
metadata store and the in-memory managed ledger, and sessions (``ServerConnection``) driven
through a transport that records what they write -- no socket, no subprocess.

Why this module exists: the session tests (``tests/unit/broker/test_inprocess.py``) and the
typed topic operations tests (``tests/unit/broker/test_topic_ops.py``) build the same
broker and clients; the operator's admin-client tests (``tests/unit/operator``) talk to the
same broker's real admin REST API, served on a free loopback port by :func:`admin_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from magnetar.broker import admin, http
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.metadata import api as md
from magnetar.metadata import open_store
from magnetar.wire import commands, frames, matching, pb, session
from magnetar.wire.ids import MessageId
from tests.support.procs import LOOPBACK, free_port
from tests.support.wait import eventually

_C = pb.BaseCommand
TOPIC = "persistent://public/default/inproc"


@contextlib.asynccontextmanager
async def broker_service(tmp_path: Path, **config: Any) -> AsyncIterator[BrokerService]:
    """A started broker service on an embedded store under ``tmp_path`` (``config``: more
    BrokerConfig fields), closed on exit."""
    async with brokers(tmp_path, [config]) as (svc,):
        yield svc


@contextlib.asynccontextmanager
async def brokers(
    tmp_path: Path, configs: list[dict[str, Any]]
) -> AsyncIterator[tuple[BrokerService, ...]]:
    """One started broker service per entry of ``configs`` (more BrokerConfig fields; give
    each its own ``port``/``http_port``), all on one embedded store and one in-memory
    managed-ledger storage, as brokers of a cluster share etcd and the bookies."""
    store: md.MetadataStore = await open_store(f"embedded://{tmp_path / 'metadata'}")
    storage = MemoryManagedLedgerFactory()
    settings = {"bind_address": LOOPBACK, "port": 1, "http_port": 2, "session_ttl_s": 5.0}
    started: list[BrokerService] = []
    try:
        for config in configs:
            cfg = BrokerConfig(**{**settings, **config})
            svc = BrokerService(config=cfg, store=store, managed_ledgers=storage)
            await svc.start()
            started.append(svc)
        yield tuple(started)
    finally:
        for svc in reversed(started):
            await svc.close()
        await store.close()


@dataclasses.dataclass
class AdminServer:
    """The admin REST API of an in-process broker, served at ``url``; ``calls`` records
    ``"METHOD /path"`` of every request, in order."""

    url: str
    service: BrokerService
    calls: list[str] = dataclasses.field(default_factory=list)


@contextlib.asynccontextmanager
async def admin_server(tmp_path: Path, **config: Any) -> AsyncIterator[AdminServer]:
    """A broker (:func:`broker_service`) whose HTTP side, admin API included, listens on a
    free loopback port; stopped on exit."""
    port = free_port()
    async with broker_service(tmp_path, http_port=port, **config) as svc:
        server = AdminServer(url=f"http://{LOOPBACK}:{port}", service=svc)

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            server.calls.append(f"{request.method} {request.path}")
            answer: web.StreamResponse = await handler(request)
            return answer

        app = http.build_app(svc, extensions=[admin.extension])
        app.middlewares.insert(0, record)
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, LOOPBACK, port).start()
            yield server
        finally:
            await runner.cleanup()


class RecordingTransport(asyncio.Transport):
    """Collects what the connection writes; closing it is recorded, not performed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.written += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Client:
    """One connection driven by hand: commands in, decoded frames out."""

    def __init__(self, service: BrokerService) -> None:
        self.cnx = ServerConnection(service)
        self.transport = RecordingTransport()
        self.cnx.protocol.connection_made(self.transport)
        self._decoder = frames.FrameDecoder()
        self._read = 0
        self.frames: list[frames.Frame] = []
        self.session = session.ClientSession(client_version="inproc")
        self._requests: matching.Pending[None] = matching.Pending()

    def rid(self) -> int:
        return self._requests.next_id()

    def send(self, cmd: pb.BaseCommand, payload: bytes | None = None) -> None:
        data = (
            frames.encode_command(cmd)
            if payload is None
            else frames.encode_payload_command(cmd, payload)
        )
        self.cnx.protocol.data_received(data)

    def _pump(self) -> None:
        new = bytes(self.transport.written[self._read :])
        self._read = len(self.transport.written)
        self.frames.extend(self._decoder.feed(new))

    async def expect(self, kind: int | tuple[int, ...], **fields: Any) -> frames.Frame:
        """The first frame of type ``kind`` (or of one of the types ``kind``; whose body has
        ``fields``) not taken yet."""
        kinds = kind if isinstance(kind, tuple) else (kind,)

        def matching() -> frames.Frame | None:
            self._pump()
            for i, f in enumerate(self.frames):
                body = commands.body(f.command) if commands.has_body(f.command) else None
                if f.type in kinds and all(getattr(body, k) == v for k, v in fields.items()):
                    return self.frames.pop(i)
            return None

        what = " or ".join(commands.type_name(k) for k in kinds)
        found = await eventually(matching, timeout=5, what=what)
        assert found is not None
        return found

    async def connect(self) -> None:
        self.send(self.session.connect())
        connected = await self.expect(_C.CONNECTED)
        assert self.session.receive(connected.command)

    async def producer(self, producer_id: int, topic: str = TOPIC) -> str:
        self.send(commands.producer(topic=topic, producer_id=producer_id, request_id=self.rid()))
        ok = await self.expect(_C.PRODUCER_SUCCESS)
        return str(ok.command.producer_success.producer_name)

    async def publish(self, producer_id: int, seq: int, text: str) -> MessageId:
        meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
        self.send(
            commands.send(producer_id=producer_id, sequence_id=seq),
            frames.encode_headers_and_payload(meta, text.encode()),
        )
        receipt = await self.expect(_C.SEND_RECEIPT, sequence_id=seq)
        mid = receipt.command.send_receipt.message_id
        return MessageId(mid.ledgerId, mid.entryId)

    async def subscribe(self, consumer_id: int, sub: str, *, topic: str = TOPIC, **kw: Any) -> None:
        self.send(
            commands.subscribe(
                topic=topic,
                subscription=sub,
                consumer_id=consumer_id,
                request_id=self.rid(),
                initial_position=pb.CommandSubscribe.Earliest,
                **kw,
            )
        )
        await self.expect(_C.SUCCESS)

    async def receive(self, consumer_id: int, n: int) -> list[tuple[MessageId, bytes]]:
        out = []
        for _ in range(n):
            f = await self.expect(_C.MESSAGE, consumer_id=consumer_id)
            mid = f.command.message.message_id
            assert f.payload is not None
            out.append((MessageId(mid.ledgerId, mid.entryId), bytes(f.payload)))
        return out

    def nothing_more(self, kind: int) -> bool:
        self._pump()
        return not any(f.type == kind for f in self.frames)
