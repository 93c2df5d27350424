"""What every admin handler shares: the error middleware, JSON body parsing, name checks and
compare-and-set updates of JSON records in the metadata store.

Errors are answered as Pulsar does: a status and a JSON ``{"reason": ...}``. Bad input is
always a 4xx; an unexpected exception is a 500 with a reason (and a log line), never an HTML
page or a dropped connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from magnetar.broker import http
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.metadata import api
from magnetar.wire import topics as topic_names
from magnetar.wire.errors import InvalidTopicNameError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AdminError(Exception):
    """An HTTP error with Pulsar's ``{"reason": ...}`` body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def not_found(what: str) -> AdminError:
    return AdminError(404, f"{what} does not exist")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/admin/"):
        return await handler(request)
    try:
        return await handler(request)
    except AdminError as err:
        return web.json_response({"reason": err.reason}, status=err.status)
    except BrokerError as err:
        return http.error_response(err)
    except web.HTTPException as err:  # aiohttp's own (404 no route, 405 method): JSON too
        if err.status < 400:
            raise
        return web.json_response({"reason": err.reason}, status=err.status)
    except Exception as err:
        log.exception("admin %s %s failed", request.method, request.path)
        return web.json_response({"reason": f"internal error: {err}"}, status=500)


def service(request: web.Request) -> BrokerService:
    return request.app[http.SERVICE]


async def body(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON body; AdminError 400 when it is malformed (or missing when
    required)."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise AdminError(400, "a JSON body is required")
        return None
    try:
        return json.loads(raw)
    except ValueError as err:
        raise AdminError(400, f"malformed JSON body: {err}") from None


def check_name(value: str, what: str) -> str:
    try:
        return topic_names.check_name_part(value, what)
    except InvalidTopicNameError as err:
        raise AdminError(412, str(err)) from None


def int_in(value: Any, what: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AdminError(400, f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


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
