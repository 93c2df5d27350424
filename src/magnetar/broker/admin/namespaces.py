"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/policy]]``.

Policies live in the namespace record in Pulsar's ``Policies`` JSON shape, changed by
compare-and-set on the record's version; every change invalidates the broker's policy cache
(and the policy enforcer applies retention and TTL to open topics within seconds).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from magnetar.broker import policies
from magnetar.broker.admin import clusters, remote, validation
from magnetar.broker.admin.common import (
    AdminError,
    Handler,
    accepts,
    check_name,
    not_found,
    parsed,
    policies_changed,
    read_json,
    service,
    update_json,
)
from magnetar.broker.admin.topic_routes.paths import scope as topic_scope
from magnetar.broker.service import ALL_DOMAINS, BrokerService
from magnetar.broker.topic_ops import topics as topic_ops
from magnetar.broker.topic_ops.scope import Scope
from magnetar.metadata import api, keys

BASE = "/admin/v2/namespaces/{tenant}/{namespace}"


def _names(request: web.Request) -> tuple[str, str]:
    return (
        check_name(request.match_info["tenant"], "tenant"),
        check_name(request.match_info["namespace"], "namespace"),
    )


async def _policies(request: web.Request) -> dict[str, Any]:
    tenant, ns = _names(request)
    found = await read_json(service(request).store, keys.namespace(tenant, ns))
    if found is None:
        raise not_found(f"namespace {tenant}/{ns}")
    return found[0]


async def _change(request: web.Request, change: Callable[[dict[str, Any]], Any]) -> None:
    tenant, ns = _names(request)
    svc = service(request)
    await update_json(
        svc.store, keys.namespace(tenant, ns), change, what=f"namespace {tenant}/{ns}"
    )
    policies_changed(request)


# --- namespaces ---------------------------------------------------------------------------------


async def list_namespaces(request: web.Request) -> web.Response:
    """The namespaces of a tenant, as ``tenant/namespace``."""
    tenant = check_name(request.match_info["tenant"], "tenant")
    store = service(request).store
    if await store.get(keys.tenant(tenant)) is None:
        raise not_found(f"tenant {tenant}")
    names = await store.children(keys.tenant(tenant))
    return web.json_response(sorted(f"{tenant}/{keys.unsegment(n)}" for n in names))


@accepts(validation.NAMESPACE_POLICIES, required=False)
async def create_namespace(request: web.Request) -> web.Response:
    """Create a namespace, optionally with policies (409 when it exists)."""
    tenant, ns = _names(request)
    svc = service(request)
    tenant_info = await read_json(svc.store, keys.tenant(tenant))
    if tenant_info is None:
        raise not_found(f"tenant {tenant}")
    given: dict[str, Any] = parsed(request) or {}
    record = policies.default_namespace_policies(svc.config.default_bundles)
    record.update(given)
    allowed = list(tenant_info[0].get("allowedClusters", []))
    if record["replication_clusters"]:
        for cluster in record["replication_clusters"]:
            clusters.check_allowed(cluster, allowed, tenant)
        record["replication_clusters"] = sorted(set(record["replication_clusters"]))
    else:  # as Pulsar: the local cluster when none is given
        record["replication_clusters"] = [svc.config.cluster_name]
    try:
        await svc.store.put(
            keys.namespace(tenant, ns), json.dumps(record).encode(), expected_version=api.NOT_EXISTS
        )
    except api.BadVersionError:
        raise AdminError(409, f"namespace {tenant}/{ns} already exists") from None
    policies_changed(request)
    return web.Response(status=204)


async def get_replication(request: web.Request) -> web.Response:
    """The namespace's replication clusters."""
    return web.json_response(list((await _policies(request)).get("replication_clusters") or []))


@accepts(validation.REPLICATION_CLUSTERS)
async def set_replication(request: web.Request) -> web.Response:
    """Set the clusters the namespace is replicated to (Pulsar's checks and answers: 412 for
    an empty list or ``global``, 403 for a cluster that does not exist or that the tenant
    does not allow); its topics start or stop their replicators within seconds."""
    tenant, _ = _names(request)
    await _policies(request)  # 404 first, as Pulsar
    chosen = await clusters.check_replication_clusters(
        service(request).store, tenant, parsed(request)
    )
    await _change(request, lambda d: d.__setitem__("replication_clusters", chosen))
    return web.Response(status=200)


async def get_policies(request: web.Request) -> web.Response:
    """A namespace's Policies."""
    return web.json_response({k: v for k, v in (await _policies(request)).items() if k != "format"})


