"""Clusters and brokers: ``/admin/v2/clusters[/{cluster}]`` and ``/admin/v2/brokers[/{cluster}]``.

A cluster record (Pulsar's ``ClusterData``: serviceUrl, serviceUrlTls, brokerServiceUrl,
brokerServiceUrlTls) names how to reach a cluster of the instance: the broker writes its own
at first start, an administrator creates the others' (``clusters create``) so that tenants
may allow them and namespaces replicate to them (docs/geo-replication.md: each cluster's
metadata store holds the records of every cluster it replicates with). Create is
create-only (409 when it exists), update a compare-and-set that replaces the URLs.
Brokers register themselves under their session lease.
(The health check, ``/admin/v2/brokers/health``, is the broker core's.)
"""

from __future__ import annotations

import json

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import (
    AdminError,
    accepts,
    check_name,
    not_found,
    parsed,
    read_json,
    redirect,
    service,
    update_json,
)
from magnetar.metadata import api, keys


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


def _cluster_name(request: web.Request) -> str:
    return check_name(request.match_info["cluster"], "cluster")


@accepts(validation.CLUSTER_DATA)
async def create_cluster(request: web.Request) -> web.Response:
    """Create a cluster record (409 when it exists; 200 with no body, as Pulsar)."""
    name = _cluster_name(request)
    data = parsed(request)
    try:
        await service(request).store.put(
            keys.cluster(name),
            json.dumps({"format": 1, **data}).encode(),
            expected_version=api.NOT_EXISTS,
        )
    except api.BadVersionError:
        raise AdminError(409, "Cluster already exists") from None
    return web.Response(status=200)


@accepts(validation.CLUSTER_DATA)
async def update_cluster(request: web.Request) -> web.Response:
    """Replace a cluster's service URLs (404 when it does not exist)."""
    name = _cluster_name(request)
    data = parsed(request)

    def change(record: dict[str, object]) -> None:
        for field in validation.CLUSTER_URL_FIELDS:
            record.pop(field, None)
        record.update(data)

    await update_json(service(request).store, keys.cluster(name), change, what=f"cluster {name}")
    return web.Response(status=200)


async def delete_cluster(request: web.Request) -> web.Response:
    """Delete a cluster record. As in Pulsar, tenants allowing it and namespaces replicated
    to it keep its name (their replicators to it stop: no URL to reach it); unlike Pulsar,
    the broker's own cluster record cannot be deleted (412)."""
    name = _cluster_name(request)
    svc = service(request)
    record = await svc.store.get(keys.cluster(name))
    if record is None:
        raise not_found(f"cluster {name}")
    if name == svc.config.cluster_name:
        raise AdminError(412, f"Cluster {name} is the local cluster of this broker")
    try:
        await svc.store.delete(keys.cluster(name), expected_version=record.version)
    except (api.BadVersionError, api.NotFoundError):
        raise AdminError(409, f"cluster {name} changed while being deleted; retry") from None
    return web.Response(status=204)


def check_allowed(cluster: str, allowed: list[str], tenant: str) -> None:
    """403 unless the tenant allows ``cluster`` (Pulsar's reason)."""
    if cluster not in allowed:
        raise AdminError(
            403,
            f"Cluster [{cluster}] is not in the list of allowed clusters list"
            f" for tenant [{tenant}]",
        )


async def check_replication_clusters(
    store: api.MetadataStore, tenant: str, clusters: list[str]
) -> list[str]:
    """A namespace's or topic's new replication clusters, checked as Pulsar checks them (412
    for an empty list or ``global``, 403 for a cluster without a record or one the tenant
    does not allow); stored once each, sorted."""
    if not clusters:
        raise AdminError(412, "ClusterIds should not be null or empty")
    if "global" in clusters:
        raise AdminError(412, "Cannot specify global in the list of replication clusters")
    known = {keys.unsegment(n) for n in await store.children(keys.CLUSTERS)}
    tenant_info = await read_json(store, keys.tenant(tenant))
    allowed = list(tenant_info[0].get("allowedClusters", [])) if tenant_info else []
    for cluster in clusters:
        if cluster not in known:
            raise AdminError(403, f"Invalid cluster id: {cluster}")
        check_allowed(cluster, allowed, tenant)
    return sorted(set(clusters))


async def list_brokers(request: web.Request) -> web.Response:
    """The live brokers of a cluster (their ids, host:port); another cluster's are that
    cluster's to answer: 307 to its serviceUrl (serviceUrlTls when this request came over
    TLS), as Pulsar's validateClusterOwnership."""
    svc = service(request)
    name = check_name(request.match_info["cluster"], "cluster")
    found = await read_json(svc.store, keys.cluster(name))
    if found is None:
        raise not_found(f"cluster {name}")
    if name != svc.config.cluster_name:
        data = found[0]
        url = data.get("serviceUrlTls") if request.secure else data.get("serviceUrl")
        url = url or data.get("serviceUrl") or data.get("serviceUrlTls")
        if not url:
            raise AdminError(412, f"cluster {name} has no service URL to redirect to")
        raise redirect(request, str(url))
    names = await svc.store.children(keys.BROKERS)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


async def list_local_brokers(request: web.Request) -> web.Response:
    """The live brokers of this broker's cluster (``GET /admin/v2/brokers``, the Java admin
    client's ``getActiveBrokers()``)."""
    names = await service(request).store.children(keys.BROKERS)
    return web.json_response(sorted(keys.unsegment(n) for n in names))


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/clusters", list_clusters)
    router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
    router.add_put("/admin/v2/clusters/{cluster}", create_cluster)
    router.add_post("/admin/v2/clusters/{cluster}", update_cluster)
    router.add_delete("/admin/v2/clusters/{cluster}", delete_cluster)
    router.add_get("/admin/v2/brokers", list_local_brokers)
    router.add_get("/admin/v2/brokers/{cluster}", list_brokers)
