"""Routes: topic-level policies, pulsar-admin's ``topicPolicies`` resource (messageTTL,
retention, deduplicationEnabled, compactionThreshold, maxProducers, maxConsumers,
offloadPolicies, replication) that override the namespace's; each has GET (null: unset),
POST (set) and DELETE (unset). A partitioned topic's are set on its base name and apply to
every partition; the broker applies them where it applies the namespace's
(``broker/enforcement.py``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

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


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{paths.TOPIC}/replication", get_topic_replication)
    router.add_post(f"{paths.TOPIC}/replication", set_topic_replication)
    router.add_delete(f"{paths.TOPIC}/replication", remove_topic_replication)
    for path in TOPIC_POLICIES:
        get, set_, remove = _handlers(path)
        router.add_get(f"{paths.TOPIC}/{path}", get)
        router.add_post(f"{paths.TOPIC}/{path}", set_)
        router.add_delete(f"{paths.TOPIC}/{path}", remove)
