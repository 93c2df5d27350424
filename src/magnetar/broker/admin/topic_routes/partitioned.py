"""Routes: partitioned topics (list, create, grow, read the partition count, delete)."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import accepts, parsed
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import partitioned


async def list_partitioned(request: web.Request) -> web.Response:
    """The partitioned topics of a namespace."""
    m = request.match_info
    kind = paths.domain(request)
    found = await partitioned.list_partitioned(
        paths.scope(request), domain=kind, tenant=m["tenant"], ns=m["namespace"]
    )
    return web.json_response(found)


@accepts(validation.PARTITIONS)
async def create_partitioned(request: web.Request) -> web.Response:
    """Create a partitioned topic with the given number of partitions."""
    topic = await paths.topic(request)
    await partitioned.create(paths.scope(request), topic, parsed(request))
    return paths.no_content()


async def get_partitions(request: web.Request) -> web.Response:
    """Partitioned-topic metadata: ``{"partitions": n}``, 0 when not partitioned."""
    topic = await paths.topic(request)
    return web.json_response(
        {"partitions": await partitioned.partition_count(paths.scope(request), topic)}
    )


@accepts(validation.PARTITIONS)
async def update_partitions(request: web.Request) -> web.Response:
    """Grow a partitioned topic (shrinking is refused)."""
    topic = await paths.topic(request)
    await partitioned.update(paths.scope(request), topic, parsed(request))
    return paths.no_content()


async def delete_partitioned(request: web.Request) -> web.Response:
    """Delete a partitioned topic and its partitions."""
    topic = await paths.topic(request)
    await partitioned.delete(paths.scope(request), topic, force=paths.force(request))
    return paths.no_content()


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{paths.BASE}/partitioned", list_partitioned)
    p = f"{paths.TOPIC}/partitions"
    router.add_put(p, create_partitioned)
    router.add_post(p, update_partitions)
    router.add_get(p, get_partitions)
    router.add_delete(p, delete_partitioned)