async def get_bundles(request: web.Request) -> web.Response:
    """A namespace's bundle layout (``namespaces bundles``): Pulsar's BundlesData, the
    boundaries as ``0x%08x`` strings and their count."""
    bundles = (await _policies(request)).get("bundles") or {}
    boundaries = list(bundles.get("boundaries") or [])
    return web.json_response({"boundaries": boundaries, "numBundles": max(len(boundaries) - 1, 0)})


_BUNDLE: Final = "{bundle:0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}}"


async def unload_namespace(request: web.Request) -> web.Response:
    """Unload every bundle of the namespace, each by its owner (super-user, as Pulsar)."""
    tenant, ns = _names(request)
    await topic_ops.unload_namespace(topic_scope(request), tenant=tenant, ns=ns)
    return web.Response(status=204)


async def unload_bundle(request: web.Request) -> web.Response:
    """Unload one bundle: 307 to its owner; its owner closes the bundle's topics and gives up
    the ownership (clients reconnect through lookup)."""
    tenant, ns = _names(request)
    await topic_ops.unload_bundle(
        topic_scope(request), tenant=tenant, ns=ns, bundle_range=request.match_info["bundle"]
    )
    return web.Response(status=204)


async def split_bundle(request: web.Request) -> web.Response:
    """Split one bundle in two on its owner (``?splitAlgorithmName=`` range_equally_divide,
    the default, or topic_count_equally_divide; ``?unload=true`` places the halves again)."""
    tenant, ns = _names(request)
    await topic_ops.split_bundle(
        topic_scope(request),
        tenant=tenant,
        ns=ns,
        bundle_range=request.match_info["bundle"],
        algorithm=request.query.get("splitAlgorithmName") or topic_ops.SPLIT_ALGORITHMS[0],
        unload=validation.query_flag(request.query.get("unload"), "unload"),
    )
    return web.Response(status=204)


FORCE_NOT_ALLOWED = "Broker doesn't allow forced deletion of namespaces"
"""Pulsar's 405 reason when forceDeleteNamespaceAllowed is false."""


async def delete_namespace(request: web.Request) -> web.Response:
    """Delete a namespace (409 while it has topics, unless ``force=true`` and the broker
    allows forced deletion; 405 when it does not)."""
    tenant, ns = _names(request)
    force = validation.query_flag(request.query.get("force"), "force")
    svc = service(request)
    if force and not svc.config.force_delete_namespace_allowed:
        raise AdminError(405, FORCE_NOT_ALLOWED)
    if await svc.store.get(keys.namespace(tenant, ns)) is None:
        raise not_found(f"namespace {tenant}/{ns}")
    topics = await svc.topics_of_namespace(tenant, ns, domains=ALL_DOMAINS)
    if topics and not force:
        raise AdminError(409, f"namespace {tenant}/{ns} is not empty: {len(topics)} topic(s)")
    await delete_namespace_and_topics(svc, remote.peers(request), tenant, ns)
    return web.Response(status=204)


async def delete_namespace_and_topics(
    svc: BrokerService, peers: remote.HttpPeers, tenant: str, ns: str
) -> None:
    """Unload and delete every topic of the namespace, then its partitioned-topic,
    topic-policy and resource-quota records, then the namespace record."""
    for name in await svc.topics_of_namespace(tenant, ns, domains=ALL_DOMAINS):
        await topic_ops.delete_on_owner(Scope(svc, peers), svc.parse_topic(name), force=True)
    for root in (keys.PARTITIONED_TOPICS, keys.TOPIC_POLICIES, keys.RESOURCE_QUOTAS):
        await svc.store.delete_prefix(f"{root}/{keys.segment(tenant)}/{keys.segment(ns)}")
    try:
        await svc.store.delete(keys.namespace(tenant, ns))
    except api.NotFoundError:
        pass  # deleted concurrently: the outcome asked for
    svc.policies.invalidate()


# --- single policies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Policy:
    """One per-policy endpoint: its path, the Policies field it sets, the body it takes,
    what GET answers when it is unset, and the methods that set it (Pulsar uses POST for
    most, PUT for the offload ones; both are served)."""

    path: str
    field: str
    body: validation.Body[Any]
    default: Any = None


