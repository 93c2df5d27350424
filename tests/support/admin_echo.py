"""Small HTTP servers on loopback answering as a broker's admin API does, for the tests of
the admin client and of ``magnetar admin``'s HTTP side: what a call sent is echoed back,
Pulsar's error body is answered, and ``/moved`` redirects (``307``) to another server, as a
broker that does not own a topic redirects to its owner."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.procs import LOOPBACK


class _Broker(BaseHTTPRequestHandler):
    """``/moved...`` and ``/loop...``: 307 to the next server (``/admin/v2/echo``, or its
    ``/loop``); ``/admin/v2/missing...``: 404 with Pulsar's ``{"reason": ...}``;
    ``/admin/v2/plain...``: 500 without a body; anything else: 200 echoing the method, the
    body, the Authorization header and the server's name."""

    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith(("/moved", "/loop")):
            where = "/loop" if self.path.startswith("/loop") else "/admin/v2/echo"
            self._send(307, b"", location=self.server.next_url + where)
        elif self.path.startswith("/admin/v2/missing"):
            self._send(404, json.dumps({"reason": "Topic not found"}).encode())
        elif self.path.startswith("/admin/v2/plain"):
            self._send(500, b"")
        else:
            echo = {
                "method": self.command,
                "body": body.decode(),
                "authorization": self.headers.get("Authorization"),
                "server": self.server.name,
            }
            self._send(200, json.dumps(echo).encode())

    def _send(self, status: int, payload: bytes, *, location: str | None = None) -> None:
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@contextlib.contextmanager
def brokers(n: int = 1) -> Iterator[list[str]]:
    """``n`` servers (their ``http://`` URLs), each redirecting to the next (the last to the
    first), stopped on exit."""
    servers = [ThreadingHTTPServer((LOOPBACK, 0), _Broker) for _ in range(n)]
    urls = [f"http://{LOOPBACK}:{s.server_address[1]}" for s in servers]
    threads = []
    for i, server in enumerate(servers):
        server.name = chr(ord("a") + i)  # type: ignore[attr-defined]
        server.next_url = urls[(i + 1) % n]  # type: ignore[attr-defined]
        threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        threads[-1].start()
    try:
        yield urls
    finally:
        for server, thread in zip(servers, threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
