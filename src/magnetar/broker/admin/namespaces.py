"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/policy]]``.

Policies live in the namespace record in Pulsar's ``Policies`` JSON shape, changed by
compare-and-set; every change invalidates the broker's policy cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker import policies
from magnetar.broker.admin.common import (
    AdminError,
    body,
    check_name,
    int_in,
    not_found,
    read_json,
    service,
    update_json,
)
from magnetar.metadata import api, keys


def _names(request: web.Request) -> tuple[str, str]:
    return (
        check_name(request.match_info["tenant"], "tenant"),
        check_name(request.match_info["namespace"], "namespace"),
    )


async def list_namespaces(request: web.Request) -> web.Response:
    tenant = check_name(request.match_info["tenant"], "tenant")
    store = service(request).store
    if await store.get(keys.tenant(tenant)) is None:
        raise not_found(f"tenant {tenant}")
    names = await store.children(keys.tenant(tenant))
    return web.json_response(sorted(f"{tenant}/{keys.unsegment(n)}" for n in names))


async def create_namespace(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    svc = service(request)
    tenant_info = await read_json(svc.store, keys.tenant(tenant))
    if tenant_info is None:
        raise not_found(f"tenant {tenant}")
    given = await body(request, required=False)
    if given is not None and not isinstance(given, dict):
        raise AdminError(400, "namespace policies must be a JSON object")
    num_bundles = svc.config.default_bundles
    if given and "bundles" in given:
        num_bundles = int_in(
            given["bundles"].get("numBundles", num_bundles), "numBundles", minimum=1
        )
    record = policies.default_namespace_policies(num_bundles)
    record["replication_clusters"] = list(tenant_info[0].get("allowedClusters", []))
    for field, value in (given or {}).items():
        if field != "bundles":
            record[field] = value
    try:
        await svc.store.put(
            keys.namespace(tenant, ns), json.dumps(record).encode(), expected_version=api.NOT_EXISTS
        )
    except api.BadVersionError:
        raise AdminError(409, f"namespace {tenant}/{ns} already exists") from None
    svc.policies.invalidate()
    return web.Response(status=204)


async def get_policies(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    found = await read_json(service(request).store, keys.namespace(tenant, ns))
    if found is None:
        raise not_found(f"namespace {tenant}/{ns}")
    return web.json_response({k: v for k, v in found[0].items() if k != "format"})


async def delete_namespace(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    svc = service(request)
    record = await svc.store.get(keys.namespace(tenant, ns))
    if record is None:
        raise not_found(f"namespace {tenant}/{ns}")
    force = request.query.get("force", "false").lower() == "true"
    topics = await svc.topics_of_namespace(tenant, ns)
    if topics and not force:
        raise AdminError(409, f"namespace {tenant}/{ns} still has topics: {topics[:5]}")
    for name in topics:
        topic = svc.parse_topic(name)
        await svc.unload(topic.full_name, reason="namespace deleted")
        await svc.managed_ledgers.delete(_ml_name(topic))
    await svc.store.delete_prefix(
        f"{keys.PARTITIONED_TOPICS}/{keys.segment(tenant)}/{keys.segment(ns)}"
    )
    await svc.store.delete(keys.namespace(tenant, ns))
    svc.policies.invalidate()
    return web.Response(status=204)


def _ml_name(topic: Any) -> str:
    from magnetar.broker.service import managed_ledger_name

    return managed_ledger_name(topic)


# --- single policies ---------------------------------------------------------------------------


def _retention(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise AdminError(400, "retention must be {retentionTimeInMinutes, retentionSizeInMB}")
    unknown = set(value) - {"retentionTimeInMinutes", "retentionSizeInMB"}
    if unknown:
        raise AdminError(400, f"unknown retention fields: {sorted(unknown)}")
    return {
        "retentionTimeInMinutes": int_in(
            value.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", minimum=-1
        ),
        "retentionSizeInMB": int_in(
            value.get("retentionSizeInMB", 0), "retentionSizeInMB", minimum=-1
        ),
    }


def _ttl(value: Any) -> int:
    return int_in(value, "message TTL (seconds)", minimum=0)


def _dedup(value: Any) -> bool:
    if not isinstance(value, bool):
        raise AdminError(400, f"deduplication must be true or false, got {value!r}")
    return value


def _auto_creation(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("allowAutoTopicCreation"), bool):
        raise AdminError(400, "autoTopicCreation needs a boolean allowAutoTopicCreation")
    kind = value.get("topicType", "non-partitioned")
    if kind not in ("partitioned", "non-partitioned"):
        raise AdminError(400, f"topicType must be partitioned or non-partitioned, got {kind!r}")
    out: dict[str, Any] = {
        "allowAutoTopicCreation": value["allowAutoTopicCreation"],
        "topicType": kind,
    }
    if kind == "partitioned":
        out["defaultNumPartitions"] = int_in(
            value.get("defaultNumPartitions"), "defaultNumPartitions", minimum=1
        )
    return out


# policy path -> (field in the Policies record, validator, default when unset)
POLICIES: dict[str, tuple[str, Callable[[Any], Any], Any]] = {
    "retention": ("retention_policies", _retention, None),
    "messageTTL": ("message_ttl_in_seconds", _ttl, None),
    "deduplication": ("deduplicationEnabled", _dedup, None),
    "autoTopicCreation": ("autoTopicCreationOverride", _auto_creation, None),
    "offloadThreshold": (
        "offload_threshold",
        lambda v: int_in(v, "offloadThreshold", minimum=-1),
        -1,
    ),
    "offloadDeletionLagMs": (
        "offload_deletion_lag_ms",
        lambda v: int_in(v, "offloadDeletionLagMs", minimum=0),
        None,
    ),
}


def _policy_handlers(path: str) -> tuple[Any, Any, Any]:
    field, validate, default = POLICIES[path]

    async def get(request: web.Request) -> web.Response:
        tenant, ns = _names(request)
        found = await read_json(service(request).store, keys.namespace(tenant, ns))
        if found is None:
            raise not_found(f"namespace {tenant}/{ns}")
        return web.json_response(found[0].get(field, default))

    async def set_(request: web.Request) -> web.Response:
        tenant, ns = _names(request)
        value = validate(await body(request))
        svc = service(request)
        await update_json(
            svc.store,
            keys.namespace(tenant, ns),
            lambda d: d.__setitem__(field, value),
            what=f"namespace {tenant}/{ns}",
        )
        svc.policies.invalidate()
        return web.Response(status=204)

    async def remove(request: web.Request) -> web.Response:
        tenant, ns = _names(request)
        svc = service(request)
        await update_json(
            svc.store,
            keys.namespace(tenant, ns),
            lambda d: d.pop(field, None),
            what=f"namespace {tenant}/{ns}",
        )
        svc.policies.invalidate()
        return web.Response(status=204)

    return get, set_, remove


# --- backlog quotas (a map by quota type) ------------------------------------------------------

QUOTA_TYPES = ("destination_storage", "message_age")
QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def _quota_type(request: web.Request) -> str:
    kind = request.query.get("backlogQuotaType", "destination_storage")
    if kind not in QUOTA_TYPES:
        raise AdminError(400, f"backlogQuotaType must be one of {QUOTA_TYPES}, got {kind!r}")
    return kind


def _quota(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AdminError(400, "a backlog quota must be {limitSize, limitTime, policy}")
    unknown = set(value) - {"limit", "limitSize", "limitTime", "policy"}
    if unknown:
        raise AdminError(400, f"unknown backlog quota fields: {sorted(unknown)}")
    policy = value.get("policy", "producer_request_hold")
    if policy not in QUOTA_POLICIES:
        raise AdminError(400, f"policy must be one of {QUOTA_POLICIES}, got {policy!r}")
    size = value.get("limitSize", value.get("limit", -1))
    return {
        "limitSize": int_in(size, "limitSize", minimum=-1),
        "limitTime": int_in(value.get("limitTime", -1), "limitTime", minimum=-1),
        "policy": policy,
    }


async def get_backlog_quotas(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    found = await read_json(service(request).store, keys.namespace(tenant, ns))
    if found is None:
        raise not_found(f"namespace {tenant}/{ns}")
    return web.json_response(found[0].get("backlog_quota_map") or {})


async def set_backlog_quota(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    kind = _quota_type(request)
    quota = _quota(await body(request))
    svc = service(request)
    await update_json(
        svc.store,
        keys.namespace(tenant, ns),
        lambda d: d.setdefault("backlog_quota_map", {}).__setitem__(kind, quota),
        what=f"namespace {tenant}/{ns}",
    )
    svc.policies.invalidate()
    return web.Response(status=204)


async def remove_backlog_quota(request: web.Request) -> web.Response:
    tenant, ns = _names(request)
    kind = _quota_type(request)
    svc = service(request)
    await update_json(
        svc.store,
        keys.namespace(tenant, ns),
        lambda d: (d.get("backlog_quota_map") or {}).pop(kind, None),
        what=f"namespace {tenant}/{ns}",
    )
    svc.policies.invalidate()
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/namespaces/{tenant}", list_namespaces)
    base = "/admin/v2/namespaces/{tenant}/{namespace}"
    router.add_put(base, create_namespace)
    router.add_get(base, get_policies)
    router.add_delete(base, delete_namespace)
    router.add_get(f"{base}/backlogQuotaMap", get_backlog_quotas)
    router.add_post(f"{base}/backlogQuota", set_backlog_quota)
    router.add_delete(f"{base}/backlogQuota", remove_backlog_quota)
    for path in POLICIES:
        get, set_, remove = _policy_handlers(path)
        router.add_get(f"{base}/{path}", get)
        router.add_post(f"{base}/{path}", set_)
        router.add_put(f"{base}/{path}", set_)
        router.add_delete(f"{base}/{path}", remove)
