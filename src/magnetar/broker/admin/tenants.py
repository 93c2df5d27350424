"""Clusters and tenants: ``/admin/v2/clusters`` and ``/admin/v2/tenants``."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.broker.admin.common import (
    AdminError,
    body,
    check_name,
    not_found,
    read_json,
    service,
    update_json,
)
from magnetar.metadata import api, keys


async def list_clusters(request: web.Request) -> web.Response:
    names = await service(request).store.children(keys.CLUSTERS)
    return web.json_response([keys.unsegment(n) for n in names])


async def get_cluster(request: web.Request) -> web.Response:
    name = request.match_info["cluster"]
    found = await read_json(service(request).store, keys.cluster(check_name(name, "cluster")))
    if found is None:
        raise not_found(f"cluster {name}")
    data = {k: v for k, v in found[0].items() if k != "format"}
    return web.json_response(data)


async def list_brokers(request: web.Request) -> web.Response:
    names = await service(request).store.children(keys.BROKERS)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


def _tenant_info(raw: Any, *, clusters: list[str]) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise AdminError(400, "tenant info must be a JSON object")
    unknown = set(raw) - {"adminRoles", "allowedClusters"}
    if unknown:
        raise AdminError(400, f"unknown tenant info fields: {sorted(unknown)}")
    roles = raw.get("adminRoles", [])
    allowed = raw.get("allowedClusters", clusters)
    for field, value in (("adminRoles", roles), ("allowedClusters", allowed)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AdminError(400, f"{field} must be a list of strings")
    missing = sorted(set(allowed) - set(clusters))
    if missing:
        raise AdminError(412, f"clusters do not exist: {missing}")
    return {"format": 1, "adminRoles": roles, "allowedClusters": allowed}


async def _clusters(request: web.Request) -> list[str]:
    return [keys.unsegment(n) for n in await service(request).store.children(keys.CLUSTERS)]


async def list_tenants(request: web.Request) -> web.Response:
    names = await service(request).store.children(keys.POLICIES)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


async def get_tenant(request: web.Request) -> web.Response:
    tenant = check_name(request.match_info["tenant"], "tenant")
    found = await read_json(service(request).store, keys.tenant(tenant))
    if found is None:
        raise not_found(f"tenant {tenant}")
    info = found[0]
    return web.json_response(
        {
            "adminRoles": info.get("adminRoles", []),
            "allowedClusters": info.get("allowedClusters", []),
        }
    )


async def create_tenant(request: web.Request) -> web.Response:
    tenant = check_name(request.match_info["tenant"], "tenant")
    info = _tenant_info(await body(request, required=False), clusters=await _clusters(request))
    try:
        await service(request).store.put(
            keys.tenant(tenant), json.dumps(info).encode(), expected_version=api.NOT_EXISTS
        )
    except api.BadVersionError:
        raise AdminError(409, f"tenant {tenant} already exists") from None
    return web.Response(status=204)


async def update_tenant(request: web.Request) -> web.Response:
    tenant = check_name(request.match_info["tenant"], "tenant")
    info = _tenant_info(await body(request), clusters=await _clusters(request))
    await update_json(
        service(request).store,
        keys.tenant(tenant),
        lambda d: d.update(info),
        what=f"tenant {tenant}",
    )
    return web.Response(status=204)


async def delete_tenant(request: web.Request) -> web.Response:
    tenant = check_name(request.match_info["tenant"], "tenant")
    store = service(request).store
    record = await store.get(keys.tenant(tenant))
    if record is None:
        raise not_found(f"tenant {tenant}")
    if await store.children(keys.tenant(tenant)):
        raise AdminError(412, f"tenant {tenant} still has namespaces")
    try:
        await store.delete(keys.tenant(tenant), expected_version=record.version)
    except (api.BadVersionError, api.NotFoundError):
        raise AdminError(409, f"tenant {tenant} changed while being deleted; retry") from None
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/clusters", list_clusters)
    router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
    router.add_get("/admin/v2/brokers/{cluster}", list_brokers)
    router.add_get("/admin/v2/tenants", list_tenants)
    router.add_get("/admin/v2/tenants/{tenant}", get_tenant)
    router.add_put("/admin/v2/tenants/{tenant}", create_tenant)
    router.add_post("/admin/v2/tenants/{tenant}", update_tenant)
    router.add_delete("/admin/v2/tenants/{tenant}", delete_tenant)
