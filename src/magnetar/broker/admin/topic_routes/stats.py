"""Routes: a topic's stats, internal stats and backlog, a partitioned topic's summed stats."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import stats as topic_stats


async def stats(request: web.Request) -> web.Response:
    """Topic stats (rates, counters, storage, publishers, subscriptions)."""
    topic = await paths.topic(request)
    return web.json_response(await topic_stats.stats(paths.scope(request), topic))


async def internal_stats(request: web.Request) -> web.Response:
    """The managed ledger's internal stats (ledgers, cursors)."""
    topic = await paths.topic(request)
    return web.json_response(await topic_stats.internal_stats(paths.scope(request), topic))


async def backlog(request: web.Request) -> web.Response:
    """The topic's stored entries and each durable cursor's backlog, replicators' included
    (Pulsar's PersistentOfflineTopicStats)."""
    topic = await paths.topic(request)
    return web.json_response(await topic_stats.backlog(paths.scope(request), topic))


async def partitioned_stats(request: web.Request) -> web.Response:
    """Stats summed over the partitions (``perPartition=true``: each partition's too)."""
    topic = await paths.topic(request)
    per_partition = validation.query_flag(request.query.get("perPartition", "true"), "perPartition")
    found = await topic_stats.partitioned_stats(
        paths.scope(request), topic, per_partition=per_partition
    )
    return web.json_response(found)


async def partitioned_internal_stats(request: web.Request) -> web.Response:
    """Each partition's internal stats (Pulsar's PartitionedTopicInternalStats)."""
    topic = await paths.topic(request)
    found = await topic_stats.partitioned_internal_stats(paths.scope(request), topic)
    return web.json_response(found)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{paths.TOPIC}/stats", stats)
    router.add_get(f"{paths.TOPIC}/internalStats", internal_stats)
    router.add_get(f"{paths.TOPIC}/backlog", backlog)
    router.add_get(f"{paths.TOPIC}/partitioned-stats", partitioned_stats)
    router.add_get(f"{paths.TOPIC}/partitioned-internalStats", partitioned_internal_stats)
