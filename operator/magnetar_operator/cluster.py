"""PulsarCluster reconciliation: ordered, idempotent steps, status written once at the end.

certificates -> tokens -> metadata -> bookies (apply, scale one step, roll one pod) ->
brokers -> proxy -> services -> monitoring -> offload check -> status. A change of the
brokers' (or the proxy's) pod template waits until the bookies are settled (every bookie
on the current revision and Ready): an image or version change rolls bookies first, one
at a time, then brokers. Each step applies its objects with server-side apply (so
re-running is a no-op and drift is reverted) and returns a condition; ``Ready`` summarises
them, and ``observedGeneration`` is written together with them in one patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar_operator import conditions, credentials, offload_probe, rollout, tokens
from magnetar_operator.builders import bookie, broker, common, etcd, monitoring, proxy
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
    bookies_settled: bool = True
    """False while bookies scale or roll: broker and proxy template changes wait."""
    verification: tokens.Verification = tokens.NO_VERIFICATION
    """With ``spec.auth``: the signing Secret's key brokers verify tokens with."""

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


def _secrets_target(run: Run) -> credentials.Target:
    return credentials.Target(run.kube, run.owner, run.spec, run.event)


async def step_tls(run: Run) -> Condition | None:
    """``spec.tls``: the certificates every component mounts (``credentials``)."""
    return await credentials.step_tls(_secrets_target(run))


async def step_auth(run: Run) -> Condition | None:
    """``spec.auth``: the token signing key and the super-user tokens (``credentials``)."""
    cond, run.verification = await credentials.step_auth(_secrets_target(run))
    return cond


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
    run.bookies_settled = replicas == desired and isinstance(action, rollout.Done)
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


def _template_key(deployment: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What a rollout changes in a Deployment: its containers' images and arguments, the
    config hash and the version label of its pod template."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    return (
        tuple((c.get("image"), tuple(c.get("args") or ())) for c in containers),
        (meta.get("annotations") or {}).get(common.CONFIG_HASH_ANNOTATION),
        (meta.get("labels") or {}).get("app.kubernetes.io/version"),
    )


async def _apply_deployment(run: Run, objects: list[Json], name: str) -> tuple[Json | None, bool]:
    """Apply a stateless component's objects unless its existing Deployment would roll while
    the bookies are not settled; returns (the live Deployment, whether a rollout waits)."""
    ns = run.owner.namespace
    current = await run.kube.get("apps/v1", "Deployment", ns, name)
    desired = next(o for o in objects if o["kind"] == "Deployment")
    held = (
        current is not None
        and not run.bookies_settled
        and _template_key(current) != _template_key(desired)
    )
    if held:
        run.event("Normal", "WaitingForBookies", f"{name}: rolls once the bookies are settled")
    else:
        await run.apply_all(objects)
        current = await run.kube.get("apps/v1", "Deployment", ns, name)
    return current, held


def _deployment_condition(
    type_: str, what: str, dep: Json | None, desired: int, held: bool
) -> tuple[Condition, Json]:
    counts = _counts(dep, desired, ready_key="availableReplicas")
    st = (dep or {}).get("status") or {}
    generation = int(((dep or {}).get("metadata") or {}).get("generation", 0) or 0)
    ok = (
        not held
        # as `kubectl rollout status`: counts of an older template say nothing about this one
        and int(st.get("observedGeneration", 0) or 0) >= generation
        and counts["readyReplicas"] >= counts["replicas"]
        and counts["updatedReplicas"] >= counts["replicas"]
        and int(st.get("replicas", 0) or 0) == counts["replicas"]
    )
    if held:
        reason, message = "WaitingForBookies", f"{what} roll once the bookies are settled"
    else:
        reason = "AllReady" if ok else "PodsNotReady"
        message = f"{what} {counts['summary']} available"
    return Condition(type_, ok, reason, message), counts


async def step_brokers(run: Run) -> Condition:
    dep, held = await _apply_deployment(
        run,
        broker.build_workload(run.owner, run.spec, verification=run.verification),
        run.owner.name_of(broker.COMPONENT),
    )
    cond, counts = _deployment_condition(
        conditions.BROKERS_READY, "brokers", dep, run.spec.brokers.replicas, held
    )
    run.status["brokers"] = counts
    return cond


async def step_proxy(run: Run) -> Condition | None:
    owner, ns = run.owner, run.owner.namespace
    name = owner.name_of(proxy.COMPONENT)
    if not run.spec.proxy.enabled:
        for api_version, kind in (
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
            ("v1", "ConfigMap"),
            ("policy/v1", "PodDisruptionBudget"),
        ):
            existing = await run.kube.get(api_version, kind, ns, name)
            if existing is not None and _owned_by(existing, owner):
                await run.kube.delete(api_version, kind, ns, name)
        return None
    dep, held = await _apply_deployment(
        run, proxy.build(owner, run.spec, verification=run.verification), name
    )
    cond, counts = _deployment_condition(
        conditions.PROXY_READY, "proxies", dep, run.spec.proxy.replicas, held
    )
    run.status["proxy"] = counts
    run.status["proxyUrl"] = proxy.service_url(owner, run.spec)
    run.status["proxyAdminUrl"] = proxy.admin_url(owner, run.spec)
    return cond


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner.uid for r in refs)


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
    try:
        creds = offload_probe.credentials_of(secret)
    except ValueError as err:
        return Condition(conditions.OFFLOAD_READY, False, "CredentialsInvalid", str(err))
    target = offload_probe.Target(off.endpoint, str(off.bucket), off.region, creds)
    try:
        await asyncio.to_thread(offload_probe.probe, target)
    except offload_probe.ProbeError as err:
        return Condition(conditions.OFFLOAD_READY, False, "ProbeFailed", str(err))
    return Condition(
        conditions.OFFLOAD_READY,
        True,
        "ProbeSucceeded",
        f"a probe object was written, read back and deleted in bucket {off.bucket}",
    )


STEPS: tuple[Step, ...] = (
    step_tls,
    step_auth,
    step_metadata,
    step_bookies,
    step_brokers,
    step_proxy,
    step_services,
    step_monitoring,
    step_offload,
)


async def reconcile(kube: Kube, body: Mapping[str, Any], *, event: EventFn, now: str) -> Json:
    """Run every step in order, then write the status (conditions + observedGeneration) once."""
    run = Run(kube=kube, body=body, event=event)
    generation = int(body["metadata"].get("generation", 0))
    old = (body.get("status") or {}).get("conditions")
    results = [c for step in STEPS if (c := await step(run)) is not None]
    ready = conditions.summary(results)
    status: Json = {
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
