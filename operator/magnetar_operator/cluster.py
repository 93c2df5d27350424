"""PulsarCluster reconciliation: ordered, idempotent steps, status written once at the end.

certificates -> tokens -> metadata -> bookies (apply, scale one step, replace a lost bookie,
roll one pod) -> autorecovery (with ``spec.tls``) -> brokers -> proxy -> services ->
monitoring -> offload check -> status. The bookie step asks the cluster's own admin API
(``admin_endpoint``) before it removes or restarts a bookie: a scale-down decommissions the
bookie first and lowers the replicas once nothing references it, a roll restarts the next
bookie once no ledger is under-replicated (``rollout``; docs/operations.md, "The operator
and the bookies"). A change of the brokers' (or the proxy's) pod template waits until the
bookies are settled (every bookie on the current revision and Ready): an image or version
change rolls bookies first, one at a time, then brokers. Each step applies its objects with
server-side apply (so re-running is a no-op and drift is reverted) and returns a condition;
``Ready`` summarises them, and ``observedGeneration`` is written together with them in one
patch.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar_operator import conditions, credentials, offload_probe, rollout, tokens
from magnetar_operator.builders import (
    autorecovery,
    bookie,
    broker,
    common,
    etcd,
    monitoring,
    proxy,
    security,
)
from magnetar_operator.builders.common import GROUP, Owner
from magnetar_operator.conditions import Condition
from magnetar_operator.kube import ApiError, Kube
from magnetar_operator.pulsar import Admin, AdminError, AdminUnavailable
from magnetar_operator.spec import ClusterSpec, Json

ADMIN_URL_ANNOTATION = f"{GROUP}/admin-url"
"""On a PulsarCluster: the admin API the operator uses instead of its brokers' Service."""

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


@dataclass(frozen=True)
class AdminEndpoint:
    """Where a PulsarCluster's admin API answers, and how the operator authenticates."""

    url: str
    token: str | None = None
    ca: bytes | None = None

    def client(self) -> Admin:
        return Admin(self.url, token=self.token, ca=self.ca)


async def secret_item(kube: Kube, namespace: str, name: str, key: str) -> bytes | None:
    secret = await kube.get("v1", "Secret", namespace, name)
    raw = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(raw) if raw else None


async def admin_endpoint(kube: Kube, pc: Mapping[str, Any]) -> AdminEndpoint:
    """A PulsarCluster's admin API: the ``magnetar.dev/admin-url`` annotation, else its
    status's ``adminUrl``, else its brokers' Service; with ``spec.auth`` the super-user token
    the operator minted for itself, with ``spec.tls`` the cluster's CA."""
    spec, owner = ClusterSpec.parse(pc.get("spec")), Owner.from_body(pc)
    url = (
        (pc["metadata"].get("annotations") or {}).get(ADMIN_URL_ANNOTATION)
        or (pc.get("status") or {}).get("adminUrl")
        or broker.admin_url(owner, spec)
    )
    token = ca = None
    ns = owner.namespace
    if spec.auth.enabled:
        token = await secret_item(
            kube, ns, security.tokens_secret_name(owner), security.OPERATOR_TOKEN
        )
    if spec.tls.enabled:
        ca = await secret_item(
            kube, ns, security.tls_secret_name(owner, broker.COMPONENT), security.CA_CERT
        )
    return AdminEndpoint(str(url), token.decode().strip() if token else None, ca)


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


