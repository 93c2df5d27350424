"""The OpenAPI 3 document of the admin API, generated from the live route table.

Built from the aiohttp router at request time, so it lists exactly the endpoints the broker
serves (it cannot drift from the code): paths with their parameters, methods, each handler's
docstring as the summary, and -- for handlers declaring their body with ``common.accepts`` --
the JSON schema of the request body that the same declaration enforces. ``/admin/v2/docs`` is a
plain HTML index of the same document (no external assets).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from aiohttp import web

from magnetar import __version__

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[^}]*)?\}")

_RESPONSES = {
    "200": {"description": "OK (JSON body)"},
    "204": {"description": "Done"},
    "400": {"description": "Malformed JSON or an illegal value"},
    "404": {"description": "Unknown tenant, namespace, topic or subscription"},
    "405": {"description": "Method not allowed (or not supported for this topic domain)"},
    "409": {"description": "Conflict: already exists, or changed concurrently"},
    "412": {"description": "Precondition failed (e.g. tenant still has namespaces)"},
}


def document(router: web.UrlDispatcher) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        raw = info.get("formatter") or info.get("path")
        if not raw or not raw.startswith(("/admin/", "/lookup/")) or route.method == "HEAD":
            continue
        path = _PARAM.sub(r"{\1}", raw)
        doc = (route.handler.__doc__ or route.handler.__name__.replace("_", " ")).strip()
        op: dict[str, Any] = {
            "operationId": f"{route.method.lower()}_{route.handler.__name__}",
            "summary": doc.splitlines()[0],
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in _PARAM.findall(raw)
            ],
            "responses": {
                code: {
                    "description": r["description"],
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
                if code >= "400"
                else {"description": r["description"]}
                for code, r in _RESPONSES.items()
            },
        }
        spec = getattr(route.handler, "request_body", None)
        if spec is not None:
            schema = dict(spec.schema)
            if spec.description:
                schema["description"] = spec.description
            op["requestBody"] = {
                "required": bool(getattr(route.handler, "body_required", True)),
                "content": {"application/json": {"schema": schema}},
            }
        paths.setdefault(path, {})[route.method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Magnetar admin REST API (Pulsar admin API v2 compatible)",
            "version": __version__,
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {"reason": {"type": "string"}},
                    "required": ["reason"],
                }
            }
        },
    }


async def serve(request: web.Request) -> web.Response:
    """The OpenAPI 3 document of this API."""
    return web.json_response(document(request.app.router))


def html_index(doc: dict[str, Any]) -> str:
    rows = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            schema = json.dumps(body["schema"]) if body else ""
            rows.append(
                f"<tr><td><b>{method.upper()}</b></td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op['summary'])}</td><td><code>{html.escape(schema)}</code>"
                "</td></tr>"
            )
    title = html.escape(doc["info"]["title"])
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><h1>{title}</h1><p>Machine-readable: <a href='openapi.json'>openapi.json</a>"
        "</p><table border='1' cellpadding='4' cellspacing='0'>"
        "<tr><th>method</th><th>path</th><th>summary</th><th>body</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )


async def docs(request: web.Request) -> web.Response:
    """An HTML index of the endpoints."""
    return web.Response(text=html_index(document(request.app.router)), content_type="text/html")


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/openapi.json", serve)
    router.add_get("/admin/v2/docs", docs)
