"""The broker's HTTP side: /metrics, health, HTTP lookup, and the mount point of the admin
REST API.

:func:`build_app` makes the aiohttp application from a :class:`BrokerService`; other
packages (the admin API v2, issue of its own) add their routes through ``extensions``:
callables that receive the app, which carries the service under :data:`SERVICE`. Errors are
answered as Pulsar does: JSON ``{"reason": ...}`` with a 4xx/5xx status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import prometheus_client
from aiohttp import web

from magnetar.broker import metrics
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.offload import metrics as offload_metrics
from magnetar.wire import pb

SERVICE = web.AppKey("magnetar_broker_service", BrokerService)
"""``request.app[SERVICE]``: the broker service, for route handlers of extensions."""

Extension = Callable[[web.Application], None]

_STATUS_OF_ERROR: dict[int, int] = {
    pb.TopicNotFound: 404,
    pb.SubscriptionNotFound: 404,
    pb.ConsumerNotFound: 404,
    pb.InvalidTopicName: 412,
    pb.NotAllowedError: 405,
    pb.ServiceNotReady: 503,
    pb.AuthorizationError: 403,
    pb.AuthenticationError: 401,
    pb.TooManyRequests: 429,
}


def error_response(err: BrokerError) -> web.Response:
    """The HTTP answer for a BrokerError (status from its ServerError code)."""
    return web.json_response({"reason": err.message}, status=_STATUS_OF_ERROR.get(err.code, 500))


async def _metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = metrics.render(service.config.cluster_name, list(service.topics.values()))
    # the offload layer's series (Pulsar's brk_ledgeroffloader_* names; docs/offload.md)
    body += prometheus_client.generate_latest(offload_metrics.REGISTRY).decode()
    return web.Response(body=body.encode(), headers={"Content-Type": metrics.CONTENT_TYPE})


async def _health(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    session = service.ownership.session
    if session is None or session.lost:
        return web.json_response({"reason": "no metadata session"}, status=503)
    return web.Response(text="ok")


async def _lookup(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    m = request.match_info
    name = f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}"
    authoritative = request.query.get("authoritative", "false").lower() == "true"
    listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
    try:
        answer = await service.lookup(
            service.parse_topic(name), authoritative=authoritative, listener=listener
        )
    except BrokerError as err:
        return error_response(err)
    return web.json_response(
        {
            "brokerUrl": answer.service_url,
            "brokerUrlTls": answer.service_url_tls,
            "httpUrl": answer.web_service_url,
            "httpUrlTls": answer.web_service_url_tls,
            "nativeUrl": answer.service_url,
        }
    )


def build_app(service: BrokerService, *, extensions: Iterable[Extension] = ()) -> web.Application:
    app = web.Application()
    app[SERVICE] = service
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/admin/v2/brokers/health", _health)
    app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", _lookup)
    for extend in extensions:
        extend(app)
    return app