@dataclass
class Replication:
    """The cluster's bookie list and under-replicated ledger count, read through its admin
    API at most once per pass and only when a step needs them (``error`` when it did not
    answer); decommissions started through the same API."""

    run: Run
    bookies: list[rollout.Bookie] | None = None
    underreplicated: int | None = None
    error: str = ""
    _loaded: bool = False

    async def load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            endpoint = await admin_endpoint(self.run.kube, self.run.body)
            async with endpoint.client() as admin:
                self.bookies = [rollout.Bookie.from_json(b) for b in await admin.list_bookies()]
                self.underreplicated = len(await admin.list_underreplicated())
        except (AdminUnavailable, AdminError) as e:
            self.error = str(e)

    def bookie_of(self, pod: str) -> rollout.Bookie | None:
        host = bookie.advertised_host(self.run.owner, pod)
        return rollout.bookie_at(host, self.bookies or [])

    async def referencing(self, bookie_id: str) -> str:
        """A decommission's progress in words ("" when the admin API does not say)."""
        try:
            endpoint = await admin_endpoint(self.run.kube, self.run.body)
            async with endpoint.client() as admin:
                status = await admin.decommission_status(bookie_id)
        except (AdminUnavailable, AdminError):
            return ""
        if status is None or "ledgersReferencing" not in status:
            return ""
        return f"{status['ledgersReferencing']} ledger(s) still reference it"

    async def decommission(self, bookie_id: str) -> str | None:
        """Start decommissioning ``bookie_id``; None, or why the admin API refused."""
        try:
            endpoint = await admin_endpoint(self.run.kube, self.run.body)
            async with endpoint.client() as admin:
                await admin.decommission_bookie(bookie_id)
        except (AdminUnavailable, AdminError) as e:
            return str(e)
        self.bookies = [
            rollout.Bookie(b.bookie_id, rollout.DECOMMISSIONING) if b.bookie_id == bookie_id else b
            for b in self.bookies or ()
        ]
        return None


def _unavailable(rep: Replication, what: str) -> rollout.Wait:
    return rollout.Wait(
        f"the cluster's bookie list is unavailable ({rep.error}): {what}", "AdminUnavailable"
    )


def _advertised_overridden(run: Run) -> bool:
    return any(a.startswith("--advertised-address") for a in run.spec.bookies.extra_args)


async def _start_decommission(
    run: Run, rep: Replication, step: rollout.Decommission, why: str
) -> rollout.Wait:
    refused = await rep.decommission(step.bookie_id)
    if refused is not None:
        return rollout.Wait(f"decommissioning {step.pod} failed: {refused}", "AdminUnavailable")
    run.event(
        "Normal",
        "DecommissioningBookie",
        f"{step.pod}: decommissioning bookie {step.bookie_id} ({why}); its ledgers move to "
        "the other bookies",
    )
    return rollout.Wait(
        f"{step.pod} (bookie {step.bookie_id}) is decommissioning", "Decommissioning"
    )


async def _scale_down(
    run: Run, rep: Replication, have: int, desired: int, pods: list[rollout.PodState]
) -> rollout.RemoveBookie | rollout.Wait:
    """One step of a bookie scale-down (``rollout.scale_down``), decommission first."""
    victim = f"{run.owner.name_of(bookie.COMPONENT)}-{have - 1}"
    if _advertised_overridden(run):
        return rollout.Wait(
            "spec.bookies.extraArgs sets --advertised-address: the operator cannot tell which "
            "bookie a pod is, so it removes none (scale down by decommissioning by hand)",
            "BookieNotFound",
        )
    await rep.load()
    if rep.bookies is None or rep.underreplicated is None:
        return _unavailable(rep, f"{victim} is not removed before it is decommissioned")
    found = rep.bookie_of(victim)
    progress = ""
    if found is not None and found.state == rollout.DECOMMISSIONING:
        progress = await rep.referencing(found.bookie_id)
    step = rollout.scale_down(
        current=have,
        desired=desired,
        pods=pods,
        victim=victim,
        bookie=found,
        underreplicated=rep.underreplicated,
        progress=progress,
    )
    if isinstance(step, rollout.Decommission):
        return await _start_decommission(run, rep, step, f"scale-down {have} -> {desired}")
    if isinstance(step, rollout.RemoveBookie):
        what = "decommissioned" if found is not None else "never registered, holds nothing"
        run.event(
            "Normal",
            "ScalingBookies",
            f"bookies {have} -> {step.replicas} (target {desired}): {victim} {what}",
        )
    return step


