"""The one client of the admin REST API v2 inside Magnetar: ``magnetar admin``, the Spark
source's driver and the test helpers call brokers through it.

Why this module exists: each of them used to carry its own ``urllib`` calls, its own
decoding of Pulsar's error body (``{"reason": "..."}``) and its own idea of redirects and
credentials (docs/architecture.md, "The client layer"). Here, once:

* **credentials** in the clients' ``authPlugin`` / ``authParams`` forms
  (:class:`magnetar.security.client_auth.Credentials`: a token file is re-read per call, a
  TLS-certificate plugin presents its certificate on ``https://``);
* **TLS trust** as Pulsar's clients take it (``tlsTrustCertsFilePath``,
  ``tlsAllowInsecureConnection``, hostname verification);
* **redirects**: a broker that does not own a topic answers ``307`` to its owner; the call
  goes there with the same method, body and credentials (as pulsar-admin does), at most
  :data:`MAX_REDIRECTS` times;
* **errors**: an answer of 400 or more is :class:`AdminError` (status, the reason decoded by
  :func:`error_reason`, method and path); a broker that cannot be reached is
  :class:`AdminUnreachable`; bad settings are :class:`AdminConfigError`.

Synchronous (``urllib``, the standard library): its callers (a command line, Spark's
driver, test code) are synchronous. A broker's own calls to other brokers
(``broker/admin/remote.py``) are asyncio and stay there, decoding errors with
:func:`error_reason`; the operator keeps its own client by its layering contract (it imports
nothing of ``magnetar``) with a function of the same shape.
"""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from magnetar.security import tls
from magnetar.security.client_auth import Credentials, CredentialsError

MAX_REDIRECTS: Final = 5
REDIRECTS: Final = frozenset({301, 302, 307, 308})
NO_BODY: Final[Any] = object()
"""A request without a body (``None`` would be sent as JSON ``null``)."""
DEFAULT_TIMEOUT_S: Final = 60.0


