"""The client connection on a blocking socket, for callers that are synchronous.

Why this module exists: Spark's executors call the source from plain Python threads, one
task a thread, and gain nothing from an event loop (a task reads one partition, one frame
after the other; a loop in a thread of its own would add a hand-over per frame). This is
``connection.py``'s twin for them: the same handshake, PING/PONG and AUTH_CHALLENGE
(``wire.session``), request ids (``wire.matching``), lookup (``wire.lookup``), TLS through
an ``ssl.SSLContext``; reading with a deadline instead of callbacks. How a frame is read is
``read_frame``, which a subclass may replace: the Spark reader reads a MESSAGE's stored entry
from the socket's buffered stream into a bytes object of its own
(``spark/protocol_read.py``); the default decodes what ``recv`` returns with ``wire.frames``
(for tests and tools: a read timing out loses nothing).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from magnetar.client.connection import CLIENT_VERSION, ConnectionLostError
from magnetar.wire import commands, frames, lookup, matching, pb, session, urls
from magnetar.wire.errors import WireError

READ_BUFFER: Final = 256 * 1024
"""The socket's read buffer: small frames are read from it, a large frame mostly straight
into its own bytes object."""
_SIZE: Final = 4
_C = pb.BaseCommand


class AnyFrame(Protocol):
    """What ``next`` returns: a frame with its command (and whatever else its reader adds)."""

    @property
    def command(self) -> pb.BaseCommand: ...

    @property
    def type(self) -> int: ...


class BlockingConnection:
    """One blocking connection to ``address``, piped by a proxy to ``proxy_to`` when given.
    ``handshake=False`` opens the socket only (a test sending what no client would): call
    ``handshake`` then."""

    def __init__(
        self,
        address: urls.Address,
        *,
        deadline: float,
        proxy_to: str | None = None,
        client_version: str = CLIENT_VERSION,
        ssl_context: ssl.SSLContext | None = None,
        auth: session.AuthProvider | None = None,
        protocol_version: int = commands.PROTOCOL_VERSION,
        handshake: bool = True,
    ) -> None:
        self.address, self.proxy_to = address, proxy_to
        self.where = f"{address}" + (f" (proxy to {proxy_to})" if proxy_to else "")
        self.session = session.ClientSession(
            client_version=client_version,
            proxy_to=proxy_to,
            auth=auth,
            protocol_version=protocol_version,
        )
        self.requests: matching.Pending[None] = matching.Pending()
        try:
            sock = socket.create_connection(address, timeout=_left(deadline))
        except OSError as exc:
            raise ConnectionLostError(f"cannot connect to {self.where}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=address.host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise ConnectionLostError(f"TLS with {self.where} failed: {exc}") from None
        self.sock = sock
        self.stream = sock.makefile("rb", buffering=READ_BUFFER)
        self.timed_out = False  # (set by a frame reader cut by a timeout mid-frame)
        self._decoder: frames.FrameDecoder | None = None
        if handshake:
            try:
                self.handshake(deadline)
            except BaseException:
                self.close()
                raise

    def handshake(self, deadline: float) -> pb.CommandConnected:
        """CONNECT, and the frames up to CONNECTED (AUTH_CHALLENGE answered on the way);
        HandshakeRefusedError when refused, ConnectionLostError when not answered in time."""
        self.send(self.session.connect())
        while self.session.state is session.State.CONNECTING:
            frame = self.read(deadline)
            if frame is None:
                raise ConnectionLostError(f"{self.where} did not answer CONNECT in time")
            self.session.receive(frame.command)  # (raises on anything but the handshake's)
            self._flush_session()
        assert self.session.connected is not None
        return self.session.connected

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(frames.encode_command(cmd))

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ConnectionLostError(f"sending to {self.where}: {exc}") from None

    def read(self, deadline: float) -> AnyFrame | None:
        """The next frame as it comes (nothing answered), or None when ``deadline``
        (``time.monotonic()``) passed first."""
        while True:
            if self.timed_out:
                raise ConnectionLostError(f"reading from {self.where}: an earlier read timed out")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                self.sock.settimeout(left)
                frame = self.read_frame()
            except TimeoutError:
                return None
            except OSError as exc:
                raise ConnectionLostError(f"reading from {self.where}: {exc}") from None
            if frame is not None:  # (None: an unknown command type, skipped as clients do)
                return frame

    def next(self, deadline: float) -> AnyFrame | None:
        """The next frame that is not the session's (PINGs are answered), or None when
        ``deadline`` (``time.monotonic()``) passed first."""
        receive = self.session.receive
        while True:
            frame = self.read(deadline)
            if frame is None:
                return None
            if frame.type != _C.MESSAGE and receive(frame.command):
                self._flush_session()
                continue
            return frame

    def _flush_session(self) -> None:
        for cmd in self.session.take_outgoing():
            self.send(cmd)

    def exactly(self, n: int) -> bytes:
        """``n`` bytes from the socket's buffered stream (for a frame reader that reads
        frames in place); ConnectionLostError at EOF."""
        data = self.stream.read(n)
        if len(data) < n:
            raise ConnectionLostError(f"{self.where} closed the connection")
        return data  # type: ignore[no-any-return]

    def read_frame(self) -> AnyFrame | None:
        """One frame, read with the socket's timeout (None: a command type unknown here).
        This one decodes with ``wire.frames`` what ``recv`` returns, and a timeout loses
        nothing; a subclass may read differently (all its frames, the handshake's too)."""
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = frames.FrameDecoder(
                max_frame_size=frames.DEFAULT_MAX_FRAME_SIZE
            )
        while True:
            try:
                frame = decoder.next_frame()
            except WireError as exc:
                if exc.fatal:
                    raise ConnectionLostError(
                        f"undecodable data from {self.where}: {exc}"
                    ) from None
                return None
            if frame is not None:
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionLostError(f"{self.where} closed the connection")
            decoder.push(data)

    def request(self, cmd: pb.BaseCommand, deadline: float) -> pb.BaseCommand:
        """Send ``cmd`` under a request id of this connection and return the answer carrying
        it (frames read meanwhile that answer nothing are dropped)."""
        rid = self.requests.next_id()
        matching.set_request_id(cmd, rid)
        self.requests.expect(rid, None)
        try:
            self.send(cmd)
            while True:
                frame = self.next(deadline)
                if frame is None:
                    what = commands.type_name(cmd.type)
                    raise ConnectionLostError(f"{self.where} did not answer {what} in time")
                if frame.type != _C.MESSAGE and matching.request_id_of(frame.command) == rid:
                    return frame.command
        finally:
            self.requests.forget(rid)

    def reaches(self, address: urls.Address, proxy_to: str | None) -> bool:
        return (self.address, self.proxy_to) == (address, proxy_to)

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


C = TypeVar("C", bound=BlockingConnection)


def find_owner(
    *,
    topic: str,
    service: urls.ServiceUrl,
    connect: Callable[[urls.Address, str | None], C],
    deadline: float,
    max_redirects: int = lookup.MAX_REDIRECTS,
) -> C:
    """A connection (made by ``connect(address, proxy_to)``) to the broker serving
    ``topic``, found by LOOKUP from the service URL, redirects followed; a connection that
    already reaches where the next step goes is kept. LookupFailedError when refused,
    ConnectionLostError when a broker cannot be reached."""
    chain = lookup.Redirects(max_redirects=max_redirects, tls=service.tls)
    step: lookup.Ask | lookup.Found = chain.step
    conn = connect(*lookup.address_of(step.target, service))
    try:
        while isinstance(step, lookup.Ask):
            answer = conn.request(chain.request(topic=topic, request_id=0), deadline)
            step = chain.answer(answer)
            address, proxy_to = lookup.address_of(step.target, service)
            if not conn.reaches(address, proxy_to):
                following = connect(address, proxy_to)
                conn.close()
                conn = following
        return conn
    except BaseException:
        conn.close()
        raise


def _left(deadline: float) -> float:
    return max(0.001, deadline - time.monotonic())
