"""The broker's HTTP side: /metrics, health, HTTP lookup, and the mount point of the admin
REST API.

:func:`build_app` makes the aiohttp application from a :class:`BrokerService`; other
packages (the admin API v2, issue of its own) add their routes through ``extensions``:
callables that receive the app, which carries the service under :data:`SERVICE`. Errors are
answered as Pulsar does: JSON ``{"reason": ...}`` with a 4xx/5xx status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import prometheus_client
from aiohttp import web
from prometheus_client.registry import Collector

from magnetar.broker import access, metrics, workers
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.metadata import stats as metadata_stats
from magnetar.offload import metrics as offload_metrics
from magnetar.security import metrics as security_metrics
from magnetar.security import tls
from magnetar.security.authn import AuthenticationError, Identity
from magnetar.wire import pb
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

SERVICE = web.AppKey("magnetar_broker_service", BrokerService)
"""``request.app[SERVICE]``: the broker service, for route handlers of extensions."""

IDENTITY = web.RequestKey("magnetar_identity", Identity)
"""``request[IDENTITY]``: who made the request (absent with authentication off)."""

ORIGINAL_PRINCIPAL_HEADER = "X-Original-Principal"
"""The client a proxy (a role in proxyRoles) forwards a request for, as Pulsar's proxy sets."""

Extension = Callable[[web.Application], None]

MetricsSource = Callable[[web.Application], Awaitable[str]]
METRICS_SOURCES = web.AppKey("magnetar_metrics_sources", list[MetricsSource])
"""``app[METRICS_SOURCES]``: more Prometheus text for ``/metrics``, added by extensions
(the functions' series, ``broker/admin/functions.py``)."""

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


METRICS = web.AppKey("magnetar_metrics_registry", prometheus_client.CollectorRegistry)
"""``app[METRICS]``: what /metrics renders (:func:`magnetar.broker.metrics.registry`)."""


@dataclass(frozen=True, slots=True)
class PodMetrics:
    """A worker of ``magnetar broker --workers N``: which one, and the shared HTTP ports on
    which ``/metrics`` answers for the whole pod (``broker/workers.py``)."""

    slot: workers.WorkerSlot
    shared_ports: frozenset[int]


POD = web.AppKey("magnetar_pod_metrics", PodMetrics)
"""``app[POD]``: set in a worker process; absent in a single broker process."""


async def local_exposition(app: web.Application) -> bytes:
    """This process's own ``/metrics``, in OpenMetrics (which, unlike the Prometheus text
    format, keeps a counter's ``_created`` in its family, so it parses back as it was)."""
    # more series rendered as text by extensions (the functions' pulsar_function_*)
    extra = "".join([await source(app) for source in app.get(METRICS_SOURCES, [])])
    body, _ = metrics.render(app[METRICS], metrics.OPENMETRICS, extra)
    return body


