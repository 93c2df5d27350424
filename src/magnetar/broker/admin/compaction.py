"""Topic compaction through the admin API: ``/admin/v2/persistent/.../{topic}/compaction``.

* ``PUT .../compaction`` starts a compaction (Pulsar's ``triggerCompaction``): 204, 409 while
  one is running; on a partitioned topic, one per partition (each on its owner).
* ``GET .../compaction`` answers Pulsar's ``LongRunningProcessStatus``: ``status``
  (``NOT_RUN``, ``RUNNING``, ``SUCCESS``, ``ERROR``) and ``lastError``.
* ``internalStats`` gains ``compactedLedger`` (:func:`internal_stats`).

The compaction itself is :mod:`magnetar.broker.compaction`. This module only needs, from the
topic routes, how to find a path's topic name and its loaded persistent topic (passed to
:func:`add_routes`, so the topic routes stay the one place that resolves topics).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from magnetar.broker.admin import remote
from magnetar.broker.admin.common import AdminError, service
from magnetar.broker.compaction.service import AlreadyRunningError
from magnetar.broker.topic import PersistentTopic
from magnetar.wire.topics import TopicName

TopicNameOf = Callable[[web.Request], Awaitable[TopicName]]
StoredTopicOf = Callable[[web.Request, str], Awaitable[PersistentTopic]]

_OPERATION = "Compaction of"


def internal_stats(loaded: PersistentTopic) -> dict[str, Any]:
    """The managed ledger's internal stats with Pulsar's ``compactedLedger``."""
    ml: Any = loaded.managed_ledger
    out: dict[str, Any] = ml.internal_stats()
    if loaded.compaction is not None:
        out["compactedLedger"] = loaded.compaction.view.internal_stats()
    return out


def _compaction(loaded: PersistentTopic) -> Any:
    if loaded.compaction is None:
        raise AdminError(405, f"{loaded.full_name}: compaction is not available")
    return loaded.compaction


def add_routes(
    router: web.UrlDispatcher, topic_path: str, *, topic_name: TopicNameOf, stored: StoredTopicOf
) -> None:
    """``PUT``/``GET {topic_path}/compaction``."""

    async def trigger(request: web.Request) -> web.Response:
        """Start a compaction of the topic (409 while one runs; a partitioned topic: each
        partition)."""
        topic = await topic_name(request)
        if not topic.is_persistent:
            raise AdminError(405, f"{_OPERATION} a non-persistent topic is not allowed")
        svc = service(request)
        partitions = None if topic.is_partition else await svc.policies.partitions(topic)
        if partitions:
            for i in range(partitions):
                await _trigger_partition(svc, topic.partition(i))
            return web.Response(status=204)
        loaded = await stored(request, _OPERATION)
        try:
            _compaction(loaded).trigger()
        except AlreadyRunningError:
            raise AdminError(409, "Compaction already in progress") from None
        return web.Response(status=204)

    async def status(request: web.Request) -> web.Response:
        """The last compaction's status (LongRunningProcessStatus)."""
        loaded = await stored(request, _OPERATION)
        return web.json_response(_compaction(loaded).status_json())

    router.add_put(f"{topic_path}/compaction", trigger)
    router.add_get(f"{topic_path}/compaction", status)


async def _trigger_partition(svc: Any, part: TopicName) -> None:
    owner = await remote.owner_elsewhere(svc, part)
    if owner is not None:
        answer_status, answer = await remote.call(
            owner, "PUT", f"{remote.topic_path(part)}/compaction"
        )
        remote.raise_for(answer_status, answer, ok=(204, 409))
        return
    loaded = await svc.get_topic(part, create=False)
    if isinstance(loaded, PersistentTopic) and loaded.compaction is not None:
        try:
            loaded.compaction.trigger()
        except AlreadyRunningError:
            pass  # that partition is being compacted already
