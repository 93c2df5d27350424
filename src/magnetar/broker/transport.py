"""The byte side of a client connection: framing, write coalescing, backpressure, keepalive.

Why this module exists: what a connection does with bytes is the same whatever the commands
mean. :class:`FrameTransport` is the asyncio protocol of one socket: bytes in go through
:class:`~magnetar.wire.frames.FrameDecoder` and each frame goes to its :class:`Session`
(:class:`magnetar.broker.connection.ServerConnection`); frames out are coalesced into one
``writelines`` per event-loop turn; the transport's high/low water marks drive
:meth:`is_writable`/:meth:`wait_writable`. Bad framing closes this connection only.

Keepalive: a connection silent for ``keepalive_interval_s`` is pinged, and closed if it
stays silent for another interval (any received byte counts as an answer); a handshake not
done within one interval is closed too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol, cast

from magnetar.wire import commands, frames, pb
from magnetar.wire.errors import UnknownCommandError, WireError

log = logging.getLogger(__name__)


class Session(Protocol):
    """What the transport hands frames to."""

    @property
    def connected(self) -> bool:
        """The handshake is done (keepalive pings only then)."""

    def on_frame(self, frame: frames.Frame) -> None: ...

    def on_lost(self) -> None:
        """The connection is gone: release what it held."""


class FrameTransport(asyncio.Protocol):
    def __init__(
        self,
        session: Session,
        *,
        max_frame_size: int,
        keepalive_interval_s: float,
        write_buffer_high: int,
        write_buffer_low: int,
    ) -> None:
        self._session = session
        self._decoder = frames.FrameDecoder(max_frame_size=max_frame_size)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._limits = (write_buffer_high, write_buffer_low)
        self._interval = keepalive_interval_s
        self.closed = False
        self.remote = "?"
        self._out: list[bytes | bytearray | memoryview] = []
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._received = False
        self._waiting_pong = False
        self._keepalive: asyncio.TimerHandle | None = None

    # --- writing ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue one encoded frame (sent at the end of this event-loop turn)."""
        if self.closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def write_parts(self, parts: Iterable[bytes | bytearray | memoryview]) -> None:
        """Queue one frame given as parts (a MESSAGE: head and the stored entry, uncopied)."""
        if self.closed:
            return
        self._out.extend(parts)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and self._transport is not None and not self.closed:
            self._out = []
            self._transport.writelines(out)

    def is_writable(self) -> bool:
        return self._writable.is_set()

    def extra_info(self, name: str) -> object:
        """The socket's ``get_extra_info(name)`` (``peercert``, ``sslcontext``...)."""
        return None if self._transport is None else self._transport.get_extra_info(name)

    async def wait_writable(self) -> None:
        if self.closed:
            raise ConnectionError("connection closed")
        await self._writable.wait()
        if self.closed:
            raise ConnectionError("connection closed")

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self.flush()
            self._transport.close()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport
        high, low = self._limits
        transport.set_write_buffer_limits(high=high, low=low)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.remote = f"{peer[0]}:{peer[1]}"
        self._keepalive = self._loop.call_later(self._interval, self._keepalive_tick)

    def data_received(self, data: bytes) -> None:
        self._received = True
        session = self._session
        try:
            for frame in self._decoder.feed(data):
                session.on_frame(frame)
                if self.closed:
                    return
        except UnknownCommandError as err:
            log.info("%s: %s; closing the connection", self.remote, err)
            if session.connected:
                self.write(
                    frames.encode_command(
                        commands.error(request_id=0, error=pb.NotAllowedError, message=str(err))
                    )
                )
            self.close()
            return
        except WireError as err:
            log.info("%s: bad frame (%s); closing the connection", self.remote, err)
            self.close()
            return
        except Exception:
            log.exception("%s: error handling a command; closing the connection", self.remote)
            self.close()
            return
        if self._out:
            self.flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()  # wake waiters; they see it closed
        self._out = []
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._session.on_lost()

    # --- keepalive ----------------------------------------------------------------------------

    def pong_received(self) -> None:
        self._waiting_pong = False

    def _keepalive_tick(self) -> None:
        if self.closed:
            return
        if not self._session.connected:
            log.info("%s: no handshake within the keepalive interval; closing", self.remote)
            self.close()
            return
        if self._received:
            self._received = False
            self._waiting_pong = False
        elif self._waiting_pong:
            log.info("%s: no answer to ping; closing the connection", self.remote)
            self.close()
            return
        else:
            self._waiting_pong = True
            self.write(frames.PING_FRAME)
        self._keepalive = self._loop.call_later(self._interval, self._keepalive_tick)
