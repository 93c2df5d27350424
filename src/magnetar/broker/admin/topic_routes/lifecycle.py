"""Routes: list, create, delete, unload and terminate topics.

Lists: a namespace's topics of one domain (non-persistent ones asked of the owners of the
namespace's bundles), one bundle's topics as its owner serves them (Pulsar's
``GET .../{bundle}``), and ``/namespaces/{tenant}/{namespace}/topics`` (``mode``:
PERSISTENT, NON_PERSISTENT or ALL).
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.common import AdminError, service
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.service import ALL_DOMAINS
from magnetar.broker.topic_ops import topics
from magnetar.managed_ledger.api import Position
from magnetar.wire.topics import TopicDomain


def _domains(request: web.Request) -> tuple[TopicDomain, ...]:
    """``mode`` of a namespace topic listing: PERSISTENT (default), NON_PERSISTENT, ALL."""
    mode = request.query.get("mode", "PERSISTENT").upper()
    if mode == "ALL":
        return ALL_DOMAINS
    try:
        return (TopicDomain(mode.lower().replace("_", "-")),)
    except ValueError:
        raise AdminError(
            400, f"mode must be PERSISTENT, NON_PERSISTENT or ALL, not {request.query['mode']!r}"
        ) from None


async def list_topics(request: web.Request) -> web.Response:
    """The topics of a namespace (partitions listed one by one); non-persistent ones as the
    brokers owning the namespace's bundles serve them."""
    m = request.match_info
    kind = paths.domain(request)
    found = await topics.list_topics(
        paths.scope(request), domain=kind, tenant=m["tenant"], ns=m["namespace"]
    )
    return web.json_response(found)


async def list_bundle_topics(request: web.Request) -> web.Response:
    """The topics of one namespace bundle that its owner serves now (307 to the owner)."""
    m = request.match_info
    kind = paths.domain(request)
    found = await topics.list_bundle_topics(
        paths.scope(request),
        domain=kind,
        tenant=m["tenant"],
        ns=m["namespace"],
        bundle_range=m["bundle"],
    )
    return web.json_response(found)


async def list_namespace_topics(request: web.Request) -> web.Response:
    """The topics of a namespace (``/namespaces/{tenant}/{namespace}/topics``)."""
    m = request.match_info
    tenant, ns = m["tenant"], m["namespace"]
    svc = service(request)
    return web.json_response(
        await topics.namespace_topics(svc, tenant=tenant, ns=ns, domains=_domains(request))
    )


async def create_topic(request: web.Request) -> web.Response:
    """Create a non-partitioned topic (409 when it, or a partitioned one, exists)."""
    await topics.create(paths.scope(request), await paths.topic(request))
    return paths.no_content()


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a non-partitioned topic (412 with producers or consumers unless force)."""
    topic = await paths.topic(request)
    await topics.delete(paths.scope(request), topic, force=paths.force(request))
    return paths.no_content()


async def unload(request: web.Request) -> web.Response:
    """Unload the topic: clients reconnect through lookup."""
    await topics.unload(paths.scope(request), await paths.topic(request))
    return paths.no_content()


def _message_id(last: Position) -> dict[str, int]:
    """Pulsar's MessageIdImpl JSON of a terminated topic's last message (no partition or
    batch index, as Pulsar answers)."""
    return {
        "ledgerId": last.ledger_id,
        "entryId": last.entry_id,
        "partitionIndex": -1,
        "batchSize": 0,
        "batchIndex": -1,
    }


async def terminate(request: web.Request) -> web.Response:
    """Terminate the topic: no more messages; answers the last message id."""
    last = await topics.terminate(paths.scope(request), await paths.topic(request))
    return web.json_response(_message_id(last))


async def terminate_partitions(request: web.Request) -> web.Response:
    """Terminate each partition of a partitioned topic: the last message id of each, by
    partition index."""
    found = await topics.terminate_partitions(paths.scope(request), await paths.topic(request))
    return web.json_response({str(i): _message_id(last) for i, last in found.items()})


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/namespaces/{tenant}/{namespace}/topics", list_namespace_topics)
    router.add_get(paths.BASE, list_topics)
    router.add_put(paths.TOPIC, create_topic)
    router.add_delete(paths.TOPIC, delete_topic)
    router.add_get(paths.BASE + "/{bundle:0x[0-9a-fA-F]+_0x[0-9a-fA-F]+}", list_bundle_topics)
    router.add_put(f"{paths.TOPIC}/unload", unload)
    router.add_post(f"{paths.TOPIC}/terminate", terminate)
    router.add_post(f"{paths.TOPIC}/terminate/partitions", terminate_partitions)
