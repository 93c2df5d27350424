"""Which entry logs garbage collection removes or rewrites."""

from __future__ import annotations

from magnetar.bookie.storage import compaction


def test_plan_removes_dead_logs_and_rewrites_mostly_dead_ones() -> None:
    usage = {
        1: {10: 100},  # all deleted -> remove
        2: {10: 900, 11: 100},  # 10% live -> rewrite
        3: {10: 400, 11: 600},  # 60% live -> keep
        4: {11: 50},  # all live -> keep
    }
    live = {11}.__contains__
    plan = compaction.plan(usage, live, threshold=0.5)
    assert plan.remove == [1]
    assert plan.rewrite == [2]
    assert plan


def test_plan_empty_when_everything_live() -> None:
    assert not compaction.plan({1: {1: 10}}, lambda _: True, threshold=0.5)
