"""Topic policies as their own resource (pulsar-admin's ``topicPolicies``, issue 26):
``GET / POST / DELETE /admin/v2/persistent/{t}/{ns}/{topic}/{policy}``, answered as Apache
Pulsar answers them and applied by the broker (a producer or consumer over
``maxProducers`` / ``maxConsumers`` is refused with Pulsar's reason; removing the policy lifts
the limit). On a partitioned topic's base name they apply to every partition. Against every
Magnetar target and, with ``make test-clients-pulsar``, Apache Pulsar 4.0.7 (which applies
topic policies a moment after the call: the checks wait, within a bound).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target
from tests.support.wait import wait_until


def _refused(attempt: Any) -> str | None:
    """The error of ``attempt()`` (None when it succeeded: what it made is closed)."""
    try:
        made = attempt()
    except Exception as err:
        return str(err)
    made.close()
    return None


def _busy(attempt: Any) -> bool:
    found = _refused(attempt)
    return found is not None and "Busy" in found


@pytest.mark.parametrize("partitions", [0, 2])
def test_topic_policies(client_target: Target, partitions: int) -> None:
    t = client_target
    local = f"policies-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    created = (
        call(t, "PUT", f"{base}/partitions", partitions) if partitions else call(t, "PUT", base)
    )
    assert created[0] == 204

    # values: unset, refused, set, read back
    assert call(t, "GET", f"{base}/maxProducers") == (200, None)
    status, answer = call(t, "POST", f"{base}/maxProducers", -1)
    assert (status, answer["reason"]) == (412, "maxProducers must be 0 or more")
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    for policy, value in (("maxProducers", 1), ("maxConsumers", 1), ("retention", retention)):
        assert call(t, "POST", f"{base}/{policy}", value) == (204, None), policy
        wait_until(lambda p=policy, v=value: call(t, "GET", f"{base}/{p}") == (200, v), timeout=30)
    status, answer = call(
        t, "GET", f"/admin/v2/persistent/public/default/nosuch-{local}/maxProducers"
    )
    assert status == 404, answer

    # applied: one producer and one consumer, not two
    c = client(t)
    try:
        first = c.create_producer(full)
        wait_until(lambda: _busy(lambda: c.create_producer(full)), timeout=30, what="limit")
        consumer = c.subscribe(full, "s")
        wait_until(
            lambda: _busy(lambda: c.subscribe(full, "other")), timeout=30, what="consumer limit"
        )
        # removed: the namespace's (none) applies again
        assert call(t, "DELETE", f"{base}/maxProducers") == (204, None)
        wait_until(lambda: call(t, "GET", f"{base}/maxProducers") == (200, None), timeout=30)
        wait_until(
            lambda: _refused(lambda: c.create_producer(full)) is None, timeout=30, what="lifted"
        )
        first.close()
        consumer.close()
    finally:
        c.close()
    assert call(t, "DELETE", f"{base}/retention") == (204, None)
    if partitions:
        assert call(t, "DELETE", f"{base}/partitions?force=true")[0] == 204
    else:
        assert call(t, "DELETE", f"{base}?force=true")[0] == 204


def test_offload_policies_are_a_topic_policy(client_target: Target) -> None:
    """The thresholds of ``offloadPolicies`` are read back as set (Pulsar fills in its
    other fields with the broker's defaults)."""
    t = client_target
    base = f"/admin/v2/persistent/public/default/offload-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", base)[0] == 204
    status, answer = call(t, "POST", f"{base}/offloadPolicies", {"managedLedgerOffloadDriver": "x"})
    assert status == 412 and answer["reason"].startswith("The driver is not supported"), answer
    wanted = {
        "managedLedgerOffloadDriver": "aws-s3",
        "managedLedgerOffloadBucket": "offloaded",
        "managedLedgerOffloadRegion": "local",
        "managedLedgerOffloadThresholdInBytes": 1024,
        "managedLedgerOffloadDeletionLagInMillis": 60000,
    }
    assert call(t, "POST", f"{base}/offloadPolicies", wanted) == (204, None)

    def read_back() -> bool:
        status, got = call(t, "GET", f"{base}/offloadPolicies")
        return status == 200 and isinstance(got, dict) and got.items() >= wanted.items()

    wait_until(read_back, timeout=30, what="the offload policies")
    assert call(t, "DELETE", f"{base}/offloadPolicies") == (204, None)
    wait_until(lambda: call(t, "GET", f"{base}/offloadPolicies") == (200, None), timeout=30)


def test_negative_values_are_refused_with_pulsars_412(client_target: Target) -> None:
    """A negative messageTTL (pulsar-admin's query parameter) or compactionThreshold on a
    topic: 412 with Pulsar's reason, nothing stored."""
    t = client_target
    path = f"/admin/v2/persistent/public/default/negative-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", path)[0] == 204
    for url, body, reason in (
        (f"{path}/messageTTL?messageTTL=-5", None, "Invalid value for message TTL"),
        (f"{path}/compactionThreshold", -5, "Invalid value for compactionThreshold"),
    ):
        status, answer = call(t, "POST", url, body)
        assert (status, answer["reason"]) == (412, reason), url
    assert call(t, "GET", f"{path}/messageTTL")[1] is None
    assert call(t, "GET", f"{path}/compactionThreshold")[1] is None
    assert call(t, "DELETE", path)[0] == 204
