"""The HTTP side of ``magnetar admin``: one JSON call to the admin REST API.

Standard library only (urllib), so the CLI starts fast and needs nothing of the broker.
Redirects (``307`` from a broker that does not own a topic) are followed for every method,
body included, as pulsar-admin does; an HTTP error becomes :class:`AdminCliError` carrying
``"<status> <reason>"`` from Pulsar's ``{"reason": ...}`` body.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

MAX_REDIRECTS: Final = 5
NO_BODY: Final[Any] = object()
"""A request without a body (``None`` would be sent as JSON ``null``)."""


class AdminCliError(Exception):
    """An error to print as ``magnetar admin: <message>``, exiting with ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    """One admin API call: what a verb asks for (built without I/O, so tests can check it)."""

    method: str
    path: str
    body: Any = field(default=NO_BODY)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # surfaces as HTTPError 3xx: Client.call follows it itself


class Client:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        headers: Callable[[], dict[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``headers`` gives each call's extra headers (credentials: a token file is re-read
        per call); ``ssl_context`` verifies an https:// broker (and presents a client
        certificate when it holds one)."""
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise AdminCliError(f"--admin-url must be an http:// or https:// URL, got {url!r}", 2)
        self.base = url.rstrip("/")
        self.timeout = timeout
        self._headers = headers
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    def call(self, request: Request) -> Any:
        """Send ``request``; the decoded JSON answer (text when not JSON, None when empty)."""
        url = self.base + request.path
        data = None if request.body is NO_BODY else json.dumps(request.body).encode()
        for _ in range(MAX_REDIRECTS + 1):
            http_request = urllib.request.Request(url, data=data, method=request.method)  # noqa: S310 - scheme checked
            http_request.add_header("Accept", "application/json")
            for name, value in (self._headers() if self._headers else {}).items():
                http_request.add_header(name, value)
            if data is not None:
                http_request.add_header("Content-Type", "application/json")
            try:
                with self._opener.open(http_request, timeout=self.timeout) as response:
                    return _decode(response.read())
            except urllib.error.HTTPError as err:
                location = err.headers.get("Location") if err.headers else None
                if err.code in (301, 302, 307, 308) and location:
                    url = urllib.parse.urljoin(url, location)
                    continue
                raise AdminCliError(f"{err.code} {_reason(err)}") from None
            except urllib.error.URLError as err:
                raise AdminCliError(f"cannot reach {self.base}: {err.reason}") from None
            except (TimeoutError, ConnectionError) as err:
                raise AdminCliError(f"cannot reach {self.base}: {err}") from None
        raise AdminCliError(f"too many redirects for {request.path}")


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _reason(err: urllib.error.HTTPError) -> str:
    text = err.read().decode(errors="replace")
    try:
        reason = json.loads(text).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return str(reason or text or err.reason)
