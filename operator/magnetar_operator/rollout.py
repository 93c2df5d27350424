"""Bookie rollout and scaling decisions, one bookie at a time (pure; no I/O).

The bookie StatefulSet has ``updateStrategy: OnDelete``. After a spec change the
StatefulSet controller computes a new ``updateRevision`` but restarts nothing; ``plan``
then picks the next pod to delete (the highest ordinal still on an old revision), and only
when every bookie is Ready and nothing is terminating — so at most one bookie is ever down
because of the operator. Scale-down removes one bookie per step under the same rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REVISION_LABEL = "controller-revision-hash"


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
    """Nothing to do now; ``reason`` says what the rollout waits for."""

    reason: str


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


def scale_step(*, current: int, desired: int, all_ready: bool) -> int:
    """The replica count to apply now: up at once, down by one bookie per ready step."""
    if desired >= current:
        return desired
    return current - 1 if all_ready else current
