"""One client connection to the proxy: a lookup connection or a pipe to one broker.

The first frame decides (as in Pulsar's proxy). A CONNECT naming ``proxy_to_broker_url``
(what the official clients send after a lookup answered ``proxy_through_service_url``)
turns the connection into a pipe: the proxy opens a TCP connection to that broker -- only
a broker it knows, see ``brokers.Brokers.is_broker`` -- sends it the client's CONNECT bytes
unchanged, and from then on copies bytes both ways, with backpressure (a side whose
transport buffer is full stops reading the other). Any other CONNECT is answered by the
proxy itself: it serves LOOKUP (asking a broker, following Redirect answers to the owner,
and answering Connect through the proxy), PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and
GET_SCHEMA (forwarded to a broker), PING; anything else gets an ERROR, or closes the
connection when it carries no request id.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
from collections.abc import Callable, Coroutine
from typing import Any, Final, cast

from magnetar import __version__
from magnetar.proxy.brokers import BrokerLinks, Brokers, BrokerUnavailableError
from magnetar.proxy.config import ProxyConfig
from magnetar.wire import commands, frames, lookup, matching, pb, urls
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

SERVER_VERSION: Final = f"Magnetar-proxy-{__version__}"
_C = pb.BaseCommand
_FORWARDED: Final = frozenset({_C.PARTITIONED_METADATA, _C.GET_TOPICS_OF_NAMESPACE, _C.GET_SCHEMA})


class State(enum.Enum):
    HANDSHAKE = 1
    CONNECTING = 2  # to the broker named in CONNECT
    LOOKUP = 3
    PIPE = 4
    CLOSED = 5


class _BrokerSide(asyncio.Protocol):
    """The proxy's TCP connection to the broker of one piped client connection."""

    def __init__(self, client: ProxyConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.client.write_raw(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()

    def pause_writing(self) -> None:
        self.client.pause_reading()

    def resume_writing(self) -> None:
        self.client.resume_reading()


class ProxyConnection(asyncio.Protocol):
    def __init__(
        self,
        *,
        config: ProxyConfig,
        brokers: Brokers,
        links: BrokerLinks,
        on_closed: Callable[[ProxyConnection], None] | None = None,
    ) -> None:
        self.config = config
        self.brokers = brokers
        self.links = links
        self.state = State.HANDSHAKE
        self._on_closed = on_closed
        self._transport: asyncio.Transport | None = None
        self._remote = "?"
        self._head = bytearray()
        self._decoder: frames.FrameDecoder | None = None
        self._broker: _BrokerSide | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._max_frame = config.max_message_size + frames.FRAME_PADDING

    # --- transport callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._remote = f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data: bytes) -> None:
        if self.state is State.PIPE:
            assert self._broker is not None and self._broker.transport is not None
            self._broker.transport.write(data)
        elif self.state is State.LOOKUP:
            self._lookup_data(data)
        elif self.state is State.HANDSHAKE:
            self._head += data
            self._handshake()
        elif self.state is State.CONNECTING:
            self._head += data  # sent to the broker once connected

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        if self._broker is not None and self._broker.transport is not None:
            self._broker.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._broker is not None and self._broker.transport is not None:
            self._broker.transport.resume_reading()

    # --- helpers ------------------------------------------------------------------------------

    def pause_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def write_raw(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write_raw(frames.encode_command(cmd))

    def close(self) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        for task in list(self._tasks):
            task.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._broker is not None and self._broker.transport is not None:
            self._broker.transport.close()
        if self._on_closed is not None:
            self._on_closed(self)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- handshake ----------------------------------------------------------------------------

    def _handshake(self) -> None:
        if len(self._head) < 4:
            return
        (size,) = struct.unpack_from(">I", self._head)
        if size + 4 > self._max_frame:
            log.info("%s: first frame of %d bytes is over the limit; closing", self._remote, size)
            self.close()
            return
        if len(self._head) < size + 4:
            return
        first = bytes(self._head[: size + 4])
        rest = bytes(self._head[size + 4 :])
        self._head = bytearray()
        try:
            frame = next(iter(frames.FrameDecoder(max_frame_size=self._max_frame).feed(first)))
        except (WireError, StopIteration):
            log.info("%s: unreadable first frame; closing", self._remote)
            self.close()
            return
        if frame.command.type != _C.CONNECT:
            log.info(
                "%s: %s before CONNECT; closing",
                self._remote,
                commands.type_name(frame.command.type),
            )
            self.close()
            return
        connect = frame.command.connect
        if connect.proxy_to_broker_url:
            self.state = State.CONNECTING
            self._head += rest
            self.pause_reading()
            self._spawn(self._open_pipe(connect.proxy_to_broker_url, first))
            return
        self.state = State.LOOKUP
        self._decoder = frames.FrameDecoder(max_frame_size=self._max_frame)
        self.send(
            commands.connected(
                server_version=SERVER_VERSION,
                protocol_version=min(connect.protocol_version, commands.PROTOCOL_VERSION),
                max_message_size=self.config.max_message_size,
                feature_flags=pb.FeatureFlags(
                    supports_get_partitioned_metadata_without_auto_creation=True
                ),
            )
        )
        if rest:
            self._lookup_data(rest)

    async def _open_pipe(self, url: str, connect_frame: bytes) -> None:
        try:
            if not await self.brokers.is_broker(url):
                raise BrokerUnavailableError(f"{url} is not a broker of this cluster")
            host, port = urls.broker_address(url, bare=True)
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self.config.request_timeout_s):
                transport, side = await loop.create_connection(
                    lambda: _BrokerSide(self), host, port
                )
        except (OSError, TimeoutError, ValueError, BrokerUnavailableError) as exc:
            log.warning("%s: cannot forward to %s: %s", self._remote, url, exc)
            self.send(
                commands.error(
                    request_id=0,
                    error=pb.ServiceNotReady,
                    message=f"proxy cannot forward to {url}: {exc}",
                )
            )
            self.close()
            return
        if self.state is State.CLOSED:
            transport.close()
            return
        self._broker = side
        transport.write(connect_frame + bytes(self._head))
        self._head = bytearray()
        self.state = State.PIPE
        self.resume_reading()

    # --- lookup connections -------------------------------------------------------------------

    def _lookup_data(self, data: bytes) -> None:
        assert self._decoder is not None
        try:
            for frame in self._decoder.feed(data):
                self._on_command(frame.command)
                if self.state is State.CLOSED:
                    return
        except WireError as exc:
            log.info("%s: bad frame on a lookup connection: %s; closing", self._remote, exc)
            self.close()

    def _on_command(self, cmd: pb.BaseCommand) -> None:
        t = cmd.type
        if t == _C.PING:
            self.send(commands.pong())
        elif t == _C.PONG:
            pass
        elif t == _C.LOOKUP:
            self._spawn(self._lookup(cmd))
        elif t in _FORWARDED:
            self._spawn(self._forward(cmd))
        else:
            rid = matching.request_id_of(cmd)
            if rid is None:
                log.info(
                    "%s: %s on a lookup connection; closing", self._remote, commands.type_name(t)
                )
                self.close()
                return
            self.send(
                commands.error(
                    request_id=rid,
                    error=pb.NotAllowedError,
                    message=f"{commands.type_name(t)} is not served on a proxy lookup connection: "
                    "connect naming the broker (proxy_to_broker_url)",
                )
            )

    async def _ask_any(self, cmd: pb.BaseCommand) -> tuple[str, pb.BaseCommand]:
        """Send ``cmd`` to the next broker in turn, and to the next one when a broker does
        not answer (one that is going away may still be registered for a moment)."""
        attempts = max(1, min(3, await self.brokers.count()))
        for attempt in range(attempts):
            url, _ = await self.brokers.pick()
            try:
                return url, await self.links.request(url, cmd)
            except BrokerUnavailableError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    async def _forward(self, cmd: pb.BaseCommand) -> None:
        rid = matching.request_id_of(cmd) or 0
        try:
            _, answer = await self._ask_any(cmd)
        except BrokerUnavailableError as exc:
            self._fail(cmd, rid, str(exc))
            return
        matching.set_request_id(answer, rid)
        self.send(answer)

    async def _lookup(self, cmd: pb.BaseCommand) -> None:
        """Follow the lookup's redirects (``wire.lookup``) from any broker to the owner, and
        answer the client: Connect, through this proxy."""
        rid = cmd.lookupTopic.request_id
        chain = lookup.Redirects(max_redirects=self.config.max_redirects)

        def ask(authoritative: bool) -> pb.BaseCommand:
            out = pb.BaseCommand()
            out.CopyFrom(cmd)
            out.lookupTopic.authoritative = authoritative
            # the proxy reaches brokers on their internal listener
            out.lookupTopic.ClearField("advertised_listener_name")
            return out

        try:
            _, answer = await self._ask_any(ask(False))
            while isinstance(step := chain.answer(answer), lookup.Ask):
                broker = step.target.broker
                assert broker is not None  # (a redirect names a broker)
                self.brokers.learn(broker)
                answer = await self.links.request(broker, ask(step.authoritative))
            owner = step.target.broker
            assert owner is not None
            self.brokers.learn(owner)
        except lookup.LookupFailedError as exc:
            if isinstance(exc, lookup.TooManyRedirectsError):
                self._fail(cmd, rid, exc.message)
            else:
                self.send(
                    commands.lookup_response(request_id=rid, error=exc.code, message=exc.message)
                )
            return
        except BrokerUnavailableError as exc:
            self._fail(cmd, rid, str(exc))
            return
        self.send(
            commands.lookup_response(
                request_id=rid,
                broker_service_url=owner,
                authoritative=True,
                proxy_through_service_url=True,
            )
        )

    def _fail(self, cmd: pb.BaseCommand, rid: int, message: str) -> None:
        log.info("%s: %s failed: %s", self._remote, commands.type_name(cmd.type), message)
        if cmd.type == _C.LOOKUP:
            self.send(
                commands.lookup_response(request_id=rid, error=pb.ServiceNotReady, message=message)
            )
        elif cmd.type == _C.PARTITIONED_METADATA:
            self.send(
                commands.partitioned_metadata_response(
                    request_id=rid, error=pb.ServiceNotReady, message=message
                )
            )
        else:
            self.send(commands.error(request_id=rid, error=pb.ServiceNotReady, message=message))