async def _delete_claims(run: Run, pod: str) -> list[str]:
    ns = run.owner.namespace
    return [
        claim
        for claim in bookie.claim_names(pod)
        if await run.kube.delete("v1", "PersistentVolumeClaim", ns, claim)
    ]


async def _follow_decommissions(
    run: Run,
    rep: Replication,
    tracked: list[str],
    replicas: int,
    pods: list[rollout.PodState],
    recycled: set[str],
) -> list[str]:
    """The pods whose decommission this operator started (``status.bookies.decommissioning``),
    followed to the end: once a removed one's pod is gone its claims are deleted; one still
    in the StatefulSet (a lost node replaced, a scale-down undone by a scale-up) is recycled
    once decommissioned (added to ``recycled``). Returns the pods still to follow."""
    if not tracked:
        return []
    await rep.load()
    if rep.bookies is None:
        return tracked
    present = {p.name: p for p in pods}
    keep: list[str] = []
    for name in tracked:
        found = rep.bookie_of(name)
        state = found.state if found is not None else rollout.DECOMMISSIONED
        ordinal = int(name.rsplit("-", 1)[-1])
        if state not in (rollout.DECOMMISSIONING, rollout.DECOMMISSIONED):
            continue  # a fresh bookie (new instance) serves at its address
        if state == rollout.DECOMMISSIONING:
            keep.append(name)
        elif ordinal >= replicas:
            if name in present:
                keep.append(name)  # still terminating
                continue
            deleted = await _delete_claims(run, name)
            if deleted:
                run.event(
                    "Normal",
                    "DeletedBookieVolumes",
                    f"{name}: decommissioned and removed, deleted {', '.join(deleted)}",
                )
        elif name in present and not present[name].terminating:
            await _recycle(run, rollout.Recycle(name, "its bookie was decommissioned"))
            recycled.add(name)  # followed no more: its fresh pod is not recycled again
        else:
            keep.append(name)  # terminating: recycled once the StatefulSet recreates it
    return keep


async def _lost(run: Run, pod: Json) -> str | None:
    """Why a bookie pod is lost with its node or local volume (``rollout.lost_reason``)."""
    kube, ns = run.kube, run.owner.namespace
    name = pod["metadata"]["name"]
    node = (pod.get("spec") or {}).get("nodeName")
    node_exists = None if not node else (await kube.get("v1", "Node", None, node)) is not None
    claims: list[Json | None] = []
    volumes_exist: list[bool] = []
    pinned_exist: list[bool] = []
    if ((pod.get("status") or {}).get("phase") or "Pending") == "Pending":
        for claim_name in bookie.claim_names(name):
            claim = await kube.get("v1", "PersistentVolumeClaim", ns, claim_name)
            claims.append(claim)
            volume = ((claim or {}).get("spec") or {}).get("volumeName")
            if not volume:
                continue
            pv = await kube.get("v1", "PersistentVolume", None, volume)
            # a volume being deleted under a bound claim is going away with its data
            volumes_exist.append(pv is not None and not pv["metadata"].get("deletionTimestamp"))
            pinned_exist += [
                (await kube.get("v1", "Node", None, host)) is not None for host in _pinned_nodes(pv)
            ]
    return rollout.lost_reason(
        pod,
        node_exists=node_exists,
        claims=claims,
        volumes_exist=volumes_exist,
        affinity_nodes_exist=pinned_exist,
    )


