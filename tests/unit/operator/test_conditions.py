"""Standard conditions: transition times move only when a status changes."""

from __future__ import annotations

from magnetar_operator import conditions
from magnetar_operator.conditions import Condition


def test_merge_keeps_transition_time_while_status_is_unchanged() -> None:
    first = conditions.merge(
        None, [Condition("Ready", False, "Progressing", "x")], now="T1", generation=1
    )
    assert first == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Progressing",
            "message": "x",
            "lastTransitionTime": "T1",
            "observedGeneration": 1,
        }
    ]
    same = conditions.merge(first, [Condition("Ready", False, "PodsNotReady", "y")], now="T2")
    assert same[0]["lastTransitionTime"] == "T1" and same[0]["reason"] == "PodsNotReady"
    flipped = conditions.merge(same, [Condition("Ready", True, "AllComponentsReady")], now="T3")
    assert flipped[0]["lastTransitionTime"] == "T3" and flipped[0]["status"] == "True"


def test_summary() -> None:
    ok = [Condition(t, True, "AllReady") for t in conditions.CLUSTER_TYPES]
    assert conditions.summary(ok).ok
    bad = [*ok[:2], Condition("BrokersReady", False, "PodsNotReady", "1/2"), ok[3]]
    ready = conditions.summary(bad)
    assert not ready.ok and ready.reason == "PodsNotReady" and "BrokersReady" in ready.message


def test_a_deployment_is_ready_only_once_its_controller_saw_the_latest_template() -> None:
    """Right after a new template is applied the Deployment's status still counts the old
    pods as updated and available; only observedGeneration tells they are not the new ones."""
    from magnetar_operator.cluster import _deployment_condition

    def dep(generation: int, observed: int) -> dict[str, object]:
        status = {"observedGeneration": observed, "replicas": 1}
        status |= {"updatedReplicas": 1, "availableReplicas": 1}
        return {"metadata": {"generation": generation}, "status": status}

    stale, _ = _deployment_condition("ProxyReady", "proxies", dep(2, 1), 1, False)
    assert not stale.ok and stale.reason == "PodsNotReady"
    seen, _ = _deployment_condition("ProxyReady", "proxies", dep(2, 2), 1, False)
    assert seen.ok and seen.reason == "AllReady"
