"""Tenants: ``/admin/v2/tenants[/{tenant}]`` with Pulsar's TenantInfo
{adminRoles, allowedClusters}.

Create is create-only (409 when it exists), update is a compare-and-set of the record, delete
refuses while namespaces remain (409, as Pulsar) unless ``?force=true``, which deletes them
with their topics first. As in Pulsar, a forced delete is refused with 405 unless the broker
runs with forceDeleteTenantAllowed (and, when the tenant has namespaces,
forceDeleteNamespaceAllowed: Pulsar force-deletes each namespace through its own endpoint).
"""

from __future__ import annotations

import json

from aiohttp import web

from magnetar.broker.admin import namespaces, remote, validation
from magnetar.broker.admin.common import (
    AdminError,
    accepts,
    check_name,
    not_found,
    parsed,
    read_json,
    service,
    update_json,
)
from magnetar.metadata import api, keys


async def _clusters(request: web.Request) -> list[str]:
    return [keys.unsegment(n) for n in await service(request).store.children(keys.CLUSTERS)]


async def list_tenants(request: web.Request) -> web.Response:
    """The names of the tenants."""
    names = await service(request).store.children(keys.POLICIES)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


async def get_tenant(request: web.Request) -> web.Response:
    """A tenant's TenantInfo."""
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


@accepts(validation.TENANT_INFO, required=False)
async def create_tenant(request: web.Request) -> web.Response:
    """Create a tenant (409 when it exists; 412 when an allowed cluster does not exist)."""
    tenant = check_name(request.match_info["tenant"], "tenant")
    info = validation.tenant_info(parsed(request), clusters=await _clusters(request))
    try:
        await service(request).store.put(
            keys.tenant(tenant),
            json.dumps({"format": 1, **info}).encode(),
            expected_version=api.NOT_EXISTS,
        )
    except api.BadVersionError:
        raise AdminError(409, f"tenant {tenant} already exists") from None
    return web.Response(status=204)


@accepts(validation.TENANT_INFO)
async def update_tenant(request: web.Request) -> web.Response:
    """Update a tenant's admin roles and allowed clusters (absent fields are kept)."""
    tenant = check_name(request.match_info["tenant"], "tenant")
    info = validation.tenant_info(
        parsed(request), clusters=await _clusters(request), default_all=False
    )
    await update_json(
        service(request).store,
        keys.tenant(tenant),
        lambda d: d.update(info),
        what=f"tenant {tenant}",
    )
    return web.Response(status=204)


async def delete_tenant(request: web.Request) -> web.Response:
    """Delete a tenant (409 while it has namespaces, unless ``force=true`` and the broker
    allows forced deletion; 405 when it does not)."""
    tenant = check_name(request.match_info["tenant"], "tenant")
    force = validation.query_flag(request.query.get("force"), "force")
    svc = service(request)
    if force and not svc.config.force_delete_tenant_allowed:
        raise AdminError(405, "Broker doesn't allow forced deletion of tenants")
    if await svc.store.get(keys.tenant(tenant)) is None:
        raise not_found(f"tenant {tenant}")
    children = await svc.store.children(keys.tenant(tenant))
    if children and not force:
        raise AdminError(409, f"The tenant {tenant} still has active namespaces")
    if children and not svc.config.force_delete_namespace_allowed:
        raise AdminError(405, namespaces.FORCE_NOT_ALLOWED)
    for child in children:
        await namespaces.delete_namespace_and_topics(
            svc, remote.peers(request), tenant, keys.unsegment(child)
        )
    record = await svc.store.get(keys.tenant(tenant))
    if record is None:
        raise not_found(f"tenant {tenant}")
    try:
        await svc.store.delete(keys.tenant(tenant), expected_version=record.version)
    except (api.BadVersionError, api.NotFoundError):
        raise AdminError(409, f"tenant {tenant} changed while being deleted; retry") from None
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/tenants", list_tenants)
    router.add_get("/admin/v2/tenants/{tenant}", get_tenant)
    router.add_put("/admin/v2/tenants/{tenant}", create_tenant)
    router.add_post("/admin/v2/tenants/{tenant}", update_tenant)
    router.add_delete("/admin/v2/tenants/{tenant}", delete_tenant)
