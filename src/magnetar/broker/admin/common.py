"""What every admin handler shares: the error middleware (which also answers the typed errors
of ``broker/topic_ops`` with their HTTP status), JSON body parsing, name checks and
compare-and-set updates of JSON records in the metadata store.

Errors are answered as Pulsar does: a status and a JSON ``{"reason": ...}``. Bad input is
always a 4xx; an unexpected exception is a 500 with a reason (and a log line), never an HTML
page or a dropped connection.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from yarl import URL

from magnetar.broker import http
from magnetar.broker.admin.errors import AdminError as AdminError  # re-exported
from magnetar.broker.admin.errors import not_found as not_found
from magnetar.broker.admin.validation import Body
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_ops import errors
from magnetar.common import errors as common_errors
from magnetar.metadata import api
from magnetar.wire import topics as topic_names
from magnetar.wire.errors import InvalidTopicNameError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

INTERNAL_ERROR_LOG = "admin: internal error answering"
"""Start of the log line of every 500 (tests assert bad input never produces it)."""

_PARSED = web.RequestKey("magnetar_admin_body", object)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/admin/"):
        return await handler(request)
    try:
        return await handler(request)
    except AdminError as err:
        return web.json_response({"reason": err.reason}, status=err.status)
    except errors.OwnedElsewhere as err:
        # an HTTPS client is sent to the owner's HTTPS URL, as Pulsar does
        target = err.web_service_url_tls if request.secure and err.web_service_url_tls else ""
        raise redirect(request, target or err.web_service_url) from None
    except errors.TopicAdminError as err:
        return web.json_response({"reason": err.reason}, status=status_of(err))
    except BrokerError as err:
        return http.error_response(err)
    except common_errors.TemporaryError as err:  # storage (bookies, S3) unreachable: retry later
        return web.json_response({"reason": f"{type(err).__name__}: {err}"}, status=503)
    except web.HTTPException as err:  # aiohttp's own (404 no route, 405 method): JSON too
        if err.status < 400:
            raise
        return web.json_response({"reason": err.reason}, status=err.status)
    except Exception as err:
        log.exception("%s %s %s", INTERNAL_ERROR_LOG, request.method, request.path)
        return web.json_response(
            {"reason": f"internal error: {type(err).__name__}: {err}"}, status=500
        )


_STATUS_OF: tuple[tuple[type[errors.TopicAdminError], int], ...] = (
    (errors.NotFound, 404),
    (errors.AlreadyExists, 409),
    (errors.Conflict, 409),
    (errors.InvalidName, 412),
    (errors.InUse, 412),
    (errors.Precondition, 412),
    (errors.NotAllowed, 405),
    (errors.Invalid, 400),
    (errors.Unavailable, 503),
)
"""Pulsar's HTTP status for each error of the typed topic operations."""


def status_of(err: errors.TopicAdminError) -> int:
    """The HTTP status answering ``err`` (a peer's refusal keeps the peer's status)."""
    if isinstance(err, errors.PeerRefused):
        return err.status
    return next((status for kind, status in _STATUS_OF if isinstance(err, kind)), 500)


def redirect(request: web.Request, web_service_url: str) -> web.HTTPTemporaryRedirect:
    """307 to the same path and query on the broker at ``web_service_url``, marked
    authoritative (that broker owns what was asked)."""
    target = f"{web_service_url.rstrip('/')}{request.rel_url.path}"
    query = {**request.query, "authoritative": "true"}
    return web.HTTPTemporaryRedirect(str(URL(target).with_query(query)))


def service(request: web.Request) -> BrokerService:
    return request.app[http.SERVICE]


def policies_changed(request: web.Request) -> None:
    """After a change of namespace, topic or partitioned-topic records: drop the broker's
    policy cache and tell the enforcer."""
    service(request).policies_changed()


async def body(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON body; AdminError 400 when it is malformed (or missing when
    required)."""
    return decode_json(await request.read(), required=required)


def decode_json(raw: bytes, *, required: bool = True) -> Any:
    """A request body's JSON value; AdminError 400 when it is malformed (or missing when
    required)."""
    if not raw.strip():
        if required:
            raise AdminError(400, "a JSON body is required")
        return None
    try:
        return json.loads(raw)
    except ValueError as err:  # UnicodeDecodeError included
        raise AdminError(400, f"malformed JSON body: {err}") from None
    except RecursionError:
        raise AdminError(400, "malformed JSON body: nested too deeply") from None


def accepts(spec: Body[Any], *, required: bool = True) -> Callable[[Handler], Handler]:
    """Decorate a handler whose request body is ``spec``: the body is parsed and checked
    before the handler runs (400 when malformed or illegal) and handed to it through
    :func:`parsed`; the OpenAPI document reads ``spec`` from the handler, so the published
    schema is the one enforced. ``required=False``: an empty body passes as None."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            raw = await body(request, required=required)
            request[_PARSED] = None if raw is None else spec.parse(raw)
            return await handler(request)

        run.request_body = spec  # type: ignore[attr-defined]
        run.body_required = required  # type: ignore[attr-defined]
        return run

    return wrap


def parsed(request: web.Request) -> Any:
    """The checked body of a handler decorated with :func:`accepts`."""
    return request[_PARSED]


def check_name(value: str, what: str) -> str:
    try:
        return topic_names.check_name_part(value, what)
    except InvalidTopicNameError as err:
        raise AdminError(412, str(err)) from None


async def read_json(
    store: api.MetadataStore, key: str
) -> tuple[dict[str, Any], api.Version] | None:
    record = await store.get(key)
    if record is None:
        return None
    data = json.loads(record.value) if record.value else {}
    return data, record.version


async def update_json(
    store: api.MetadataStore,
    key: str,
    change: Callable[[dict[str, Any]], None],
    *,
    what: str,
) -> dict[str, Any]:
    """Apply ``change`` to the JSON record at ``key`` by compare-and-set (retried on races);
    AdminError 404 when it does not exist."""
    for _ in range(10):
        found = await read_json(store, key)
        if found is None:
            raise not_found(what)
        data, version = found
        change(data)
        try:
            await store.put(key, json.dumps(data).encode(), expected_version=version)
        except api.BadVersionError:
            continue
        return data
    raise AdminError(409, f"{what} is being changed concurrently; retry")