def _local_port(request: web.Request) -> int | None:
    """The port of this process the request came in on."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return int(sockname[1]) if isinstance(sockname, tuple) and len(sockname) > 1 else None


async def _metrics(request: web.Request) -> web.Response:
    app = request.app
    accept = request.headers.get("Accept")
    pod = app.get(POD)
    if pod is not None and _local_port(request) in pod.shared_ports:
        # a pod-level scrape: every worker's series, each labelled with its worker
        own = await local_exposition(app)
        parts = await workers.read_expositions(pod.slot, own)
        body, content_type = metrics.render_workers(
            parts, accept, cluster=app[SERVICE].config.cluster_name
        )
    else:
        extra = "".join([await source(app) for source in app.get(METRICS_SOURCES, [])])
        body, content_type = metrics.render(app[METRICS], accept, extra)
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _health(request: web.Request) -> web.Response:
    if not request.app[SERVICE].healthy:
        return web.json_response({"reason": "no metadata session"}, status=503)
    return web.Response(text="ok")


async def _status(request: web.Request) -> web.Response:
    """Pulsar's ``/status.html``: 200 ``OK`` while the broker serves (holds its metadata
    session), 503 otherwise; no credentials needed, so probes work on a secured broker."""
    session = request.app[SERVICE].ownership.session
    if session is None or session.lost:
        return web.Response(text="not serving", status=503)
    return web.Response(text="OK")


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


async def _bundle_of_topic(request: web.Request) -> web.Response:
    """The range of the namespace bundle a topic hashes into (``topics bundle-range``; the
    topic need not exist), as Pulsar answers it: the bare ``0x..._0x...`` text."""
    service = request.app[SERVICE]
    m = request.match_info
    name = f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}"
    try:
        bundle = await service.bundle(service.parse_topic(name))
    except BrokerError as err:
        return error_response(err)
    return web.Response(text=bundle.range, content_type="application/json")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refused(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate every request (when authentication is on) and authorize it by its
    route's rule (:func:`magnetar.broker.access.route_rule`, when authorization is on):
    401 without valid credentials; when the role may not, 401 or 403 route by route as
    Apache Pulsar 4 answers (:func:`magnetar.broker.access.refusal_status`, checked against
    it here), which pulsar-admin reports as "not authorized"."""
    service = request.app[SERVICE]
    acc = service.access
    route = request.match_info.route.resource
    pattern = route.canonical if route is not None else request.path
    rule = access.route_rule(
        request.method, pattern, authenticate_metrics=acc.config.authenticate_metrics
    )
    if rule.need is access.Need.NOTHING:
        return await handler(request)
    identity: Identity | None = None
    if acc.authenticator is not None:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        try:
            identity = acc.authenticator.authenticate_http(
                request.headers.get("Authorization"),
                peer_cn=tls.peer_common_name(cert if isinstance(cert, dict) else None),
            )
        except AuthenticationError as err:
            log.info(
                "%s %s %s: authentication failed: %s",
                request.remote,
                request.method,
                request.path,
                err,
            )
            return _refused(401, f"Authentication required: {err}")
        request[IDENTITY] = identity
    if not acc.authorization_enabled or rule.need is access.Need.AUTHENTICATED:
        return await handler(request)
    original = request.headers.get(ORIGINAL_PRINCIPAL_HEADER)
    if not await _allowed(acc, identity, original, rule, request.match_info):
        role = acc.acting_role(identity, original)
        return _refused(
            access.refusal_status(request.method, pattern),
            f"Unauthorized: role {role!r} is not authorized ({rule.need.value}) here",
        )
    return await handler(request)


async def _allowed(
    acc: access.Access,
    identity: Identity | None,
    original: str | None,
    rule: access.RouteRule,
    match: web.UrlMappingMatchInfo,
) -> bool:
    need = rule.need
    if acc.is_super_user(identity, original):
        return True
    if need is access.Need.SUPER_USER or "tenant" not in match:
        return False
    tenant = match["tenant"]
    if need is access.Need.TENANT_ADMIN:
        return await acc.may_administer_tenant(identity, tenant, original)
    namespace = match.get("namespace", "")
    if need is access.Need.NAMESPACE:
        try:
            await acc.check_namespace(
                identity, access.TopicOp.LOOKUP, tenant, namespace, original_principal=original
            )
        except BrokerError:
            return False
        return True
    domain = match.get("domain", "persistent")
    name = f"{domain}://{tenant}/{namespace}/{match.get('topic', '')}"
    try:
        topic = TopicName.parse(name)
    except InvalidTopicNameError:
        return await acc.may_administer_tenant(identity, tenant, original)
    return await acc.may(
        identity,
        rule.op,
        topic,
        original_principal=original,
        subscription=match.get("subscription"),
    )


def build_app(
    service: BrokerService,
    *,
    extensions: Iterable[Extension] = (),
    metrics_sources: Iterable[Collector | prometheus_client.CollectorRegistry] = (),
) -> web.Application:
    """The broker's HTTP application; ``metrics_sources`` are more registries /metrics shows
    (the standalone's bookie)."""
    app = web.Application(middlewares=[access_middleware])
    app[SERVICE] = service
    app[METRICS] = metrics.registry(
        metrics.BrokerCollector(service),
        [
            # the offload layer's series (Pulsar's brk_ledgeroffloader_*; docs/offload.md)
            offload_metrics.REGISTRY,
            security_metrics.REGISTRY,
            metadata_stats.REGISTRY,
            *metrics_sources,
            *metrics.RUNTIME_COLLECTORS,
        ],
    )
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/admin/v2/brokers/health", _health)
    app.router.add_get("/status.html", _status)
    app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", _lookup)
    app.router.add_get(
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", _bundle_of_topic
    )
    for extend in extensions:
        extend(app)
    return app
