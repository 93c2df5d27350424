"""Clusters and brokers: ``/admin/v2/clusters[/{cluster}]`` and ``/admin/v2/brokers/{cluster}``.

Read-only here: the cluster record is written by the broker at first start (``ClusterData``:
serviceUrl, brokerServiceUrl ...), brokers register themselves under their session lease.
(The health check, ``/admin/v2/brokers/health``, is the broker core's.)
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.common import check_name, not_found, read_json, service
from magnetar.metadata import keys


async def list_clusters(request: web.Request) -> web.Response:
    """The names of the clusters."""
    names = await service(request).store.children(keys.CLUSTERS)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


async def get_cluster(request: web.Request) -> web.Response:
    """A cluster's ClusterData (service URLs)."""
    name = check_name(request.match_info["cluster"], "cluster")
    found = await read_json(service(request).store, keys.cluster(name))
    if found is None:
        raise not_found(f"cluster {name}")
    return web.json_response({k: v for k, v in found[0].items() if k != "format"})


async def list_brokers(request: web.Request) -> web.Response:
    """The live brokers of a cluster (their ids, host:port)."""
    svc = service(request)
    name = check_name(request.match_info["cluster"], "cluster")
    if await svc.store.get(keys.cluster(name)) is None:
        raise not_found(f"cluster {name}")
    names = await svc.store.children(keys.BROKERS)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/clusters", list_clusters)
    router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
    router.add_get("/admin/v2/brokers/{cluster}", list_brokers)
