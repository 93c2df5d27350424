"""TLS on a listening socket, with a log line and a counter for each refused handshake.

Why not ``create_server(ssl=...)``: asyncio drops a failed server-side handshake (plaintext or
garbage on a TLS port, an untrusted client certificate) with no more than a debug line and
never tells the protocol, so nobody could see or count them. :func:`acceptor` wraps a
protocol factory: each accepted TCP connection starts TLS itself (``loop.start_tls``), and
only a completed handshake reaches the wrapped protocol's ``connection_made``. A refusal
closes that socket only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Final

from magnetar.security import metrics

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S: Final = 10.0


def acceptor(
    factory: Callable[[], asyncio.BaseProtocol],
    context: ssl.SSLContext,
    *,
    listener: str,
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> Callable[[], asyncio.Protocol]:
    """A protocol factory for ``loop.create_server`` that serves ``factory``'s protocols
    over TLS with ``context``; ``listener`` names the port in logs and metrics."""

    def make() -> asyncio.Protocol:
        return _Handshake(factory, context, listener, handshake_timeout_s)

    return make


class _Handshake(asyncio.Protocol):
    def __init__(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
        listener: str,
        timeout_s: float,
    ) -> None:
        self._factory = factory
        self._context = context
        self._listener = listener
        self._timeout = timeout_s
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # nothing is read before start_tls takes the socket over
        self._task = asyncio.get_running_loop().create_task(self._start(transport))

    async def _start(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        app = self._factory()
        try:
            tls = await loop.start_tls(
                transport,
                app,
                self._context,
                server_side=True,
                ssl_handshake_timeout=self._timeout,
            )
        except (ssl.SSLError, OSError, TimeoutError, ConnectionError) as err:
            metrics.TLS_HANDSHAKE_FAILURES.labels(self._listener).inc()
            log.warning("%s: TLS handshake refused on %s: %s", _addr(peer), self._listener, err)
            transport.abort()
            return
        if tls is None:  # the peer went away during the handshake
            transport.abort()
            return
        app.connection_made(tls)

    def data_received(self, data: bytes) -> None:  # reading is paused until TLS takes over
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _addr(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
