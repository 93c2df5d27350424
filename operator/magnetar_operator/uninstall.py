"""``python -m magnetar_operator.uninstall``: what the chart's pre-delete hook Job runs.

Why it exists: ``helm uninstall`` deletes the operator Deployment and the release's
PulsarCluster together, and the PulsarCluster (like the Tenants and Topics that point at it)
carries the operator's finalizer -- with the operator gone nobody removes it, so the custom
resource, its pods and its claims stay and the uninstall waits out its timeout. The hook runs
before Helm deletes anything, while the operator still runs, and deletes, in order:

1. the Functions, Topics and Tenants of the namespace whose ``clusterRef.name`` names one of
   the release's PulsarClusters (Functions first: their instances use the cluster; Topics
   before Tenants: a Tenant's deletion waits for its topics), and waits for them to be gone
   (a Function's objects go with it, owner references; the operator removes Topics and
   Tenants in Pulsar, then its finalizer). Not the Functions the brokers wrote (``functions
   create`` on a broker, label ``app.kubernetes.io/managed-by: magnetar-broker``): while
   the brokers run they write them again within seconds;
2. the release's PulsarClusters, and waits for them to be gone (the operator's finalizer
   deletes their claims when ``persistence.reclaimPolicy`` is Delete), then for their
   broker pods to be gone, then deletes the Functions the brokers wrote;
3. with reclaimPolicy Delete, waits until the clusters' claims are gone too, so nothing is
   left when ``helm uninstall`` returns; with Retain the claims stay, as documented.

Everything has one deadline (``--timeout``); past it the command exits 1 naming what is left,
and Helm reports the hook as failed (the release stays, a second ``helm uninstall`` retries).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from magnetar_operator.builders import bookie, broker, etcd
from magnetar_operator.builders import function as fn
from magnetar_operator.builders.common import API_VERSION, Owner, selector_labels
from magnetar_operator.kube import Kube
from magnetar_operator.spec import ClusterSpec, Json

POLL_SECONDS = 2.0
BROKERS_WRITER = "magnetar-broker"
"""``app.kubernetes.io/managed-by`` of the Functions the brokers write (``functions create``
with ``magnetarFunctionsRuntime=kubernetes``)."""


def log(message: str) -> None:
    print(f"[magnetar-uninstall] {message}", flush=True)


def written_by_brokers(obj: Json) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get("app.kubernetes.io/managed-by") == BROKERS_WRITER)


def references(obj: Json, clusters: Sequence[str]) -> bool:
    """Whether a Tenant/Topic is managed through one of ``clusters`` (by name)."""
    ref = (obj.get("spec") or {}).get("clusterRef") or {}
    return bool(ref.get("name")) and str(ref["name"]) in clusters


async def _wait_gone(
    what: str, remaining: Callable[[], Awaitable[list[str]]], deadline: float
) -> list[str]:
    """Poll until ``remaining()`` is empty or the deadline passes; returns what is left."""
    left = await remaining()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(POLL_SECONDS)
        left = await remaining()
    if left:
        log(f"{what}: still there at the deadline: {', '.join(left)}")
    else:
        log(f"{what}: gone")
    return left


async def run(kube: Kube, namespace: str, clusters: Sequence[str], seconds: float) -> list[str]:
    """Delete the release's resources in order; return what is left at the deadline."""
    deadline = time.monotonic() + seconds
    present: list[Json] = []
    for name in clusters:
        pc = await kube.get(API_VERSION, "PulsarCluster", namespace, name)
        if pc is None:
            log(f"PulsarCluster {namespace}/{name}: not found, nothing to delete")
        else:
            present.append(pc)

    def api_version(kind: str) -> str:
        return fn.API_VERSION if kind == fn.KIND else API_VERSION

    async def dependents(kind: str, *, brokers_wrote: bool = False) -> list[str]:
        items = await kube.list(api_version(kind), kind, namespace, labels={})
        return [
            f"{kind}/{o['metadata']['name']}"
            for o in items
            if references(o, clusters) and written_by_brokers(o) == brokers_wrote
        ]

    async def delete(kind: str, why: str, *, brokers_wrote: bool = False) -> list[str]:
        found = functools.partial(dependents, kind, brokers_wrote=brokers_wrote)
        for ref in await found():
            log(f"deleting {ref} ({why})")
            await kube.delete(api_version(kind), kind, namespace, ref.split("/", 1)[1])
        return await _wait_gone(f"{kind}s", found, deadline)

    left: list[str] = []
    for kind in (fn.KIND, "Topic", "Tenant"):
        left += await delete(kind, f"managed through {', '.join(clusters)}")

    for pc in present:
        log(f"deleting PulsarCluster {namespace}/{pc['metadata']['name']}")
        await kube.delete(API_VERSION, "PulsarCluster", namespace, pc["metadata"]["name"])

    async def clusters_left() -> list[str]:
        names = [str(pc["metadata"]["name"]) for pc in present]
        found = [await kube.get(API_VERSION, "PulsarCluster", namespace, n) for n in names]
        return [f"PulsarCluster/{n}" for n, obj in zip(names, found, strict=True) if obj]

    left += await _wait_gone("PulsarClusters", clusters_left, deadline)

    async def brokers_left() -> list[str]:
        out: list[str] = []
        for pc in present:
            labels = selector_labels(Owner.from_body(pc), broker.COMPONENT)
            items = await kube.list("v1", "Pod", namespace, labels=labels)
            out += [f"Pod/{p['metadata']['name']}" for p in items]
        return out

    left += await _wait_gone("broker pods", brokers_left, deadline)
    left += await delete(fn.KIND, "written by the brokers, now gone", brokers_wrote=True)

    deleting = [
        pc for pc in present if ClusterSpec.parse(pc.get("spec")).reclaim_policy == "Delete"
    ]

    async def claims_left() -> list[str]:
        out: list[str] = []
        for pc in deleting:
            owner = Owner.from_body(pc)
            for component in (bookie.COMPONENT, etcd.COMPONENT):
                labels = selector_labels(owner, component)
                items = await kube.list("v1", "PersistentVolumeClaim", namespace, labels=labels)
                out += [f"PersistentVolumeClaim/{c['metadata']['name']}" for c in items]
        return out

    if deleting:
        left += await _wait_gone("claims (reclaimPolicy Delete)", claims_left, deadline)
    for pc in present:
        if pc not in deleting:
            log(f"PulsarCluster {pc['metadata']['name']}: reclaimPolicy Retain, claims kept")
    return left


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m magnetar_operator.uninstall",
        description="Delete a Helm release's PulsarClusters (and the Tenants/Topics managed "
        "through them) while the operator still runs, and wait until they are gone.",
    )
    ap.add_argument("--namespace", required=True, help="the release's namespace")
    ap.add_argument(
        "--cluster", action="append", required=True, help="a PulsarCluster of the release"
    )
    ap.add_argument("--timeout", type=float, default=240, help="seconds for everything")
    args = ap.parse_args(argv)

    async def go() -> list[str]:
        kube = Kube.from_environment()
        try:
            return await run(kube, args.namespace, args.cluster, args.timeout)
        finally:
            await kube.close()

    left = asyncio.run(go())
    if left:
        log(
            f"gave up after {args.timeout:.0f}s; left: {', '.join(left)} (is the operator "
            "running? `kubectl describe` them for the finalizer's events)"
        )
        sys.exit(1)
    log("done: nothing of the release's clusters is left")


if __name__ == "__main__":
    main()
