"""Bookie rollout, scale-down and node-loss decisions, one bookie at a time (pure; no I/O).

The bookie StatefulSet has ``updateStrategy: OnDelete``. After a spec change the
StatefulSet controller computes a new ``updateRevision`` but restarts nothing; ``plan``
then picks the next pod to delete (the highest ordinal still on an old revision), and only
when every bookie is Ready and nothing is terminating — so at most one bookie is ever down
because of the operator. ``gate_roll`` holds that restart until the cluster reports no
under-replicated ledger, so a bookie restarts only once autorecovery has restored the
copies the previous restart (or anything else) left short.

Scale-down (``scale_down``) removes the highest ordinal, one bookie at a time: it is first
decommissioned through the brokers' admin API (read-only, its ledgers re-replicated
elsewhere), and the StatefulSet's replicas are lowered only once the cluster reports it
``decommissioned`` — no ledger references it any more. A lost node (``node_loss``) is
handled the same way under ``spec.bookies.nodeLossPolicy: Replace``: decommission, then
delete the pod and its claims so the StatefulSet creates a fresh bookie in its place.
The operator finds a pod's bookie by its advertised address (``bookie_host``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REVISION_LABEL = "controller-revision-hash"
DECOMMISSIONING = "decommissioning"
DECOMMISSIONED = "decommissioned"


@dataclass(frozen=True)
class PodState:
    name: str
    ordinal: int
    revision: str
    ready: bool
    terminating: bool

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodState:
        meta = pod.get("metadata", {})
        name = str(meta.get("name", ""))
        conds = pod.get("status", {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        return cls(
            name=name,
            ordinal=int(name.rsplit("-", 1)[-1]) if name.rsplit("-", 1)[-1].isdigit() else -1,
            revision=str(meta.get("labels", {}).get(REVISION_LABEL, "")),
            ready=ready,
            terminating=meta.get("deletionTimestamp") is not None,
        )


@dataclass(frozen=True)
class Wait:
    """Nothing to do now; ``reason`` says what the rollout waits for, ``code`` is the
    ``BookiesReady`` condition's reason while it waits."""

    reason: str
    code: str = "Progressing"


@dataclass(frozen=True)
class DeletePod:
    """Delete this pod: the StatefulSet controller recreates it on the update revision."""

    name: str
    from_revision: str
    to_revision: str


@dataclass(frozen=True)
class Done:
    """Every bookie runs the update revision and is Ready."""


Action = Wait | DeletePod | Done


def plan(statefulset: Mapping[str, Any] | None, pods: Sequence[PodState]) -> Action:
    """The next rollout step for the bookie StatefulSet given its current pods."""
    if statefulset is None:
        return Wait("the bookie StatefulSet does not exist yet")
    meta, spec, status = (statefulset.get(k) or {} for k in ("metadata", "spec", "status"))
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return Wait("the StatefulSet controller has not observed the latest spec yet")
    update_revision = str(status.get("updateRevision", ""))
    replicas = int(spec.get("replicas", 0))
    live = sorted((p for p in pods if 0 <= p.ordinal < replicas), key=lambda p: p.ordinal)
    if any(p.terminating for p in pods):
        names = ", ".join(p.name for p in pods if p.terminating)
        return Wait(f"waiting for {names} to terminate")
    if len(live) < replicas:
        return Wait(f"{len(live)}/{replicas} bookie pods exist")
    not_ready = [p.name for p in live if not p.ready]
    if not_ready:
        return Wait(f"waiting for {', '.join(not_ready)} to become Ready")
    outdated = [p for p in live if update_revision and p.revision != update_revision]
    if outdated:
        pod = outdated[-1]
        return DeletePod(pod.name, pod.revision, update_revision)
    return Done()


def gate_roll(action: Action, *, underreplicated: int | None, unknown: str = "") -> Action:
    """``action``, unless it restarts a bookie while ledgers are under-replicated (or while
    the operator cannot tell: ``underreplicated`` None, ``unknown`` saying why)."""
    if not isinstance(action, DeletePod):
        return action
    if underreplicated is None:
        return Wait(
            f"cannot tell whether ledgers are under-replicated ({unknown}); "
            f"{action.name} restarts once the admin API answers",
            "WaitingForReplication",
        )
    if underreplicated:
        return Wait(
            f"{underreplicated} under-replicated ledger(s): {action.name} restarts once "
            "autorecovery has restored every copy",
            "WaitingForReplication",
        )
    return action