POLICIES = (
    Policy("retention", "retention_policies", validation.RETENTION),
    Policy("messageTTL", "message_ttl_in_seconds", validation.MESSAGE_TTL),
    Policy("deduplication", "deduplicationEnabled", validation.DEDUPLICATION),
    Policy("compactionThreshold", "compaction_threshold", validation.COMPACTION_THRESHOLD),
    Policy(
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
        validation.SCHEMA_STRATEGY,
        "UNDEFINED",
    ),
    Policy("schemaValidationEnforced", "schema_validation_enforced", validation.BOOLEAN, False),
    Policy("isAllowAutoUpdateSchema", "is_allow_auto_update_schema", validation.BOOLEAN, True),
    Policy("autoTopicCreation", "autoTopicCreationOverride", validation.AUTO_TOPIC_CREATION),
    Policy("offloadThreshold", "offload_threshold", validation.OFFLOAD_THRESHOLD, -1),
    Policy(
        "offloadThresholdInSeconds",
        "offload_threshold_in_seconds",
        validation.OFFLOAD_THRESHOLD_SECONDS,
        -1,
    ),
    Policy("offloadDeletionLagMs", "offload_deletion_lag_ms", validation.OFFLOAD_DELETION_LAG),
    Policy("maxProducersPerTopic", "max_producers_per_topic", validation.MAX_PRODUCERS),
    Policy("maxConsumersPerTopic", "max_consumers_per_topic", validation.MAX_CONSUMERS),
)


def _policy_handlers(policy: Policy) -> tuple[Handler, Handler, Handler]:
    async def get(request: web.Request) -> web.Response:
        return web.json_response((await _policies(request)).get(policy.field, policy.default))

    @accepts(policy.body)
    async def set_(request: web.Request) -> web.Response:
        value = parsed(request)
        await _change(request, lambda d: d.__setitem__(policy.field, value))
        return web.Response(status=204)

    async def remove(request: web.Request) -> web.Response:
        await _change(request, lambda d: d.pop(policy.field, None))
        return web.Response(status=204)

    name = policy.path
    get.__name__, get.__doc__ = f"get_{name}", f"The namespace's {name} (null when unset)."
    set_.__name__, set_.__doc__ = f"set_{name}", f"Set the namespace's {name}."
    remove.__name__, remove.__doc__ = f"remove_{name}", f"Remove the namespace's {name}."
    return get, set_, remove


# --- backlog quotas (a map by quota type) -------------------------------------------------------


async def get_backlog_quotas(request: web.Request) -> web.Response:
    """The namespace's backlog quotas by type."""
    return web.json_response((await _policies(request)).get("backlog_quota_map") or {})


@accepts(validation.BACKLOG_QUOTA)
async def set_backlog_quota(request: web.Request) -> web.Response:
    """Set a backlog quota (``backlogQuotaType``: destination_storage or message_age)."""
    kind = validation.quota_type(request.query.get("backlogQuotaType"))
    quota = parsed(request)
    await _change(request, lambda d: d.setdefault("backlog_quota_map", {}).__setitem__(kind, quota))
    return web.Response(status=204)


async def remove_backlog_quota(request: web.Request) -> web.Response:
    """Remove a backlog quota (``backlogQuotaType``, destination_storage by default)."""
    kind = validation.quota_type(request.query.get("backlogQuotaType"))
    await _change(request, lambda d: (d.get("backlog_quota_map") or {}).pop(kind, None))
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/namespaces/{tenant}", list_namespaces)
    router.add_put(BASE, create_namespace)
    router.add_get(BASE, get_policies)
    router.add_delete(BASE, delete_namespace)
    router.add_get(f"{BASE}/backlogQuotaMap", get_backlog_quotas)
    router.add_get(f"{BASE}/bundles", get_bundles)
    router.add_get(f"{BASE}/replication", get_replication)
    router.add_post(f"{BASE}/replication", set_replication)
    router.add_put(f"{BASE}/unload", unload_namespace)
    router.add_put(f"{BASE}/{_BUNDLE}/unload", unload_bundle)
    router.add_put(f"{BASE}/{_BUNDLE}/split", split_bundle)
    router.add_post(f"{BASE}/backlogQuota", set_backlog_quota)
    router.add_delete(f"{BASE}/backlogQuota", remove_backlog_quota)
    for policy in POLICIES:
        get, set_, remove = _policy_handlers(policy)
        router.add_get(f"{BASE}/{policy.path}", get)
        router.add_post(f"{BASE}/{policy.path}", set_)
        router.add_put(f"{BASE}/{policy.path}", set_)
        router.add_delete(f"{BASE}/{policy.path}", remove)
