"""What a Tenant/Topic does while what it needs is not there yet (issue 29): the retry
schedule, and what its Ready condition says it waits for."""

from __future__ import annotations

from magnetar_operator import handlers, resources


def test_backoff_starts_at_one_second_and_doubles_up_to_the_cap() -> None:
    delays = [resources.backoff(r, first=1.0, cap=10.0) for r in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert resources.backoff(10_000, first=1.0, cap=10.0) == 10.0  # no overflow


def test_cluster_readiness_as_a_tenant_sees_it() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert handlers._not_ready(ready) is None
    starting = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "BrokersNotReady", "message": "0/1"}
            ]
        }
    }
    assert handlers._not_ready(starting) == "BrokersNotReady: 0/1"
    assert handlers._not_ready({}) == "not reconciled yet"
