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


# --- replication-aware roll, scale-down by decommission, node loss (issue 22) ----------------
def bk(i: int, state: str = "rw") -> rollout.Bookie:
    return rollout.Bookie(f"c-bookie-{i}.c-bookie.ns.svc:3181", state)


def test_roll_waits_for_no_under_replicated_ledgers() -> None:
    restart = DeletePod("c-bookie-1", "old", "new")
    assert rollout.gate_roll(restart, underreplicated=0) == restart
    held = rollout.gate_roll(restart, underreplicated=3)
    assert isinstance(held, Wait) and held.code == "WaitingForReplication"
    assert "3 under-replicated" in held.reason and "c-bookie-1" in held.reason
    unknown = rollout.gate_roll(restart, underreplicated=None, unknown="connection refused")
    assert isinstance(unknown, Wait) and "connection refused" in unknown.reason
    # nothing to restart: nothing to hold
    assert rollout.gate_roll(Done(), underreplicated=None) == Done()


def test_bookie_at_matches_the_advertised_address() -> None:
    bookies = [bk(0), bk(1), rollout.Bookie("10.0.0.7:3181", "rw")]
    assert rollout.bookie_at("c-bookie-1.c-bookie.ns.svc", bookies) == bk(1)
    assert rollout.bookie_at("c-bookie-2.c-bookie.ns.svc", bookies) is None
    # an old, decommissioned instance at the same address loses to the one serving
    old = rollout.Bookie("c-bookie-1.c-bookie.ns.svc:3182", "decommissioned")
    assert rollout.bookie_at("c-bookie-1.c-bookie.ns.svc", [old, bk(1)]) == bk(1)
    assert rollout.Bookie.from_json({"bookieId": "h:1", "state": "ro"}) == rollout.Bookie(
        "h:1", "ro"
    )


def down(bookie: rollout.Bookie | None, *, pods: list[PodState] | None = None, ur: int = 0) -> Any:
    return rollout.scale_down(
        current=4,
        desired=2,
        pods=pods if pods is not None else [pod(i) for i in range(4)],
        victim="c-bookie-3",
        bookie=bookie,
        underreplicated=ur,
        progress="5 ledger(s) still reference it",
    )


def test_scale_down_decommissions_the_highest_ordinal_first() -> None:
    assert down(bk(3)) == rollout.Decommission("c-bookie-3", bk(3).bookie_id)
    # a read-only or gone bookie is decommissioned as well (its ledgers copied from the others)
    assert down(bk(3, "gone"), pods=[pod(0), pod(1), pod(2), pod(3, ready=False)]) == (
        rollout.Decommission("c-bookie-3", bk(3).bookie_id)
    )


def test_scale_down_never_removes_a_bookie_still_referenced() -> None:
    wait = down(bk(3, "decommissioning"))
    assert isinstance(wait, Wait) and wait.code == "Decommissioning"
    assert "5 ledger(s) still reference it" in wait.reason
    assert down(bk(3, "decommissioned")) == rollout.RemoveBookie("c-bookie-3", 3)


def test_scale_down_starts_only_when_the_others_are_ready_and_nothing_is_under_replicated() -> None:
    wait = down(bk(3), pods=[pod(0), pod(1, ready=False), pod(2), pod(3)])
    assert isinstance(wait, Wait) and "c-bookie-1" in wait.reason
    assert isinstance(down(bk(3), pods=[pod(0), pod(2), pod(3)]), Wait)
    wait = down(bk(3), ur=2)
    assert isinstance(wait, Wait) and wait.code == "WaitingForReplication"


def test_scale_down_of_a_pod_without_a_bookie() -> None:
    # never formatted (no registration, cookie or state): holds nothing
    assert down(None, pods=[pod(0), pod(1), pod(2), pod(3, ready=False)]) == (
        rollout.RemoveBookie("c-bookie-3", 3)
    )
    assert down(None, pods=[pod(0), pod(1), pod(2)]) == rollout.RemoveBookie("c-bookie-3", 3)
    # Ready but not found at its address: the operator cannot tell what it holds
    wait = down(None)
    assert isinstance(wait, Wait) and wait.code == "BookieNotFound"


def test_node_loss_policy() -> None:
    why = "its node n2 no longer exists"
    manual = rollout.node_loss(pod="c-bookie-1", why=why, bookie=bk(1), policy="Manual")
    assert isinstance(manual, Wait) and manual.code == "NodeLost" and why in manual.reason
    replace = rollout.node_loss(pod="c-bookie-1", why=why, bookie=bk(1, "gone"), policy="Replace")
    assert replace == rollout.Decommission("c-bookie-1", bk(1).bookie_id)
    wait = rollout.node_loss(
        pod="c-bookie-1", why=why, bookie=bk(1, "decommissioning"), policy="Replace"
    )
    assert isinstance(wait, Wait) and wait.code == "ReplacingBookie"
    for done in (bk(1, "decommissioned"), None):
        step = rollout.node_loss(pod="c-bookie-1", why=why, bookie=done, policy="Replace")
        assert step == rollout.Recycle("c-bookie-1", why)


def lost(pod_doc: dict[str, Any], **kw: Any) -> str | None:
    args: dict[str, Any] = {
        "node_exists": None,
        "claims": [],
        "volumes_exist": [],
        "affinity_nodes_exist": [],
    }
    return rollout.lost_reason(pod_doc, **{**args, **kw})


def test_lost_reason() -> None:
    running = {"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    assert lost(running, node_exists=True) is None
    assert "node n1 no longer exists" in str(lost(running, node_exists=False))
    pending: dict[str, Any] = {"spec": {}, "status": {"phase": "Pending"}}
    bound = {"metadata": {"name": "journal-c-bookie-1"}, "status": {"phase": "Bound"}}
    lost_claim = {"metadata": {"name": "ledgers-c-bookie-1"}, "status": {"phase": "Lost"}}
    assert lost(pending, claims=[bound, None], volumes_exist=[True]) is None
    assert "ledgers-c-bookie-1 is Lost" in str(lost(pending, claims=[bound, lost_claim]))
    assert "being deleted" in str(lost(pending, claims=[bound], volumes_exist=[False]))
    assert "pinned" in str(
        lost(pending, claims=[bound], volumes_exist=[True], affinity_nodes_exist=[False])
    )
    # a running pod's volumes are not looked at
    assert lost(running, node_exists=True, volumes_exist=[False]) is None
