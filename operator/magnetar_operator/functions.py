"""Function reconciliation: the resource's objects applied, what it no longer wants removed,
its status written back (``builders.function`` builds and reads; this module talks to the
API server).

Where the instances connect comes from ``spec.clusterRef`` (a PulsarCluster in the same
namespace: its brokers' service URLs, its broker image, and with ``spec.tls`` / ``spec.auth``
its CA certificate and the brokers' token) or ``spec.pulsar.pulsarConfig`` (Function Mesh's
ConfigMap with ``webServiceURL`` and ``brokerServiceURL``; the instances' image is then
``spec.image`` or the operator's default broker image). Deletion deletes nothing itself:
every object carries an owner reference to the Function, and Kubernetes' garbage collector
removes them with it (kopf's finalizer, which the status timer needs, only makes the
deletion wait for the operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar_operator import spec as spec_mod
from magnetar_operator.builders import broker, security
from magnetar_operator.builders import function as fn
from magnetar_operator.builders.common import API_VERSION, Owner
from magnetar_operator.kube import Kube
from magnetar_operator.spec import ClusterSpec, Json


class NotReady(Exception):
    """What the Function needs does not exist yet (its PulsarCluster or ConfigMap): retried."""


async def target(kube: Kube, body: Mapping[str, Any]) -> fn.Target:
    namespace = str(body["metadata"]["namespace"])
    spec = body.get("spec") or {}
    ref = spec.get("clusterRef")
    if ref:
        pc = await kube.get(API_VERSION, "PulsarCluster", namespace, str(ref["name"]))
        if pc is None or pc["metadata"].get("deletionTimestamp"):
            raise NotReady(f"PulsarCluster {namespace}/{ref['name']} not found")
        cluster = ClusterSpec.parse(pc.get("spec"))
        owner = Owner.from_body(pc)
        return fn.Target(
            service_url=broker.service_url(owner, cluster),
            web_service_url=str(
                (pc.get("status") or {}).get("adminUrl") or broker.admin_url(owner, cluster)
            ),
            image=cluster.images.broker,
            pull_policy=cluster.images.pull_policy,
            pull_secrets=cluster.images.pull_secrets,
            ca_secret=(
                (security.tls_secret_name(owner, broker.COMPONENT), security.CA_CERT)
                if cluster.tls.enabled
                else None
            ),
            token_secret=(
                (security.tokens_secret_name(owner), security.BROKER_TOKEN)
                if cluster.auth.enabled
                else None
            ),
        )
    config_name = str((spec.get("pulsar") or {}).get("pulsarConfig") or "")
    if not config_name:
        raise fn.FunctionSpecError("set spec.clusterRef or spec.pulsar.pulsarConfig")
    cm = await kube.get("v1", "ConfigMap", namespace, config_name)
    if cm is None:
        raise NotReady(f"ConfigMap {namespace}/{config_name} (spec.pulsar.pulsarConfig) not found")
    data = cm.get("data") or {}
    missing = [k for k in ("webServiceURL", "brokerServiceURL") if not data.get(k)]
    if missing:
        raise fn.FunctionSpecError(
            f"ConfigMap {namespace}/{config_name} (spec.pulsar.pulsarConfig) lacks "
            + ", ".join(missing)
        )
    return fn.Target(
        service_url=str(data["brokerServiceURL"]),
        web_service_url=str(data["webServiceURL"]),
        image=spec_mod.Images.parse({}, version=spec_mod.DEFAULT_VERSION).broker,
    )


async def reconcile(kube: Kube, body: Mapping[str, Any]) -> tuple[Json, str, str]:
    """Apply the Function's objects, remove its HPA when it has no ``maxReplicas``; return
    (status fields, Ready reason, message) read back from the StatefulSet and its pods."""
    where = await target(kube, body)
    name = fn.Name.of(body)
    for obj in fn.build(body, where):
        await kube.apply(obj)
    if fn.hpa(body) is None:
        await kube.delete(
            "autoscaling/v2", "HorizontalPodAutoscaler", name.namespace, name.workload
        )
    sts = await kube.get("apps/v1", "StatefulSet", name.namespace, name.workload)
    pods = await kube.list("v1", "Pod", name.namespace, labels=fn.selector_labels(name))
    return fn.status(body, sts, pods)
