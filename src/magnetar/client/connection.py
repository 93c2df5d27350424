"""One asyncio client connection to a broker (or to a proxy piping to one).

Why this module exists: it is the only place in Magnetar where an asyncio client opens a
socket to speak the Pulsar protocol (``blocking.py`` is its synchronous twin). It does what
every client connection needs and nothing about what the client does with it:

* framing (``wire.frames``) and the handshake, PING/PONG and AUTH_CHALLENGE
  (``wire.session.ClientSession``); TLS when given an ``ssl.SSLContext``, credentials when
  given a ``wire.session.AuthProvider``;
* keepalive: a connection silent for ``keepalive_s`` is pinged, and closed when it stays
  silent as long again;
* backpressure: ``drain()`` waits while the socket's write buffer is over its high mark;
* requests: ``request`` gives a command a request id of this connection
  (``wire.matching.Pending``) and returns the answer carrying it;
* routing: frames for a producer or a consumer (SEND_RECEIPT, MESSAGE, CLOSE_CONSUMER...)
  go to the ``Listener`` registered under its id; the rest to ``on_other``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Callable
from typing import Final, Protocol, cast

from magnetar import __version__
from magnetar.wire import commands, frames, matching, pb, session, urls
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

_C = pb.BaseCommand
CLIENT_VERSION: Final = f"magnetar-{__version__}"
WRITE_BUFFER_HIGH: Final = 1024 * 1024
"""Bytes waiting in the socket's write buffer above which ``drain()`` waits."""

_CONSUMER_ID: Final = {
    _C.MESSAGE: "message",
    _C.ACTIVE_CONSUMER_CHANGE: "active_consumer_change",
    _C.CLOSE_CONSUMER: "close_consumer",
    _C.REACHED_END_OF_TOPIC: "reachedEndOfTopic",
}
_PRODUCER_ID: Final = {
    _C.SEND_RECEIPT: "send_receipt",
    _C.SEND_ERROR: "send_error",
    _C.CLOSE_PRODUCER: "close_producer",
}


class ConnectionLostError(Exception):
    """The connection is gone, or could not be opened: connect again (maybe elsewhere)."""


class RequestTimeoutError(ConnectionLostError):
    """The broker did not answer a request in time (the connection is closed: an answer
    may still be on its way, and would be matched with nothing)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """How a client connects. ``ssl`` and ``auth`` are where TLS and authentication plug in:
    every connection of the client layer takes them from here."""

    client_version: str = CLIENT_VERSION
    ssl: ssl.SSLContext | None = None
    auth: session.AuthProvider | None = None
    on_behalf_of: session.OnBehalfOf | None = None
    """A proxy's connections for one client: CONNECT names that client (original_*)."""
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    keepalive_s: float = 30.0
    max_frame_size: int = frames.DEFAULT_MAX_FRAME_SIZE


class Listener(Protocol):
    """A producer or consumer on a connection: receives the frames carrying its id."""

    def frame_received(self, frame: frames.Frame) -> None: ...

    def connection_lost(self, exc: Exception) -> None: ...


async def connect(
    address: urls.Address, *, options: Options, proxy_to: str | None = None
) -> Connection:
    """A connection to ``address`` through the handshake (CONNECTED received);
    ConnectionLostError when it cannot be opened, HandshakeRefusedError when refused."""
    where = str(address) + (f" (proxy to {proxy_to})" if proxy_to else "")
    loop = asyncio.get_running_loop()
    conn = Connection(
        where=where,
        session=session.ClientSession(
            client_version=options.client_version,
            proxy_to=proxy_to,
            auth=options.auth,
            on_behalf_of=options.on_behalf_of,
        ),
        options=options,
    )
    try:
        async with asyncio.timeout(options.connect_timeout_s):
            await loop.create_connection(
                lambda: conn,
                address.host,
                address.port,
                ssl=options.ssl,
                server_hostname=address.host if options.ssl is not None else None,
            )
            await conn.handshake_done
    except (OSError, TimeoutError) as exc:
        conn.close(exc)
        raise ConnectionLostError(f"cannot connect to {where}: {exc or 'timed out'}") from None
    except BaseException as exc:
        conn.close(exc if isinstance(exc, Exception) else None)
        raise
    return conn


