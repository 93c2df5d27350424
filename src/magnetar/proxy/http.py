"""The proxy's HTTP side: the admin REST API v2 (and HTTP lookups) forwarded to a broker.

Why: ``magnetar admin`` and Pulsar's admin tools reach the cluster through the same single
entry point as the clients. Each request under ``/admin/`` or ``/lookup/`` goes to the next
broker in turn with its method, path, query, headers and body; a redirect to the owning
broker (307/308, as brokers answer single-topic operations) is followed by the proxy itself,
since the broker addresses in ``Location`` are not reachable from where the client is.
``/status.html`` is the proxy's own health (as Pulsar's proxy): 200 once a broker is known;
``/metrics`` its counters (connections, refused TLS handshakes, authentications).

With authentication on, the proxy authenticates each forwarded request itself (401 when
the credentials are refused) and forwards it with its own credentials, naming the client in
``X-Original-Principal`` (``proxy.access``), over HTTPS with ``tlsEnabledWithBroker``.
"""

from __future__ import annotations

import logging
import urllib.parse

import aiohttp
from aiohttp import web

from magnetar.proxy import metrics
from magnetar.proxy.access import AuthenticationError, ProxyAccess
from magnetar.proxy.brokers import Brokers, BrokerUnavailableError
from magnetar.security import metrics as security_metrics
from magnetar.security import tls
from magnetar.security.authn import Identity

log = logging.getLogger(__name__)

BROKERS = web.AppKey("magnetar_proxy_brokers", Brokers)
SESSION = web.AppKey("magnetar_proxy_session", aiohttp.ClientSession)
MAX_REDIRECTS = web.AppKey("magnetar_proxy_max_redirects", int)
ACCESS = web.AppKey("magnetar_proxy_access", ProxyAccess)

_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE",
        "Trailers", "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
        "Content-Encoding",
    )
)  # fmt: skip
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


async def _status(request: web.Request) -> web.Response:
    try:
        await request.app[BROKERS].pick()
    except BrokerUnavailableError as exc:
        return _reason(503, str(exc))
    return web.Response(text="OK")


def _client(request: web.Request, access: ProxyAccess) -> Identity | None:
    """The request's client (None without authentication); AuthenticationError."""
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    return access.authenticate_http(
        request.headers, peer_cn=tls.peer_common_name(cert if isinstance(cert, dict) else None)
    )


async def _metrics(request: web.Request) -> web.Response:
    access = request.app[ACCESS]
    if access.authenticate_metrics:
        try:
            _client(request, access)
        except AuthenticationError as err:
            return _reason(401, f"Authentication required: {err}")
    text = metrics.render() + security_metrics.render()
    return web.Response(text=text, content_type="text/plain")


async def _forward(request: web.Request) -> web.StreamResponse:
    if not request.path.startswith(("/admin/", "/lookup/")):
        return _reason(404, f"the proxy forwards /admin/ and /lookup/ only, not {request.path}")
    brokers = request.app[BROKERS]
    session = request.app[SESSION]
    access = request.app[ACCESS]
    try:
        identity = _client(request, access)
    except AuthenticationError as err:
        log.info(
            "%s %s %s: authentication failed: %s", request.remote, request.method, request.path, err
        )
        return _reason(401, f"Authentication required: {err}")
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
    access.forwarded_headers(headers, identity)
    try:
        broker = await brokers.pick()
    except BrokerUnavailableError as exc:
        return _reason(503, str(exc))
    web_url = broker.admin(tls=access.tls_with_broker)
    if not web_url:
        return _reason(
            503,
            f"broker {broker.service} has no {'HTTPS' if access.tls_with_broker else 'HTTP'} port",
        )
    url = web_url.rstrip("/") + request.rel_url.raw_path_qs
    method = request.method
    for _ in range(request.app[MAX_REDIRECTS] + 1):
        try:
            async with session.request(
                method,
                url,
                data=body or None,
                headers=headers,
                allow_redirects=False,
                ssl=access.http_ssl(url),
            ) as answer:
                if answer.status in _REDIRECTS and "Location" in answer.headers:
                    url = urllib.parse.urljoin(str(answer.url), answer.headers["Location"])
                    if answer.status == 303:
                        method, body = "GET", b""
                    continue
                payload = await answer.read()
                out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(status=answer.status, body=payload, headers=out)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("admin %s %s: broker %s failed: %s", method, request.path, url, exc)
            return _reason(503, f"the broker at {url} did not answer: {exc}")
    return _reason(502, f"more than {request.app[MAX_REDIRECTS]} redirects for {request.path}")


def build_app(
    brokers: Brokers,
    session: aiohttp.ClientSession,
    *,
    access: ProxyAccess,
    max_redirects: int,
) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[BROKERS] = brokers
    app[SESSION] = session
    app[ACCESS] = access
    app[MAX_REDIRECTS] = max_redirects
    app.router.add_get("/status.html", _status)
    app.router.add_get("/metrics", _metrics)
    app.router.add_route("*", "/{tail:.*}", _forward)
    return app