@dataclass(frozen=True)
class Bookie:
    """One entry of the cluster's bookie list (``GET /admin/v2/bookies/all``)."""

    bookie_id: str
    state: str
    """rw, ro, decommissioning, decommissioned or gone."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Bookie:
        return cls(str(doc.get("bookieId", "")), str(doc.get("state", "")))

    @property
    def host(self) -> str:
        return self.bookie_id.rsplit(":", 1)[0]


def bookie_at(host: str, bookies: Sequence[Bookie]) -> Bookie | None:
    """The bookie advertised at ``host`` (any port): the one still serving when an old,
    decommissioned instance shares the address (a state binds its instance, so a fresh
    bookie at the same address reports rw)."""
    found = [b for b in bookies if b.host == host]
    found.sort(key=lambda b: b.state == DECOMMISSIONED)
    return found[0] if found else None


@dataclass(frozen=True)
class Decommission:
    """Start decommissioning ``bookie_id`` (the bookie of pod ``pod``)."""

    pod: str
    bookie_id: str


@dataclass(frozen=True)
class RemoveBookie:
    """``pod`` holds nothing: lower the StatefulSet's replicas to ``replicas`` (removing it)."""

    pod: str
    replicas: int


@dataclass(frozen=True)
class Recycle:
    """Delete ``pod`` and its claims: the StatefulSet creates a fresh bookie in its place."""

    pod: str
    why: str


ScaleAction = Wait | Decommission | RemoveBookie


def scale_down(
    *,
    current: int,
    desired: int,
    pods: Sequence[PodState],
    victim: str,
    bookie: Bookie | None,
    underreplicated: int,
    progress: str = "",
) -> ScaleAction:
    """The next scale-down step: ``victim`` is the pod of ordinal ``current - 1``, ``bookie``
    its entry in the cluster's bookie list (None: none is advertised at its address),
    ``progress`` what the decommission status says (ledgers still referencing it)."""
    assert desired < current, "scale_down is for a lower replica count"
    pod = next((p for p in pods if p.name == victim), None)
    if bookie is None:
        if pod is not None and pod.ready:
            return Wait(
                f"{victim} is Ready but no bookie is advertised at its address: it is not "
                "removed (is --advertised-address overridden in spec.bookies.extraArgs?)",
                "BookieNotFound",
            )
        # No registration, no cookie, no state: this bookie never formatted, holds nothing.
        return RemoveBookie(victim, current - 1)
    if bookie.state == DECOMMISSIONED:
        return RemoveBookie(victim, current - 1)
    if bookie.state == DECOMMISSIONING:
        detail = f": {progress}" if progress else ""
        return Wait(
            f"{victim} (bookie {bookie.bookie_id}) is decommissioning{detail}; it is removed "
            "once no ledger references it",
            "Decommissioning",
        )
    others = [p for p in pods if p.name != victim and 0 <= p.ordinal < current]
    not_ready = sorted(p.name for p in others if not p.ready or p.terminating)
    if not_ready or len(others) < current - 1:
        return Wait(
            f"waiting for {', '.join(not_ready) or 'every bookie'} to be Ready before "
            f"decommissioning {victim}",
            "Scaling",
        )
    if underreplicated:
        return Wait(
            f"{underreplicated} under-replicated ledger(s): {victim} is decommissioned once "
            "autorecovery has restored every copy",
            "WaitingForReplication",
        )
    return Decommission(victim, bookie.bookie_id)


REPLACE, MANUAL = "Replace", "Manual"
NODE_LOSS_POLICIES = (REPLACE, MANUAL)


def node_loss(
    *, pod: str, why: str, bookie: Bookie | None, policy: str
) -> Wait | Decommission | Recycle:
    """What to do about bookie pod ``pod`` whose node or volume is gone (``why``)."""
    if policy != REPLACE:
        return Wait(
            f"{pod}: {why}; spec.bookies.nodeLossPolicy is {policy}: decommission its bookie "
            "and delete the pod and its claims by hand, or set the policy to Replace",
            "NodeLost",
        )
    if bookie is None or bookie.state == DECOMMISSIONED:
        return Recycle(pod, why)
    if bookie.state == DECOMMISSIONING:
        return Wait(
            f"{pod}: {why}; its bookie {bookie.bookie_id} is decommissioning (autorecovery "
            "copies its ledgers from the surviving replicas); then a fresh bookie replaces it",
            "ReplacingBookie",
        )
    return Decommission(pod, bookie.bookie_id)


def lost_reason(
    pod: Mapping[str, Any],
    *,
    node_exists: bool | None,
    claims: Sequence[Mapping[str, Any] | None],
    volumes_exist: Sequence[bool],
    affinity_nodes_exist: Sequence[bool],
) -> str | None:
    """Why bookie ``pod`` is lost with its node or local volume (None when it is not):
    ``node_exists`` for its ``spec.nodeName`` (None: not scheduled), ``claims`` its PVCs (None
    for one that does not exist), ``volumes_exist`` whether each bound PV exists (and is not
    being deleted), ``affinity_nodes_exist`` whether each node its PVs are pinned to (local
    volumes) exists."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName")
    if node and node_exists is False:
        return f"its node {node} no longer exists"
    if status.get("phase", "Pending") != "Pending":
        return None
    for claim in claims:
        if claim is not None and (claim.get("status") or {}).get("phase") == "Lost":
            return f"its volume claim {claim['metadata']['name']} is Lost"
    if not all(volumes_exist):
        return "a persistent volume bound to its claims is deleted or being deleted"
    if not all(affinity_nodes_exist):
        return "its local volume is pinned to a node that no longer exists"
    return None
