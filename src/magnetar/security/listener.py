"""TLS on a listening socket, with a log line and a counter for each refused handshake.

Why this module exists: asyncio (and uvloop) drop a failed server-side handshake --
plaintext or garbage on a TLS port, an untrusted client certificate -- with no more than a
debug line and never tell the protocol, so nobody could see or count them. Both event loops
drive the handshake through the context's ``sslobject_class`` (``SSLContext.wrap_bio``);
:func:`observed` gives a listener its own context whose SSL objects log and count the
handshake errors (``pulsar_tls_handshake_failures_total{listener=...}``) before the loop
closes that socket. Nothing else on the process is touched by a refusal.

:func:`bind` is how a process (broker, proxy) opens a listener, plaintext or TLS with such
a context from its :class:`ServerTls`; :func:`keep_refreshed` re-reads that ``ServerTls``'s
certificate files for as long as the process runs.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any, Final

from magnetar.security import metrics
from magnetar.security.tls import ServerTls

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S: Final = 10.0
"""How long a TLS client may take to complete its handshake."""


class _ObservedSSLObject(ssl.SSLObject):
    listener = "?"

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise  # the handshake goes on
        except ssl.SSLError as err:
            metrics.TLS_HANDSHAKE_FAILURES.labels(self.listener).inc()
            log.warning("TLS handshake refused on %s: %s", self.listener, err)
            raise


def observe(context: ssl.SSLContext, *, listener: str) -> ssl.SSLContext:
    """Make ``context``'s handshake failures logged and counted under ``listener``."""
    cls: Any = type(f"ObservedSSLObject[{listener}]", (_ObservedSSLObject,), {"listener": listener})
    context.sslobject_class = cls
    return context


async def bind(
    factory: Callable[[], asyncio.BaseProtocol],
    *,
    host: str,
    port: int,
    tls: ServerTls | None = None,
    listener: str | None = None,
    start_serving: bool = True,
    reuse_port: bool = False,
) -> tuple[asyncio.Server, int]:
    """A listener on ``port`` (0: a free one) and the port it got; with ``listener`` (its
    name, e.g. ``brokerServicePortTls``) TLS with a context of its own from ``tls`` whose
    refused handshakes are logged and counted. ``reuse_port``: ``SO_REUSEPORT``, so the
    worker processes of one broker share the port and the kernel spreads connections over
    them (``broker/workers.py``)."""
    context = None
    if listener is not None:
        assert tls is not None, "a TLS listener needs the process's ServerTls"
        context = observe(tls.context(), listener=listener)
    server = await asyncio.get_running_loop().create_server(
        factory,
        host=host,
        port=port,
        reuse_address=True,
        reuse_port=reuse_port or None,
        backlog=1024,
        start_serving=start_serving,
        ssl=context,
        ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if context else None,
    )
    return server, int(server.sockets[0].getsockname()[1])


async def keep_refreshed(tls: ServerTls, interval_s: float) -> None:
    """Every ``interval_s`` (tlsCertRefreshCheckDurationSec), re-read the certificate files
    into the listeners' contexts when they changed (counted in
    ``pulsar_tls_certificate_reloads_total``). Runs until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            if tls.refresh():
                metrics.TLS_RELOADS.inc()
        except Exception:
            log.exception("TLS certificate refresh failed; keeping the current one")
