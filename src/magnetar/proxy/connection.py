"""One client connection to the proxy: a lookup connection or a pipe to one broker.

The first frame decides (as in Pulsar's proxy). A CONNECT naming ``proxy_to_broker_url``
(what the official clients send after a lookup answered ``proxy_through_service_url``)
turns the connection into a pipe: the proxy opens a connection to that broker -- only
a broker it knows, see ``brokers.Brokers.resolve``; over TLS with ``tlsEnabledWithBroker`` --
and sends it a CONNECT: its own, naming the client it authenticated (``proxy.access``), or,
when the proxy neither authenticates clients nor has credentials, the client's CONNECT bytes
unchanged. Once the broker answers CONNECTED (relayed to the client) it copies bytes both
ways, with backpressure (a side whose transport buffer is full stops reading the other).
Any other CONNECT is answered by the
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
from magnetar.proxy import metrics
from magnetar.proxy.access import AuthenticationError, Client, ProxyAccess
from magnetar.proxy.brokers import BrokerLinks, Brokers, BrokerUnavailableError
from magnetar.proxy.config import ProxyConfig
from magnetar.security import tls
from magnetar.wire import commands, frames, lookup, matching, pb, urls
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

SERVER_VERSION: Final = f"Magnetar-proxy-{__version__}"
_C = pb.BaseCommand
_NO_REQUEST: Final = (1 << 64) - 1
"""request_id of an ERROR that answers no request (a refused CONNECT), as brokers send."""
_FORWARDED: Final = frozenset({_C.PARTITIONED_METADATA, _C.GET_TOPICS_OF_NAMESPACE, _C.GET_SCHEMA})


class State(enum.Enum):
    HANDSHAKE = 1
    CONNECTING = 2  # to the broker named in CONNECT
    LOOKUP = 3
    PIPE = 4
    CLOSED = 5


class Admission:
    """Client connections open now, in all and per client address, against
    ``maxConcurrentInboundConnections`` and ``maxConcurrentInboundConnectionsPerIp`` (0: no
    limit), as Pulsar's proxy counts them."""

    def __init__(self, total: int, per_ip: int) -> None:
        self.total = total
        self.per_ip = per_ip
        self.open = 0
        self.by_ip: dict[str, int] = {}

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; why it is refused (not counted) otherwise."""
        if self.total and self.open >= self.total:
            return "Reached the maximum number of connections"
        if self.per_ip and self.by_ip.get(ip, 0) >= self.per_ip:
            return f"Reached the maximum number of connections on address {ip}"
        self.open += 1
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        return None

    def release(self, ip: str) -> None:
        self.open -= 1
        left = self.by_ip.get(ip, 0) - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            self.by_ip.pop(ip, None)


class _BrokerSide(asyncio.Protocol):
    """The proxy's TCP connection to the broker of one piped client connection."""

    def __init__(self, client: ProxyConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.answer: bytearray | None = None
        """Bytes of the broker's answer to the proxy's CONNECT while it is awaited."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.answer is None:
            metrics.BINARY_OPS.inc()
            metrics.BINARY_BYTES.inc(len(data))
            self.client.write_raw(data)
            return
        self.answer += data
        if len(self.answer) < 4:
            return
        (size,) = struct.unpack_from(">I", self.answer)
        if len(self.answer) < size + 4:
            return
        answer, self.answer = bytes(self.answer), None
        self.client.broker_answered(answer, size + 4)

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
        access: ProxyAccess,
        on_closed: Callable[[ProxyConnection], None] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.config = config
        self.admission = admission
        self._admitted = False
        self.brokers = brokers
        self.links = links
        self.access = access
        self.client = Client(None, None)
        self._links_held = False
        self.state = State.HANDSHAKE
        self._on_closed = on_closed
        self._transport: asyncio.Transport | None = None
        self._remote = "?"
        self._ip = "?"
        self._head = bytearray()
        self._decoder: frames.FrameDecoder | None = None
        self._broker: _BrokerSide | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._max_frame = config.max_message_size + frames.FRAME_PADDING
        self._answer_timer: asyncio.TimerHandle | None = None

    # --- transport callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._remote = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._ip = str(peer[0]) if peer else "?"
        if self.admission is not None:
            refused = self.admission.admit(self._ip)
            if refused is not None:
                metrics.REJECTED_CONNECTIONS.inc()
                log.warning("%s: %s; connection refused", self._remote, refused)
                self.send(
                    commands.error(
                        request_id=_NO_REQUEST, error=pb.NotAllowedError, message=refused
                    )
                )
                self.close()  # what was written is flushed first
                return
        self._admitted = True
        metrics.NEW_CONNECTIONS.inc()
        metrics.ACTIVE_CONNECTIONS.inc()

    def data_received(self, data: bytes) -> None:
        if self.state is State.PIPE:
            assert self._broker is not None and self._broker.transport is not None
            metrics.BINARY_OPS.inc()
            metrics.BINARY_BYTES.inc(len(data))
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
        if self._answer_timer is not None:
            self._answer_timer.cancel()
        if self._admitted:
            self._admitted = False
            metrics.ACTIVE_CONNECTIONS.dec()
            if self.admission is not None:
                self.admission.release(self._ip)
        if self._links_held:
            self._links_held = False
            self.links.release(self.client.who)
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
        try:
            self.client = self.access.authenticate(connect, peer_cn=self._peer_cn())
        except AuthenticationError as err:
            log.info("%s: authentication failed: %s; closing", self._remote, err)
            self.send(
                commands.error(
                    request_id=_NO_REQUEST, error=pb.AuthenticationError, message=str(err)
                )
            )
            self.close()
            return
        if connect.proxy_to_broker_url:
            self.state = State.CONNECTING
            self._head += rest
            self.pause_reading()
            self._spawn(self._open_pipe(connect, first))
            return
        self.state = State.LOOKUP
        self.links.acquire(self.client.who)
        self._links_held = True
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

    def _peer_cn(self) -> str | None:
        cert = self._transport.get_extra_info("peercert") if self._transport else None
        return tls.peer_common_name(cert if isinstance(cert, dict) else None)

    async def _open_pipe(self, connect: pb.CommandConnect, connect_frame: bytes) -> None:
        url = connect.proxy_to_broker_url
        access = self.access
        try:
            target = await self.brokers.resolve(url, tls=access.tls_with_broker)
            if target is None:
                raise BrokerUnavailableError(f"{url} is not a broker of this cluster")
            address, _ = urls.parse_broker_url(target, bare=True)
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self.config.request_timeout_s):
                transport, side = await loop.create_connection(
                    lambda: _BrokerSide(self),
                    address.host,
                    address.port,
                    ssl=access.broker_ssl,
                    server_hostname=address.host if access.broker_ssl is not None else None,
                )
        except (OSError, TimeoutError, ValueError, BrokerUnavailableError) as exc:
            log.warning("%s: cannot forward to %s: %s", self._remote, url, exc)
            self._refuse_pipe(pb.ServiceNotReady, f"proxy cannot forward to {url}: {exc}")
            return
        if self.state is State.CLOSED:
            transport.close()
            return
        self._broker = side
        if not access.speaks_for_clients:
            transport.write(connect_frame + bytes(self._head))
            self._head = bytearray()
            self.state = State.PIPE
            self.resume_reading()
            return
        side.answer = bytearray()
        transport.write(frames.encode_command(access.broker_connect(connect, self.client)))
        self._answer_timer = loop.call_later(
            self.config.request_timeout_s,
            self._refuse_pipe,
            pb.ServiceNotReady,
            f"the broker at {url} did not answer CONNECT",
        )

    def broker_answered(self, answer: bytes, size: int) -> None:
        """The broker's first frame (``answer[:size]``) answers the proxy's CONNECT:
        CONNECTED starts the pipe (relayed to the client), anything else ends it."""
        if self._answer_timer is not None:
            self._answer_timer.cancel()
        if self.state is not State.CONNECTING:
            return
        try:
            frame = next(
                iter(frames.FrameDecoder(max_frame_size=self._max_frame).feed(answer[:size]))
            )
            cmd = frame.command
        except (WireError, StopIteration):
            self._refuse_pipe(pb.ServiceNotReady, "unreadable answer from the broker")
            return
        if cmd.type != _C.CONNECTED:
            if cmd.type == _C.ERROR:
                log.info(
                    "%s: the broker refused the proxy's CONNECT: %s",
                    self._remote,
                    cmd.error.message,
                )
                self._refuse_pipe(cmd.error.error, cmd.error.message)
            else:
                self._refuse_pipe(
                    pb.ServiceNotReady,
                    f"the broker answered CONNECT with {commands.type_name(cmd.type)}",
                )
            return
        self.write_raw(answer)
        assert self._broker is not None and self._broker.transport is not None
        if self._head:
            self._broker.transport.write(bytes(self._head))
        self._head = bytearray()
        self.state = State.PIPE
        self.resume_reading()

    def _refuse_pipe(self, code: pb.ServerError.ValueType, message: str) -> None:
        if self.state is State.CLOSED:
            return
        self.send(commands.error(request_id=_NO_REQUEST, error=code, message=message))
        self.close()

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
            broker = await self.brokers.pick()
            url = broker.binary(tls=self.access.tls_with_broker)
            try:
                if not url:
                    kind = "TLS" if self.access.tls_with_broker else "plaintext"
                    raise BrokerUnavailableError(f"broker {broker.service} has no {kind} port")
                return url, await self.links.request(url, cmd, who=self.client.who)
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
        chain = lookup.Redirects(
            max_redirects=self.config.max_redirects, tls=self.access.tls_with_broker
        )

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
                answer = await self.links.request(
                    broker, ask(step.authoritative), who=self.client.who
                )
            found = answer.lookupTopicResponse
            self.brokers.learn(found.brokerServiceUrl, found.brokerServiceUrlTls)
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
                broker_service_url=found.brokerServiceUrl or None,
                broker_service_url_tls=found.brokerServiceUrlTls or None,
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
