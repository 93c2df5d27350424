"""PulsarCluster reconciliation: ordered, idempotent steps, status written once at the end.

metadata -> bookies (apply, scale one step, roll one pod) -> brokers -> services ->
monitoring -> offload check -> status. Each step applies its objects with server-side
apply (so re-running is a no-op and drift is reverted) and returns a condition; ``Ready``
summarises them, and ``observedGeneration`` is written together with them in one patch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar_operator import conditions, rollout
from magnetar_operator.builders import bookie, broker, common, etcd, monitoring
from magnetar_operator.builders.common import Owner
from magnetar_operator.conditions import Condition
from magnetar_operator.kube import ApiError, Kube
from magnetar_operator.spec import ClusterSpec, Json

EventFn = Callable[[str, str, str], None]  # (type: Normal|Warning, reason, message)
Step = Callable[["Run"], Awaitable[Condition | None]]


@dataclass
class Run:
    """One reconcile pass over one PulsarCluster."""

    kube: Kube
    body: Mapping[str, Any]
    event: EventFn
    owner: Owner = field(init=False)
    spec: ClusterSpec = field(init=False)
    status: Json = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.owner = Owner.from_body(self.body)
        self.spec = ClusterSpec.parse(self.body.get("spec"))

    async def apply_all(self, objects: list[Json]) -> None:
        for obj in objects:
            await self.kube.apply(obj)


def _counts(obj: Mapping[str, Any] | None, desired: int, *, ready_key: str) -> Json:
    st = (obj or {}).get("status") or {}
    ready = int(st.get(ready_key, 0) or 0)
    return {
        "replicas": desired,
        "readyReplicas": ready,
        "updatedReplicas": int(st.get("updatedReplicas", 0) or 0),
        "summary": f"{ready}/{desired}",
    }


async def step_metadata(run: Run) -> Condition:
    if not run.spec.metadata.managed:
        run.status["metadata"] = {"summary": "external"}
        return Condition(conditions.METADATA_READY, True, "External", "external etcd endpoints")
    await run.apply_all(etcd.build(run.owner, run.spec))
    sts = await run.kube.get(
        "apps/v1", "StatefulSet", run.owner.namespace, run.owner.name_of("etcd")
    )
    counts = _counts(sts, run.spec.metadata.etcd_replicas, ready_key="readyReplicas")
    run.status["metadata"] = counts
    ok = counts["readyReplicas"] >= counts["replicas"]
    return Condition(
        conditions.METADATA_READY,
        ok,
        "AllReady" if ok else "PodsNotReady",
        f"etcd {counts['summary']} ready",
    )


async def step_bookies(run: Run) -> Condition:
    owner, spec, kube = run.owner, run.spec, run.kube
    name, ns = owner.name_of(bookie.COMPONENT), owner.namespace
    current = await kube.get("apps/v1", "StatefulSet", ns, name)
    pods = [
        rollout.PodState.from_pod(p)
        for p in await kube.list(
            "v1", "Pod", ns, labels=common.selector_labels(owner, bookie.COMPONENT)
        )
    ]
    desired = spec.bookies.replicas
    replicas = desired
    if current is not None:
        have = int(current["spec"].get("replicas", desired))
        all_ready = len(pods) >= have and all(p.ready and not p.terminating for p in pods)
        replicas = rollout.scale_step(current=have, desired=desired, all_ready=all_ready)
        if replicas != have:
            run.event(
                "Normal", "ScalingBookies", f"bookies {have} -> {replicas} (target {desired})"
            )
    await run.apply_all(bookie.build(owner, spec, replicas=replicas))
    if spec.bookies.rack.enabled:
        await kube.apply(bookie.rack_map(owner, await _racks(run, pods)))
    sts = await kube.get("apps/v1", "StatefulSet", ns, name)
    action = rollout.plan(sts, pods)
    if isinstance(action, rollout.DeletePod):
        run.event(
            "Normal",
            "RollingBookie",
            f"restarting {action.name} ({action.from_revision} -> {action.to_revision})",
        )
        await kube.delete("v1", "Pod", ns, action.name)
    counts = _counts(sts, desired, ready_key="readyReplicas")
    counts["updatedReplicas"] = sum(
        1 for p in pods if p.revision == ((sts or {}).get("status") or {}).get("updateRevision")
    )
    run.status["bookies"] = counts
    if replicas != desired:
        return Condition(conditions.BOOKIES_READY, False, "Scaling", f"{replicas} -> {desired}")
    if isinstance(action, rollout.DeletePod):
        return Condition(
            conditions.BOOKIES_READY, False, "RollingUpdate", f"restarting {action.name}"
        )
    if isinstance(action, rollout.Wait):
        return Condition(conditions.BOOKIES_READY, False, "Progressing", action.reason)
    return Condition(
        conditions.BOOKIES_READY, True, "AllReady", f"bookies {counts['summary']} ready"
    )


async def _racks(run: Run, pods: list[rollout.PodState]) -> dict[str, str]:
    """Bookie pod -> its node's topology label value (pods not yet scheduled are skipped)."""
    key = run.spec.bookies.rack.topology_key
    racks: dict[str, str] = {}
    for p in pods:
        pod = await run.kube.get("v1", "Pod", run.owner.namespace, p.name)
        node_name = ((pod or {}).get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        node = await run.kube.get("v1", "Node", None, node_name)
        rack = ((node or {}).get("metadata") or {}).get("labels", {}).get(key)
        if rack:
            racks[p.name] = rack
    return racks


async def step_brokers(run: Run) -> Condition:
    await run.apply_all(broker.build_workload(run.owner, run.spec))
    dep = await run.kube.get(
        "apps/v1", "Deployment", run.owner.namespace, run.owner.name_of(broker.COMPONENT)
    )
    counts = _counts(dep, run.spec.brokers.replicas, ready_key="availableReplicas")
    run.status["brokers"] = counts
    st = (dep or {}).get("status") or {}
    ok = (
        counts["readyReplicas"] >= counts["replicas"]
        and counts["updatedReplicas"] >= counts["replicas"]
        and int(st.get("replicas", 0) or 0) == counts["replicas"]
    )
    return Condition(
        conditions.BROKERS_READY,
        ok,
        "AllReady" if ok else "PodsNotReady",
        f"brokers {counts['summary']} available",
    )


async def step_services(run: Run) -> None:
    await run.apply_all(broker.build_services(run.owner, run.spec))
    run.status["serviceUrl"] = broker.service_url(run.owner, run.spec)
    run.status["adminUrl"] = broker.admin_url(run.owner, run.spec)


async def step_monitoring(run: Run) -> None:
    try:
        await run.apply_all(monitoring.build(run.owner, run.spec))
    except ApiError as e:
        if not e.not_found:
            raise
        run.event(
            "Warning",
            "MonitoringUnavailable",
            f"{run.spec.monitoring.kind} CRD not installed (Prometheus Operator missing)",
        )


async def step_offload(run: Run) -> Condition:
    off = run.spec.offload
    if not off.enabled:
        return Condition(conditions.OFFLOAD_READY, True, "Disabled", "offload is not enabled")
    secret = await run.kube.get("v1", "Secret", run.owner.namespace, off.credentials_secret or "")
    if secret is None:
        return Condition(
            conditions.OFFLOAD_READY,
            False,
            "CredentialsSecretMissing",
            f"Secret {off.credentials_secret!r} not found",
        )
    return Condition(conditions.OFFLOAD_READY, True, "Configured", f"bucket {off.bucket}")


STEPS: tuple[Step, ...] = (
    step_metadata,
    step_bookies,
    step_brokers,
    step_services,
    step_monitoring,
    step_offload,
)


def unsupported(spec: ClusterSpec) -> list[str]:
    """What the spec asks for that Magnetar does not implement (empty: nothing).

    Such a cluster is refused as a whole rather than built without the feature: a cluster
    reported Ready without the TLS, authentication or offload it asked for would be a lie."""
    out = []
    if spec.tls.enabled:
        out.append("spec.tls.enabled: TLS is not implemented")
    if spec.auth.enabled:
        out.append("spec.auth.enabled: authentication and authorization are not implemented")
    if spec.offload.enabled:
        out.append("spec.offload.enabled: offload to S3 cannot be configured by the operator yet")
    return out


async def reconcile(kube: Kube, body: Mapping[str, Any], *, event: EventFn, now: str) -> Json:
    """Run every step in order, then write the status (conditions + observedGeneration) once.

    A spec asking for what is not implemented builds nothing: phase ``Unsupported``, an
    ``Unsupported`` condition naming the fields, ``Ready`` False with reason Unsupported."""
    run = Run(kube=kube, body=body, event=event)
    generation = int(body["metadata"].get("generation", 0))
    old = (body.get("status") or {}).get("conditions")
    refused = unsupported(run.spec)
    if refused:
        message = "; ".join(refused)
        event("Warning", "Unsupported", message)
        status: Json = {
            "phase": "Unsupported",
            "conditions": conditions.merge(
                old,
                [
                    Condition(conditions.READY, False, "Unsupported", message),
                    Condition(conditions.UNSUPPORTED, True, "NotImplemented", message),
                ],
                now=now,
                generation=generation,
            ),
            "observedGeneration": generation,
        }
    else:
        results = [c for step in STEPS if (c := await step(run)) is not None]
        ready = conditions.summary(results)
        status = {
            **run.status,
            "phase": "Ready" if ready.ok else "Reconciling",
            "conditions": conditions.merge(old, [ready, *results], now=now, generation=generation),
            "observedGeneration": generation,
        }
    await kube.patch_status(
        common.API_VERSION, "PulsarCluster", run.owner.namespace, run.owner.name, status
    )
    return status


async def cleanup(kube: Kube, body: Mapping[str, Any], *, event: EventFn) -> None:
    """On deletion: the workloads go by garbage collection (owner references); PVCs are
    deleted here when ``persistence.reclaimPolicy`` is Delete, and kept otherwise."""
    owner = Owner.from_body(body)
    spec = ClusterSpec.parse(body.get("spec"))
    if spec.reclaim_policy != "Delete":
        event("Normal", "RetainingVolumes", "persistence.reclaimPolicy=Retain: PVCs are kept")
        return
    for component in (bookie.COMPONENT, etcd.COMPONENT):
        await kube.delete_collection(
            "v1",
            "PersistentVolumeClaim",
            owner.namespace,
            labels=common.selector_labels(owner, component),
        )
    event("Normal", "DeletedVolumes", "persistence.reclaimPolicy=Delete: PVCs deleted")
