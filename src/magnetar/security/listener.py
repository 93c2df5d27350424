"""TLS on a listening socket, with a log line and a counter for each refused handshake.

Why this module exists: asyncio (and uvloop) drop a failed server-side handshake --
plaintext or garbage on a TLS port, an untrusted client certificate -- with no more than a
debug line and never tell the protocol, so nobody could see or count them. Both event loops
drive the handshake through the context's ``sslobject_class`` (``SSLContext.wrap_bio``);
:func:`observed` gives a listener its own context whose SSL objects log and count the
handshake errors (``pulsar_tls_handshake_failures_total{listener=...}``) before the loop
closes that socket. Nothing else on the process is touched by a refusal.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any, Final

from magnetar.security import metrics

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
