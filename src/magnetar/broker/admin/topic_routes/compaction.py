"""Routes: ``PUT .../{topic}/compaction`` starts a compaction (204; 409 while one runs; a
partitioned topic: each partition on its owner) and ``GET .../{topic}/compaction`` answers
Pulsar's LongRunningProcessStatus. Non-persistent topics: 405."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import compaction


async def trigger(request: web.Request) -> web.Response:
    """Start a compaction of the topic (409 while one runs)."""
    await compaction.trigger(paths.scope(request), await paths.topic(request))
    return paths.no_content()


async def status(request: web.Request) -> web.Response:
    """The last compaction's status (LongRunningProcessStatus)."""
    topic = await paths.topic(request)
    return web.json_response(await compaction.status(paths.scope(request), topic))


def register(router: web.UrlDispatcher) -> None:
    router.add_put(f"{paths.TOPIC}/compaction", trigger)
    router.add_get(f"{paths.TOPIC}/compaction", status)