def error_reason(status: int, body: bytes | str) -> str:
    """The reason of an admin API error answer: Pulsar's ``{"reason": "..."}`` (also
    ``{"message": ...}``, as JAX-RS answers some errors), else the body's text, else the
    status's standard phrase. Pure: the one decoder of Pulsar's error body in ``src/``."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    text = text.strip()
    try:
        decoded = json.loads(text) if text else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        for key in ("reason", "message"):
            value = decoded.get(key)
            if isinstance(value, str) and value:
                return value
    if isinstance(decoded, str) and decoded:
        return decoded
    if text:
        return text
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


class AdminConfigError(ValueError):
    """Settings the client cannot use (a URL, credentials, TLS files); names the problem."""


class AdminUnreachable(Exception):
    """The admin API could not be reached (refused, DNS, TLS handshake, timeout)."""


class AdminError(Exception):
    """The admin API answered with an error status."""

    def __init__(self, status: int, reason: str, *, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {reason}")
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # surfaces as HTTPError 3xx: AdminClient.call follows it itself


class AdminClient:
    """One admin endpoint (``http(s)://host:port``), called synchronously."""

    def __init__(
        self,
        url: str,
        *,
        credentials: Credentials | None = None,
        tls_trust_certs_file: str | None = None,
        tls_allow_insecure: bool = False,
        tls_verify_hostname: bool = True,
        timeout: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` are sent with every call besides the credentials' (a proxy's
        ``X-Original-Principal``, say). TLS settings apply to ``https://`` URLs, and to the
        brokers a redirect leads to."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AdminConfigError(f"an admin URL must be http(s)://host:port, got {url!r}")
        self.base = url.rstrip("/")
        self.timeout = timeout
        self.credentials = credentials
        self._headers = dict(headers or {})
        self.tls = tls.TlsSettings(
            trust=tls_trust_certs_file,
            allow_insecure=tls_allow_insecure,
            verify_hostname=tls_verify_hostname,
            certificate=credentials.cert_file if credentials is not None else None,
            key=credentials.key_file if credentials is not None else None,
        )
        self._ssl_context: ssl.SSLContext | None = None
        self._plain = urllib.request.build_opener(_NoRedirect())
        self._secure: urllib.request.OpenerDirector | None = None
        if self.tls.files() or parts.scheme == "https":
            self.ssl_context()  # checked now; else made at the first https call (10-200 ms)

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of ``https://`` calls (also after a redirect to one)."""
        if self._ssl_context is None:
            try:
                self._ssl_context = tls.client_context(self.tls)
            except tls.TlsConfigError as err:
                raise AdminConfigError(str(err)) from None
        return self._ssl_context

    def _opener(self, url: str) -> urllib.request.OpenerDirector:
        if not url.startswith("https:"):
            return self._plain
        if self._secure is None:
            https = urllib.request.HTTPSHandler(context=self.ssl_context())
            self._secure = urllib.request.build_opener(_NoRedirect(), https)
        return self._secure

    @classmethod
    def of(
        cls,
        url: str,
        *,
        auth_plugin: str | None = None,
        auth_params: str | None = None,
        **options: Any,
    ) -> AdminClient:
        """The client for a URL and credentials in their configuration forms (``authPlugin``
        and ``authParams`` as client.conf has them); AdminConfigError names a bad one."""
        creds = None
        if auth_plugin:
            try:
                creds = Credentials.parse(auth_plugin, auth_params or "")
            except CredentialsError as err:
                raise AdminConfigError(str(err)) from None
        return cls(url, credentials=creds, **options)

    def headers(self) -> dict[str, str]:
        """What every call sends: Accept, the fixed headers, the credentials (read now)."""
        out = {"Accept": "application/json", **self._headers}
        if self.credentials is not None:
            try:
                out.update(self.credentials.http_headers())
            except CredentialsError as err:
                raise AdminConfigError(str(err)) from None
        return out

    def call(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        *,
        params: Mapping[str, str] | None = None,
        raw: bool = False,
        form: Sequence[FormField] | None = None,
        with_headers: bool = False,
    ) -> Any:
        """``method path`` (``path`` from the root: ``/admin/v2/...``); the decoded JSON
        answer (text when not JSON, None when empty; the bytes with ``raw``; with
        ``with_headers``, the response's headers and its bytes, as a stored message is
        answered). ``form``: send a multipart/form-data body of those fields instead of JSON
        (the functions API's uploads). Redirects are followed with the same method, body and
        credentials."""
        url = self.base + path
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        data = None if body is NO_BODY else json.dumps(body).encode()
        content_type = "application/json"
        if form is not None:
            content_type, data = multipart(form)
        for _ in range(MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http(s) only
            for name, value in self.headers().items():
                request.add_header(name, value)
            if data is not None:
                request.add_header("Content-Type", content_type)
            try:
                with self._opener(url).open(request, timeout=self.timeout) as response:
                    payload = response.read()
                    if with_headers:
                        return dict(response.headers.items()), payload
                    return payload if raw else _decode(payload)
            except urllib.error.HTTPError as err:
                location = err.headers.get("Location") if err.headers else None
                if err.code in REDIRECTS and location:
                    url = _redirected(url, location)
                    continue
                reason = error_reason(err.code, err.read())
                raise AdminError(err.code, reason, method=method, path=path) from None
            except urllib.error.URLError as err:
                raise AdminUnreachable(f"cannot reach {_origin(url)}: {err.reason}") from None
            except (TimeoutError, ConnectionError, ssl.SSLError) as err:
                raise AdminUnreachable(f"cannot reach {_origin(url)}: {err}") from None
        reason = f"more than {MAX_REDIRECTS} redirects, the last to {url}"
        raise AdminError(HTTPStatus.TEMPORARY_REDIRECT, reason, method=method, path=path)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.call("GET", path, **kwargs)

    def put(self, path: str, body: Any = NO_BODY, **kwargs: Any) -> Any:
        return self.call("PUT", path, body, **kwargs)

    def post(self, path: str, body: Any = NO_BODY, **kwargs: Any) -> Any:
        return self.call("POST", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.call("DELETE", path, **kwargs)


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of a multipart/form-data body (a file when ``file_name`` is set)."""

    name: str
    data: bytes
    file_name: str | None = None
    content_type: str = "application/json"


def multipart(fields: Sequence[FormField]) -> tuple[str, bytes]:
    """(Content-Type, body) of a multipart/form-data request holding ``fields``."""
    boundary = f"magnetar-{secrets.token_hex(16)}"
    out = bytearray()
    for f in fields:
        disposition = f'form-data; name="{f.name}"'
        if f.file_name is not None:
            disposition += f'; filename="{f.file_name}"'
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        out += f"Content-Type: {f.content_type}\r\n\r\n".encode()
        out += f.data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", bytes(out)


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _redirected(url: str, location: str) -> str:
    target = urllib.parse.urljoin(url, location)
    if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
        raise AdminUnreachable(f"{_origin(url)} redirected to {location!r}, not http(s)")
    return target


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
