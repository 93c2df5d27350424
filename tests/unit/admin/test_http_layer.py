"""The admin API's HTTP plumbing without a broker: the error middleware (every failure is
JSON ``{"reason": ...}``; only a real bug is a 500, and it is logged), body parsing, and the
OpenAPI document generated from the route table."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from magnetar.broker import admin
from magnetar.broker.admin import common, openapi, validation
from magnetar.broker.contracts import BrokerError
from magnetar.wire import pb


async def answer(handler: Any, path: str = "/admin/v2/x") -> web.Response:
    request = make_mocked_request("GET", path)
    response = await common.error_middleware(request, handler)
    assert isinstance(response, web.Response)
    return response


def reason(response: web.Response) -> str:
    assert response.body is not None
    return str(json.loads(bytes(response.body))["reason"])  # type: ignore[arg-type]


async def test_middleware_maps_errors_to_json() -> None:
    async def admin_error(_: web.Request) -> web.Response:
        raise common.AdminError(409, "exists")

    async def broker_error(_: web.Request) -> web.Response:
        raise BrokerError(pb.TopicNotFound, "no topic")

    async def no_route(_: web.Request) -> web.Response:
        raise web.HTTPMethodNotAllowed("PATCH", ["GET"])

    r = await answer(admin_error)
    assert (r.status, reason(r)) == (409, "exists")
    r = await answer(broker_error)
    assert (r.status, reason(r)) == (404, "no topic")
    r = await answer(no_route)
    assert r.status == 405 and reason(r) == "Method Not Allowed"


async def test_an_unexpected_exception_is_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    async def bug(_: web.Request) -> web.Response:
        raise KeyError("oops")

    with caplog.at_level(logging.ERROR, logger=common.__name__):
        r = await answer(bug)
    assert r.status == 500 and "KeyError" in reason(r)
    assert common.INTERNAL_ERROR_LOG in caplog.text


async def test_other_paths_are_left_alone() -> None:
    async def bug(_: web.Request) -> web.Response:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        await common.error_middleware(make_mocked_request("GET", "/metrics"), bug)


class _Payload:
    def __init__(self, data: bytes) -> None:
        self.data = data


async def body_of(raw: bytes, *, required: bool = True) -> Any:
    request = make_mocked_request("PUT", "/admin/v2/x")

    async def read() -> bytes:
        return raw

    request.read = read  # type: ignore[method-assign]
    return await common.body(request, required=required)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"{nope", "malformed JSON"),
        (b"[" * 100_000, "nested too deeply"),
        (b"\xff\xfe\xfa", "malformed JSON"),
        (b"", "required"),
    ],
)
async def test_bad_bodies_are_400(raw: bytes, fragment: str) -> None:
    with pytest.raises(common.AdminError) as err:
        await body_of(raw)
    assert err.value.status == 400 and fragment in err.value.reason


async def test_optional_body() -> None:
    assert await body_of(b"  ", required=False) is None
    assert await body_of(b'{"a": 1}') == {"a": 1}


def routes() -> web.Application:
    app = web.Application()
    admin.extension(app)
    return app


def test_openapi_document_covers_every_route_with_body_schemas() -> None:
    app = routes()
    doc = openapi.document(app.router)
    served = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None and r.method != "HEAD"
    }
    documented = set()
    for path, ops in doc["paths"].items():
        for method in ops:
            documented.add((method.upper(), path))
    assert {(m, openapi._PARAM.sub(r"{\1}", p)) for m, p in served} == documented
    retention = doc["paths"]["/admin/v2/namespaces/{tenant}/{namespace}/retention"]["post"]
    schema = retention["requestBody"]["content"]["application/json"]["schema"]
    assert set(schema["properties"]) == {"retentionTimeInMinutes", "retentionSizeInMB"}
    parts = doc["paths"]["/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions"]["put"]
    assert parts["requestBody"]["content"]["application/json"]["schema"]["minimum"] == 1
    ids = {op["operationId"] for ops in doc["paths"].values() for op in ops.values()}
    assert len(ids) == len(documented)  # unique operation ids
    assert all(op["summary"] for ops in doc["paths"].values() for op in ops.values())
    assert "<table" in openapi.html_index(doc)


async def test_accepts_checks_the_body_before_the_handler() -> None:
    called = []

    @common.accepts(validation.PARTITIONS)
    async def handler(request: web.Request) -> web.Response:
        called.append(common.parsed(request))
        return web.Response(status=204)

    async def run(raw: bytes) -> web.Response:
        request = make_mocked_request("PUT", "/admin/v2/t")

        async def read() -> bytes:
            return raw

        request.read = read  # type: ignore[method-assign]
        response = await common.error_middleware(request, handler)
        assert isinstance(response, web.Response)
        return response

    assert (await run(b"0")).status == 400
    assert called == []
    assert (await run(b"4")).status == 204
    assert called == [4]
    assert handler.request_body is validation.PARTITIONS  # type: ignore[attr-defined]
