"""Tenant and Topic reconciliation against the Pulsar admin API (desired state in, calls out).

Each function reads what exists, changes only what differs and returns the list of
changes it made (for events); calling it again with the same spec changes nothing, which
is what makes the periodic re-apply a cheap drift corrector. Existing tenants, namespaces
and topics are adopted, not recreated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar_operator.pulsar import Admin, AdminError, TopicName
from magnetar_operator.spec import Json


class Waiting(Exception):
    """What the resource needs does not exist yet (its namespace, before the Tenant made
    it): not an error, retried soon (``backoff``)."""


def backoff(retry: int, *, first: float, cap: float) -> float:
    """Seconds before retry number ``retry`` (0-based) of something that usually arrives
    within seconds (a namespace its Tenant is creating, a cluster turning Ready): ``first``,
    doubling, at most ``cap``."""
    return float(min(cap, first * 2 ** min(retry, 30)))


def tenant_info(spec: Mapping[str, Any], *, default_cluster: str) -> Json:
    return {
        "adminRoles": sorted(str(r) for r in spec.get("adminRoles") or ()),
        "allowedClusters": sorted(str(c) for c in spec.get("allowedClusters") or [default_cluster]),
    }


def _same_info(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(sorted(current.get(k) or ()) == wanted[k] for k in ("adminRoles", "allowedClusters"))


async def reconcile_tenant(
    admin: Admin, spec: Mapping[str, Any], *, default_cluster: str, managed: list[str]
) -> tuple[list[str], list[str]]:
    """Tenant, its namespaces and their policies. ``managed``: namespaces this resource
    created before (removed from the spec -> deleted). Returns (changes, managed now)."""
    tenant = str(spec["name"])
    changes: list[str] = []
    info = tenant_info(spec, default_cluster=default_cluster)
    current = await admin.get_tenant(tenant)
    if current is None:
        await admin.create_tenant(tenant, info)
        changes.append(f"created tenant {tenant}")
    elif not _same_info(current, info):
        await admin.update_tenant(tenant, info)
        changes.append(f"updated tenant {tenant}")
    existing = set(await admin.list_namespaces(tenant))
    wanted = {str(ns["name"]): ns for ns in spec.get("namespaces") or ()}
    for name, ns in wanted.items():
        if name not in existing:
            await admin.create_namespace(tenant, name)
            changes.append(f"created namespace {tenant}/{name}")
        changes += await _apply_policies(admin, tenant, name, ns.get("policies") or {})
    for name in sorted(set(managed) - set(wanted)):
        if name in existing:
            await admin.delete_namespace(tenant, name)
            changes.append(f"deleted namespace {tenant}/{name}")
    return changes, sorted(wanted)


async def _apply_policies(
    admin: Admin, tenant: str, namespace: str, wanted: Mapping[str, Any]
) -> list[str]:
    if not wanted:
        return []
    have = await admin.get_policies(tenant, namespace)
    changes: list[str] = []
    where = f"{tenant}/{namespace}"
    if "retentionTimeMinutes" in wanted or "retentionSizeMB" in wanted:
        minutes = int(wanted.get("retentionTimeMinutes", 0))
        size = int(wanted.get("retentionSizeMB", 0))
        cur = have.get("retention_policies") or {}
        if (cur.get("retentionTimeInMinutes"), cur.get("retentionSizeInMB")) != (minutes, size):
            await admin.set_retention(tenant, namespace, minutes=minutes, size_mb=size)
            changes.append(f"set retention on {where}")
    if "messageTTLSeconds" in wanted:
        ttl = int(wanted["messageTTLSeconds"])
        if have.get("message_ttl_in_seconds") != ttl:
            await admin.set_message_ttl(tenant, namespace, ttl)
            changes.append(f"set message TTL on {where}")
    if "deduplicationEnabled" in wanted:
        dedup = bool(wanted["deduplicationEnabled"])
        if have.get("deduplicationEnabled") != dedup:
            await admin.set_deduplication(tenant, namespace, dedup)
            changes.append(f"set deduplication on {where}")
    if "backlogQuota" in wanted:
        q = wanted["backlogQuota"]
        quota = {
            "limitSize": int(q.get("limitBytes", -1)),
            "limitTime": int(q.get("limitTimeSeconds", -1)),
            "policy": str(q.get("policy", "producer_request_hold")),
        }
        cur = (have.get("backlog_quota_map") or {}).get("destination_storage") or {}
        if any(cur.get(k) != v for k, v in quota.items()):
            await admin.set_backlog_quota(tenant, namespace, quota)
            changes.append(f"set backlog quota on {where}")
    if "offloadThresholdBytes" in wanted:
        threshold = int(wanted["offloadThresholdBytes"])
        if have.get("offload_threshold") != threshold:
            await admin.set_offload_threshold(tenant, namespace, threshold)
            changes.append(f"set offload threshold on {where}")
    return changes


async def delete_tenant(admin: Admin, spec: Mapping[str, Any], *, managed: list[str]) -> None:
    """Delete the namespaces this resource manages, then the tenant, never forced: what the
    resource did not create (topics, other namespaces) makes the admin API answer 409
    (``AdminError``) and stays, so the caller reports it and retries."""
    tenant = str(spec["name"])
    for name in managed or [str(ns["name"]) for ns in spec.get("namespaces") or ()]:
        await admin.delete_namespace(tenant, name)
    await admin.delete_tenant(tenant)


def topic_name(spec: Mapping[str, Any]) -> TopicName:
    return TopicName(
        persistent=bool(spec.get("persistent", True)),
        tenant=str(spec["tenant"]),
        namespace=str(spec["namespace"]),
        name=str(spec["name"]),
    )


class TopicConflict(Exception):
    """The topic exists in a shape the spec cannot reach (e.g. more partitions)."""


TOPIC_POLICIES = {
    "messageTTLSeconds": "messageTTL",
    "deduplicationEnabled": "deduplicationEnabled",
}


async def reconcile_topic(admin: Admin, spec: Mapping[str, Any]) -> list[str]:
    """Raises ``Waiting`` while the topic's namespace does not exist (a Tenant applied in
    the same command creates it a moment later)."""
    topic = topic_name(spec)
    partitions = int(spec.get("partitions", 0))
    changes: list[str] = []
    if topic.namespace not in await admin.list_namespaces(topic.tenant):
        raise Waiting(
            f"waiting for namespace {topic.tenant}/{topic.namespace}: it does not exist yet "
            "(a Tenant resource or the admin API creates it)"
        )
    if partitions == 0:
        if str(topic) not in await admin.list_topics(topic):
            await admin.create_topic(topic)
            changes.append(f"created topic {topic}")
    elif str(topic) not in await admin.list_partitioned_topics(topic):
        await admin.create_partitioned_topic(topic, partitions)
        changes.append(f"created topic {topic} with {partitions} partitions")
    else:
        have = await admin.get_partitions(topic)
        if have < partitions:
            await admin.update_partitions(topic, partitions)
            changes.append(f"partitions of {topic}: {have} -> {partitions}")
        elif have > partitions:
            raise TopicConflict(f"{topic} has {have} partitions, more than the spec's {partitions}")
    policies = spec.get("policies") or {}
    for key, policy in TOPIC_POLICIES.items():
        if key in policies and await admin.get_topic_policy(topic, policy) != policies[key]:
            await admin.set_topic_policy(topic, policy, policies[key])
            changes.append(f"set {policy} on {topic}")
    if "retentionTimeMinutes" in policies or "retentionSizeMB" in policies:
        wanted = {
            "retentionTimeInMinutes": int(policies.get("retentionTimeMinutes", 0)),
            "retentionSizeInMB": int(policies.get("retentionSizeMB", 0)),
        }
        if (await admin.get_topic_policy(topic, "retention") or {}) != wanted:
            await admin.set_topic_policy(topic, "retention", wanted)
            changes.append(f"set retention on {topic}")
    return changes


async def delete_topic(admin: Admin, spec: Mapping[str, Any]) -> None:
    try:
        await admin.delete_topic(topic_name(spec), partitioned=int(spec.get("partitions", 0)) > 0)
    except AdminError as e:
        # The namespace or tenant may already be gone (404 handled by the client).
        if e.status != 412:
            raise
