"""Routes: topic-level policies, pulsar-admin's ``topicPolicies`` resource (messageTTL,
retention, deduplicationEnabled, compactionThreshold, maxProducers, maxConsumers,
offloadPolicies) that override the namespace's; each has GET (null: unset), POST (set) and
DELETE (unset). A partitioned topic's are set on its base name and apply to every
partition; the broker applies them where it applies the namespace's
(``broker/enforcement.py``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import Handler, decode_json
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import policies

TOPIC_POLICIES: dict[str, tuple[str, validation.Body[Any]]] = {
    "messageTTL": ("message_ttl_in_seconds", validation.MESSAGE_TTL),
    "retention": ("retention_policies", validation.RETENTION),
    "deduplicationEnabled": ("deduplicationEnabled", validation.DEDUPLICATION),
    "compactionThreshold": ("compaction_threshold", validation.COMPACTION_THRESHOLD),
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
                return spec.parse(validation.path_integer(raw, path, minimum=0))

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


def register(router: web.UrlDispatcher) -> None:
    for path in TOPIC_POLICIES:
        get, set_, remove = _handlers(path)
        router.add_get(f"{paths.TOPIC}/{path}", get)
        router.add_post(f"{paths.TOPIC}/{path}", set_)
        router.add_delete(f"{paths.TOPIC}/{path}", remove)
