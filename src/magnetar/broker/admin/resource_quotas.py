"""Routes: ``/admin/v2/resource-quotas`` (pulsar-admin ``resource-quotas``): the default
quota and one per namespace bundle, Pulsar's ResourceQuota ``{msgRateIn, msgRateOut,
bandwidthIn, bandwidthOut, memory, dynamic}``.

They are records of the metadata store (``/admin/resource-quota-default``,
``/admin/resource-quotas/<tenant>/<namespace>/<bundle>``, docs/metadata.md): set, read back
(a bundle without its own answers the default; the default unset is Pulsar's), deleted with
their namespace. Magnetar's bundle placement does not read them -- as Apache Pulsar's
default load manager does not -- so they are kept for the tools that manage them. A bundle
must be one of the namespace's (412 with Pulsar's reason otherwise); super-user only, as in
Pulsar (``broker/access.py``: a route it does not list).
"""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web

from magnetar.broker import policies
from magnetar.broker.admin import validation
from magnetar.broker.admin.common import AdminError, accepts, parsed, service
from magnetar.broker.ownership import bundles_of
from magnetar.metadata import api, keys

BASE = "/admin/v2/resource-quotas"
_BUNDLE = "{tenant}/{namespace}/{bundle:0x[0-9a-fA-F]+_0x[0-9a-fA-F]+}"

PULSAR_DEFAULT: Final = {
    "msgRateIn": 40.0,
    "msgRateOut": 120.0,
    "bandwidthIn": 100000.0,
    "bandwidthOut": 300000.0,
    "memory": 80.0,
    "dynamic": True,
}
"""The default quota of a Pulsar broker on which none was set."""

_NUMBERS = ("msgRateIn", "msgRateOut", "bandwidthIn", "bandwidthOut", "memory")


def _quota(value: Any) -> dict[str, Any]:
    """A ResourceQuota body: numbers (stored as floats, as Pulsar answers them) and
    ``dynamic``; an absent field is Pulsar's default of a new ResourceQuota (0, true)."""
    if not isinstance(value, dict):
        raise AdminError(400, "a resource quota must be a JSON object")
    unknown = sorted(set(value) - set(_NUMBERS) - {"dynamic"})
    if unknown:
        raise AdminError(400, f"unknown resource quota fields: {unknown}")
    out: dict[str, Any] = {}
    for key in _NUMBERS:
        v = value.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise AdminError(400, f"{key} must be a number, got {json.dumps(v)}")
        out[key] = float(v)
    dynamic = value.get("dynamic", True)
    out["dynamic"] = validation.boolean(dynamic, "dynamic")
    return out


QUOTA = validation.Body(
    {
        "type": "object",
        "properties": {**{k: {"type": "number"} for k in _NUMBERS}, "dynamic": {"type": "boolean"}},
    },
    _quota,
    "ResourceQuota",
)


async def _default(request: web.Request) -> dict[str, Any]:
    record = await service(request).store.get(keys.DEFAULT_RESOURCE_QUOTA)
    return dict(json.loads(record.value)) if record is not None else dict(PULSAR_DEFAULT)


async def _bundle_key(request: web.Request) -> str:
    """The record key of the path's bundle (404 unknown namespace, 412 not its bundle)."""
    m = request.match_info
    tenant, ns, bundle = m["tenant"], m["namespace"], m["bundle"].lower()
    record = await service(request).store.get(keys.namespace(tenant, ns))
    if record is None:
        raise AdminError(404, "Namespace does not exist")
    found = policies.NamespacePolicies.from_json(record.value)
    lower, upper = (int(part, 16) for part in bundle.split("_"))
    for b in bundles_of(tenant, ns, found.boundaries):
        if b.lower == lower:
            if b.upper != upper:
                raise AdminError(
                    412,
                    f"Invalid upper boundary for bundle {tenant}/{ns}/{bundle}. "
                    f"Expected upper boundary of {tenant}/{ns}/{b.range}",
                )
            return keys.resource_quota(tenant, ns, b.range)
    raise AdminError(412, f"Invalid lower boundary for bundle {tenant}/{ns}/{bundle}")


async def get_default(request: web.Request) -> web.Response:
    """The default resource quota."""
    return web.json_response(await _default(request))


@accepts(QUOTA)
async def set_default(request: web.Request) -> web.Response:
    """Set the default resource quota."""
    store = service(request).store
    await store.put(keys.DEFAULT_RESOURCE_QUOTA, json.dumps(parsed(request)).encode())
    return web.Response(status=204)


async def get_bundle(request: web.Request) -> web.Response:
    """A bundle's quota (the default when it has none of its own)."""
    record = await service(request).store.get(await _bundle_key(request))
    if record is None:
        return web.json_response(await _default(request))
    return web.json_response(json.loads(record.value))


@accepts(QUOTA)
async def set_bundle(request: web.Request) -> web.Response:
    """Set a bundle's own quota."""
    key = await _bundle_key(request)
    await service(request).store.put(key, json.dumps(parsed(request)).encode())
    return web.Response(status=204)


async def remove_bundle(request: web.Request) -> web.Response:
    """Remove a bundle's own quota (the default applies again)."""
    key = await _bundle_key(request)
    try:
        await service(request).store.delete(key)
    except api.NotFoundError:
        pass  # none of its own: the outcome asked for
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(BASE, get_default)
    router.add_post(BASE, set_default)
    router.add_get(f"{BASE}/{_BUNDLE}", get_bundle)
    router.add_post(f"{BASE}/{_BUNDLE}", set_bundle)
    router.add_delete(f"{BASE}/{_BUNDLE}", remove_bundle)