def _pinned_nodes(pv: Mapping[str, Any] | None) -> list[str]:
    """The nodes a local PersistentVolume's ``nodeAffinity`` names by host name."""
    required = (((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    out: list[str] = []
    for term in required.get("nodeSelectorTerms") or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "In":
                out += [str(v) for v in expr.get("values") or ()]
    return out


async def _recycle(run: Run, step: rollout.Recycle) -> None:
    """Delete the pod's claims, then the pod (at once when its node no longer exists)."""
    kube, ns = run.kube, run.owner.namespace
    deleted = await _delete_claims(run, step.pod)
    pod = await kube.get("v1", "Pod", ns, step.pod)
    node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
    gone = bool(node) and await kube.get("v1", "Node", None, node) is None
    await kube.delete("v1", "Pod", ns, step.pod, grace_period=0 if gone else None)
    run.event(
        "Normal",
        "ReplacingBookie",
        f"{step.pod}: {step.why}; deleted the pod and {', '.join(deleted) or 'no claims'}: "
        "a fresh bookie takes its place",
    )


async def _replace_lost(
    run: Run,
    rep: Replication,
    raw_pods: list[Json],
    replicas: int,
    tracked: list[str],
    recycled: set[str],
) -> rollout.Wait | None:
    """Lost bookies (node or local volume gone), per ``spec.bookies.nodeLossPolicy``:
    decommission (followed in ``tracked``), then recycle."""
    waits: list[rollout.Wait] = []
    for raw in raw_pods:
        pod = rollout.PodState.from_pod(raw)
        if pod.name in recycled:
            waits.append(rollout.Wait(f"{pod.name} is being replaced", "ReplacingBookie"))
            continue
        if pod.terminating or not 0 <= pod.ordinal < replicas:
            continue
        why = await _lost(run, raw)
        if why is None:
            continue
        if run.spec.bookies.node_loss_policy != rollout.REPLACE:
            step: rollout.Wait | rollout.Decommission | rollout.Recycle = rollout.node_loss(
                pod=pod.name, why=why, bookie=None, policy=run.spec.bookies.node_loss_policy
            )
        else:
            await rep.load()
            if rep.bookies is None:
                waits.append(_unavailable(rep, f"{pod.name}: {why}"))
                continue
            found = rep.bookie_of(pod.name)
            if found is None and _advertised_overridden(run):
                waits.append(rollout.Wait(f"{pod.name}: {why}; its bookie is unknown", "NodeLost"))
                continue
            step = rollout.node_loss(
                pod=pod.name, why=why, bookie=found, policy=run.spec.bookies.node_loss_policy
            )
        if isinstance(step, rollout.Decommission):
            waits.append(await _start_decommission(run, rep, step, why))
            if pod.name not in tracked:
                tracked.append(pod.name)
        elif isinstance(step, rollout.Recycle):
            await _recycle(run, step)
            waits.append(rollout.Wait(f"{pod.name} is being replaced ({why})", "ReplacingBookie"))
        else:
            waits.append(step)
    return waits[0] if waits else None


WAIT_EVENTS = {
    "WaitingForReplication": "Normal",
    "Decommissioning": "Normal",
    "NodeLost": "Warning",
    "BookieNotFound": "Warning",
    "AdminUnavailable": "Warning",
}
"""``BookiesReady`` reasons also posted as an event, once each time the condition changes."""


async def step_bookies(run: Run) -> Condition:
    owner, spec, kube = run.owner, run.spec, run.kube
    name, ns = owner.name_of(bookie.COMPONENT), owner.namespace
    current = await kube.get("apps/v1", "StatefulSet", ns, name)
    raw_pods = await kube.list(
        "v1", "Pod", ns, labels=common.selector_labels(owner, bookie.COMPONENT)
    )
    pods = [rollout.PodState.from_pod(p) for p in raw_pods]
    old_status = run.body.get("status") or {}
    tracked = [str(p) for p in (old_status.get("bookies") or {}).get("decommissioning") or ()]
    desired = spec.bookies.replicas
    replicas = desired
    rep = Replication(run)
    held: rollout.Wait | None = None
    if current is not None:
        have = int(current["spec"].get("replicas", desired))
        if desired < have:
            step = await _scale_down(run, rep, have, desired, pods)
            if isinstance(step, rollout.RemoveBookie):
                replicas = step.replicas
            else:
                replicas, held = have, step
            victim = f"{name}-{have - 1}"
            started = held is not None and held.code == "Decommissioning"
            if (started or held is None) and victim not in tracked:
                tracked.append(victim)  # followed until its claims are deleted
    await run.apply_all(bookie.build(owner, spec, replicas=replicas))
    if spec.bookies.rack.enabled:
        await kube.apply(bookie.rack_map(owner, await _racks(run, pods)))
    recycled: set[str] = set()
    tracked = await _follow_decommissions(run, rep, tracked, replicas, pods, recycled)
    lost = await _replace_lost(run, rep, raw_pods, replicas, tracked, recycled)
    sts = await kube.get("apps/v1", "StatefulSet", ns, name)
    action = rollout.plan(sts, pods)
    if isinstance(action, rollout.DeletePod):
        await rep.load()
        action = rollout.gate_roll(action, underreplicated=rep.underreplicated, unknown=rep.error)
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
    counts["decommissioning"] = sorted(set(tracked))
    run.status["bookies"] = counts
    run.bookies_settled = replicas == desired and isinstance(action, rollout.Done) and not lost
    cond = _bookies_condition(replicas, desired, lost or held, action, counts)
    if (
        not cond.ok
        and cond.reason in WAIT_EVENTS
        and not conditions.holds(old_status.get("conditions"), cond)
    ):
        run.event(WAIT_EVENTS[cond.reason], cond.reason, cond.message)
    return cond


def _bookies_condition(
    replicas: int,
    desired: int,
    held: rollout.Wait | None,
    action: rollout.Action,
    counts: Json,
) -> Condition:
    if held is not None:
        return Condition(conditions.BOOKIES_READY, False, held.code, held.reason)
    if replicas != desired:
        return Condition(conditions.BOOKIES_READY, False, "Scaling", f"{replicas} -> {desired}")
    if isinstance(action, rollout.DeletePod):
        return Condition(
            conditions.BOOKIES_READY, False, "RollingUpdate", f"restarting {action.name}"
        )
    if isinstance(action, rollout.Wait):
        return Condition(conditions.BOOKIES_READY, False, action.code, action.reason)
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


async def step_autorecovery(run: Run) -> Condition | None:
    """With ``spec.tls``, the autorecovery Deployment (``builders.autorecovery``): applied
    whatever the bookies are doing, since their decommissions need it to finish. Without
    ``spec.tls`` the bookies run autorecovery in-process and a Deployment (and its Service)
    left from a TLS spec is deleted."""
    owner = run.owner
    name = owner.name_of(autorecovery.COMPONENT)
    if not autorecovery.enabled(run.spec):
        await _delete_owned(run, name, (("apps/v1", "Deployment"), ("v1", "Service")))
        if "autorecovery" in (run.body.get("status") or {}):
            run.status["autorecovery"] = None  # the merge patch removes the key
        return None
    await run.apply_all(autorecovery.build(owner, run.spec))
    dep = await run.kube.get("apps/v1", "Deployment", owner.namespace, name)
    cond, counts = _deployment_condition(
        conditions.AUTORECOVERY_READY, "autorecovery", dep, run.spec.autorecovery.replicas, False
    )
    run.status["autorecovery"] = counts
    return cond


async def _delete_owned(run: Run, name: str, kinds: tuple[tuple[str, str], ...]) -> None:
    """Delete the objects ``name`` of ``kinds`` that this cluster owns (a component turned
    off); objects of that name it does not own are left alone."""
    for api_version, kind in kinds:
        existing = await run.kube.get(api_version, kind, run.owner.namespace, name)
        if existing is not None and _owned_by(existing, run.owner):
            await run.kube.delete(api_version, kind, run.owner.namespace, name)


async def step_proxy(run: Run) -> Condition | None:
    owner = run.owner
    name = owner.name_of(proxy.COMPONENT)
    if not run.spec.proxy.enabled:
        await _delete_owned(
            run,
            name,
            (
                ("apps/v1", "Deployment"),
                ("v1", "Service"),
                ("v1", "ConfigMap"),
                ("policy/v1", "PodDisruptionBudget"),
            ),
        )
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
    step_autorecovery,
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