class Connection(asyncio.Protocol):
    """One client connection (made by ``connect``)."""

    def __init__(self, *, where: str, session: session.ClientSession, options: Options) -> None:
        self.where = where
        self.options = options
        self.session = session
        self._loop = asyncio.get_running_loop()
        self._decoder = frames.FrameDecoder(max_frame_size=options.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._pending: matching.Pending[asyncio.Future[pb.BaseCommand]] = matching.Pending()
        self._consumers: dict[int, Listener] = {}
        self._producers: dict[int, Listener] = {}
        self.on_other: Callable[[frames.Frame], None] | None = None
        self.handshake_done: asyncio.Future[None] = self._loop.create_future()
        self.closed: asyncio.Future[Exception] = self._loop.create_future()
        self._writable: asyncio.Future[None] | None = None
        self._heard = True  # something was received since the last keepalive tick
        self._pinged = False
        self._keepalive: asyncio.TimerHandle | None = None

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self.send(self.session.connect())
        self._keepalive = self._loop.call_later(self.options.keepalive_s, self._keepalive_tick)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        try:
            for frame in self._decoder.feed(data):
                self._frame(frame)
                if self.is_closed:
                    return
        except WireError as exc:
            self.close(ConnectionLostError(f"undecodable data from {self.where}: {exc}"))
        except session.HandshakeRefusedError as exc:
            self.close(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(exc or ConnectionLostError(f"{self.where} closed the connection"))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- frames in ----------------------------------------------------------------------------

    def _frame(self, frame: frames.Frame) -> None:
        cmd = frame.command
        t = frame.type
        if self.session.receive(cmd):
            self._flush_session()
            if t == _C.CONNECTED and not self.handshake_done.done():
                self.handshake_done.set_result(None)
            return
        field = _CONSUMER_ID.get(t)
        if field is not None:
            listener = self._consumers.get(getattr(cmd, field).consumer_id)
            if listener is not None:
                listener.frame_received(frame)
                return
        field = _PRODUCER_ID.get(t)
        if field is not None:
            listener = self._producers.get(getattr(cmd, field).producer_id)
            if listener is not None:
                listener.frame_received(frame)
                return
        if t == _C.TOPIC_MIGRATED:
            m = cmd.topicMigrated
            table = (
                self._consumers
                if m.resource_type == pb.CommandTopicMigrated.Consumer
                else self._producers
            )
            listener = table.get(m.resource_id)
            if listener is not None:
                listener.frame_received(frame)
                return
        waiter = self._pending.answer(cmd)
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(cmd)
            return
        if self.on_other is not None:
            self.on_other(frame)
        else:
            log.debug("%s: %s ignored", self.where, commands.type_name(t))

    def _flush_session(self) -> None:
        for cmd in self.session.take_outgoing():
            self.send(cmd)

    def _keepalive_tick(self) -> None:
        if self.is_closed:
            return
        if self._heard:
            self._heard, self._pinged = False, False
        elif self._pinged:
            self.close(
                ConnectionLostError(
                    f"{self.where} silent for {2 * self.options.keepalive_s:.0f} s: "
                    "keepalive timed out"
                )
            )
            return
        else:
            self._pinged = True
            self.send(commands.ping())
        self._keepalive = self._loop.call_later(self.options.keepalive_s, self._keepalive_tick)

    # --- frames out ---------------------------------------------------------------------------

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(frames.encode_command(cmd))

    def write(self, data: bytes) -> None:
        """Write an encoded frame; ConnectionLostError when closed."""
        transport = self._transport
        if transport is None or self.is_closed or transport.is_closing():
            raise ConnectionLostError(f"the connection to {self.where} is closed")
        transport.write(data)

    async def drain(self) -> None:
        """Wait while the write buffer is over its high mark (ConnectionLostError when the
        connection goes meanwhile)."""
        while (writable := self._writable) is not None and not self.is_closed:
            await writable  # (resolved by resume_writing, also when the connection closes)
        if self.is_closed:
            raise ConnectionLostError(f"the connection to {self.where} is closed")

    async def request(
        self, cmd: pb.BaseCommand, *, within_s: float | None = None
    ) -> pb.BaseCommand:
        """Send ``cmd`` under a request id of this connection (its own is replaced) and
        return the answer carrying it. ConnectionLostError when the connection goes first;
        RequestTimeoutError (the connection closed) after ``within_s`` (default: the
        options' ``request_timeout_s``)."""
        rid = self._pending.next_id()
        matching.set_request_id(cmd, rid)
        waiter: asyncio.Future[pb.BaseCommand] = self._loop.create_future()
        self._pending.expect(rid, waiter)
        try:
            self.send(cmd)
            async with asyncio.timeout(within_s or self.options.request_timeout_s):
                return await waiter
        except TimeoutError:
            what = commands.type_name(cmd.type)
            error = RequestTimeoutError(f"{self.where} did not answer {what} in time")
            self.close(error)
            raise error from None
        finally:
            self._pending.forget(rid)

    # --- producers and consumers --------------------------------------------------------------

    def attach_consumer(self, consumer_id: int, listener: Listener) -> None:
        self._consumers[consumer_id] = listener

    def detach_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    def attach_producer(self, producer_id: int, listener: Listener) -> None:
        self._producers[producer_id] = listener

    def detach_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    # --- closing ------------------------------------------------------------------------------

    def close(self, exc: BaseException | None = None) -> None:
        """Close the connection: pending requests fail, listeners hear of it."""
        if self.is_closed:
            return
        error = (
            exc
            if isinstance(exc, Exception)
            else ConnectionLostError(f"the connection to {self.where} was closed")
        )
        self.closed.set_result(error)
        if not self.handshake_done.done():
            self.handshake_done.set_exception(error)
            self.handshake_done.exception()  # retrieved: connect() raises it
        lost = ConnectionLostError(f"connection to {self.where} lost: {error}")
        for waiter in self._pending.drain():
            if not waiter.done():
                waiter.set_exception(lost)
        for listener in [*self._consumers.values(), *self._producers.values()]:
            listener.connection_lost(lost)
        self._consumers.clear()
        self._producers.clear()
        self.resume_writing()
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._transport is not None:
            self._transport.close()
