"""The one-bookie-at-a-time rollout and scale-down decisions."""

from __future__ import annotations

from typing import Any

from magnetar_operator import rollout
from magnetar_operator.rollout import DeletePod, Done, PodState, Wait


def sts(replicas: int = 3, *, gen: int = 2, observed: int = 2, rev: str = "new") -> dict[str, Any]:
    return {
        "metadata": {"generation": gen},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": observed, "updateRevision": rev},
    }


def pod(i: int, rev: str = "new", *, ready: bool = True, terminating: bool = False) -> PodState:
    return PodState(f"c-bookie-{i}", i, rev, ready, terminating)


def test_done_when_all_updated_and_ready() -> None:
    assert rollout.plan(sts(), [pod(0), pod(1), pod(2)]) == Done()


def test_deletes_highest_outdated_first() -> None:
    action = rollout.plan(sts(), [pod(0, "old"), pod(1, "old"), pod(2, "old")])
    assert action == DeletePod("c-bookie-2", "old", "new")
    action = rollout.plan(sts(), [pod(0, "old"), pod(1, "old"), pod(2)])
    assert action == DeletePod("c-bookie-1", "old", "new")


def test_waits_while_any_bookie_is_not_ready_or_missing_or_terminating() -> None:
    assert isinstance(
        rollout.plan(sts(), [pod(0, "old"), pod(1, "old"), pod(2, ready=False)]), Wait
    )
    assert isinstance(rollout.plan(sts(), [pod(0, "old"), pod(1, "old")]), Wait)
    assert isinstance(
        rollout.plan(sts(), [pod(0, "old"), pod(1, "old"), pod(2, "old", terminating=True)]), Wait
    )


def test_waits_for_the_statefulset_controller() -> None:
    assert isinstance(rollout.plan(sts(observed=1), [pod(0, "old")]), Wait)
    assert isinstance(rollout.plan(None, []), Wait)


def test_pod_state_from_pod() -> None:
    p = PodState.from_pod(
        {
            "metadata": {"name": "x-bookie-12", "labels": {"controller-revision-hash": "abc"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert p == PodState("x-bookie-12", 12, "abc", True, False)


def test_scale_step() -> None:
    assert rollout.scale_step(current=3, desired=5, all_ready=False) == 5
    assert rollout.scale_step(current=5, desired=3, all_ready=True) == 4
    assert rollout.scale_step(current=5, desired=3, all_ready=False) == 5
