"""Routes: topic-level policies, pulsar-admin's ``topicPolicies`` resource (messageTTL,
retention, deduplicationEnabled, compactionThreshold, maxProducers, maxConsumers,
offloadPolicies, replication) that override the namespace's; each has GET (null: unset),
POST (set) and DELETE (unset); backlog quotas by type (``backlogQuotaMap``, ``backlogQuota``
with ``backlogQuotaType``). A partitioned topic's are set on its base name and apply to
every partition; the broker applies them where it applies the namespace's
(``broker/enforcement.py``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker import backlog_quota
from magnetar.broker import policies as broker_policies
from magnetar.broker.admin import clusters, validation
from magnetar.broker.admin.common import AdminError, Handler, decode_json, service
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import policies

TOPIC_POLICIES: dict[str, tuple[str, validation.Body[Any]]] = {
    "messageTTL": ("message_ttl_in_seconds", validation.TOPIC_MESSAGE_TTL),
    "retention": ("retention_policies", validation.RETENTION),
    "deduplicationEnabled": ("deduplicationEnabled", validation.DEDUPLICATION),
    "compactionThreshold": ("compaction_threshold", validation.TOPIC_COMPACTION_THRESHOLD),
    "maxProducers": ("max_producers_per_topic", validation.MAX_PRODUCERS),
    "maxConsumers": ("max_consumers_per_topic", validation.MAX_CONSUMERS),
    "offloadPolicies": ("offloadPolicies", validation.OFFLOAD_POLICIES),
}
"""Topic policy path -> (its field, overriding the namespace's Policies field; its body)."""


def _handlers(path: str) -> tuple[Handler, Handler, Handler]:
    field, spec = TOPIC_POLICIES[path]

    async def get(request: web.Request) -> web.Response:
        topic = await paths.topic(request)
        return web.json_response(await policies.get(paths.scope(request), topic, field))

    async def set_(request: web.Request) -> web.Response:
        topic = await paths.topic(request)
        if path == "messageTTL" and "messageTTL" in request.query:  # pulsar-admin sends this

            def check(raw: Any) -> Any:
                try:
                    value = int(raw)
                except ValueError:
                    raise AdminError(400, f"{path} must be an integer, got {raw!r}") from None
                return spec.parse(value)

            raw: Any = request.query["messageTTL"]
        else:

            def check(raw: Any) -> Any:
                return spec.parse(decode_json(raw))

            raw = await request.read()
        await policies.set_(paths.scope(request), topic, field, raw, check=check)
        return paths.no_content()

    async def remove(request: web.Request) -> web.Response:
        topic = await paths.topic(request)
        await policies.remove(paths.scope(request), topic, field)
        return paths.no_content()

    get.__name__, get.__doc__ = f"get_topic_{path}", f"The topic's own {path} (null: unset)."
    set_.__name__, set_.__doc__ = f"set_topic_{path}", f"Set the topic's own {path}."
    set_.request_body = spec  # type: ignore[attr-defined]
    set_.body_required = path != "messageTTL"  # type: ignore[attr-defined]
    remove.__name__, remove.__doc__ = f"remove_topic_{path}", f"Remove the topic's own {path}."
    return get, set_, remove


async def get_topic_replication(request: web.Request) -> web.Response:
    """The topic's own replication clusters (null: unset, the namespace's apply)."""
    topic = await paths.topic(request)
    found = await policies.get(paths.scope(request), topic, "replication_clusters")
    return web.json_response(found)


async def set_topic_replication(request: web.Request) -> web.Response:
    """Set the clusters the topic is replicated to, over the namespace's (checked as the
    namespace's are: docs/geo-replication.md)."""
    topic = await paths.topic(request)
    given = validation.replication_clusters(decode_json(await request.read()))
    chosen = await clusters.check_replication_clusters(service(request).store, topic.tenant, given)
    await policies.set_(paths.scope(request), topic, "replication_clusters", chosen)
    return paths.no_content()


async def remove_topic_replication(request: web.Request) -> web.Response:
    """Unset the topic's own replication clusters (the namespace's apply again)."""
    topic = await paths.topic(request)
    await policies.remove(paths.scope(request), topic, "replication_clusters")
    return paths.no_content()


set_topic_replication.request_body = validation.REPLICATION_CLUSTERS  # type: ignore[attr-defined]
set_topic_replication.body_required = True  # type: ignore[attr-defined]


async def get_topic_backlog_quotas(request: web.Request) -> web.Response:
    """The topic's own backlog quotas by type (``{}``: none, the namespace's apply); with
    ``applied=true`` the quotas in force, type by type (topic, namespace, broker default)."""
    topic = await paths.topic(request)
    own = await policies.get(paths.scope(request), topic, backlog_quota.TOPIC_FIELD) or {}
    if request.query.get("applied", "false").lower() != "true":
        return web.json_response(own)
    svc = service(request)
    effective = await broker_policies.effective_policies(svc.store, svc.policies, topic)
    return web.json_response(backlog_quota.applied(effective, svc.config))


async def set_topic_backlog_quota(request: web.Request) -> web.Response:
    """Set the topic's own backlog quota of ``backlogQuotaType`` (destination_storage by
    default), over the namespace's of that type."""
    topic = await paths.topic(request)
    kind = validation.quota_type(request.query.get("backlogQuotaType"))
    quota = validation.backlog_quota(decode_json(await request.read()))
    await policies.update(
        paths.scope(request),
        topic,
        backlog_quota.TOPIC_FIELD,
        lambda have: {**(have or {}), kind: quota},
    )
    return paths.no_content()


async def remove_topic_backlog_quota(request: web.Request) -> web.Response:
    """Remove the topic's own backlog quota of ``backlogQuotaType`` (the namespace's, or the
    broker's default, applies again)."""
    topic = await paths.topic(request)
    kind = validation.quota_type(request.query.get("backlogQuotaType"))
    await policies.update(
        paths.scope(request),
        topic,
        backlog_quota.TOPIC_FIELD,
        lambda have: {k: v for k, v in (have or {}).items() if k != kind} or None,
    )
    return paths.no_content()


set_topic_backlog_quota.request_body = validation.BACKLOG_QUOTA  # type: ignore[attr-defined]
set_topic_backlog_quota.body_required = True  # type: ignore[attr-defined]


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{paths.TOPIC}/replication", get_topic_replication)
    router.add_post(f"{paths.TOPIC}/replication", set_topic_replication)
    router.add_delete(f"{paths.TOPIC}/replication", remove_topic_replication)
    router.add_get(f"{paths.TOPIC}/backlogQuotaMap", get_topic_backlog_quotas)
    router.add_post(f"{paths.TOPIC}/backlogQuota", set_topic_backlog_quota)
    router.add_delete(f"{paths.TOPIC}/backlogQuota", remove_topic_backlog_quota)
    for path in TOPIC_POLICIES:
        get, set_, remove = _handlers(path)
        router.add_get(f"{paths.TOPIC}/{path}", get)
        router.add_post(f"{paths.TOPIC}/{path}", set_)
        router.add_delete(f"{paths.TOPIC}/{path}", remove)
