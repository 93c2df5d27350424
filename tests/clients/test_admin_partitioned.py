"""A partitioned topic's base name in the topic calls of the admin REST API (issue 26), with
Apache Pulsar's answers: what applies to every partition runs on each (its owner's, on the
two-broker cluster: the namespace has 16 bundles so the partitions spread), what names one
position answers 405 with Pulsar's reason, what reads one topic's data answers 404.

Against every Magnetar target of the client suites, and with ``make test-clients-pulsar``
against Apache Pulsar 4.0.7 itself, so the same expectations hold for both.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pulsar

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target
from tests.clients.test_bundles import pulsar_bundle_range
from tests.support.wait import wait_until

PARTITIONS = 4
PER_PARTITION = 2


def _backlog(target: Target, base: str) -> tuple[int, list[int]]:
    status, stats = call(target, "GET", f"{base}/partitioned-stats?perPartition=true")
    assert status == 200, stats
    per = [
        stats["partitions"][f"persistent://{base.split('/admin/v2/persistent/')[1]}-partition-{i}"][
            "subscriptions"
        ]["s"]["msgBacklog"]
        for i in range(PARTITIONS)
    ]
    return stats["subscriptions"]["s"]["msgBacklog"], per


def _spread(t: Target, full: str) -> None:
    """On the cluster: the partitions' bundles (Pulsar's CRC32 layout) taken in turn by each
    broker (an authoritative lookup takes the bundle asked about), so the calls of the test
    reach the other broker's partitions through its admin API."""
    bundles = sorted({pulsar_bundle_range(f"{full}-partition-{i}", 16) for i in range(PARTITIONS)})
    rest = full.removeprefix("persistent://")
    for i in range(PARTITIONS):
        j = bundles.index(pulsar_bundle_range(f"{full}-partition-{i}", 16))
        asked = dataclasses.replace(t, admin_url=t.broker_http_urls[j % 2])
        lookup = f"/lookup/v2/topic/persistent/{rest}-partition-{i}?authoritative=true"
        assert call(asked, "GET", lookup)[0] == 200
    owners = {
        call(t, "GET", f"/lookup/v2/topic/persistent/{rest}-partition-{i}")[1]["brokerUrl"]
        for i in range(PARTITIONS)
    }
    assert len(owners) == min(2, len(bundles)), owners


def _reason(answer: Any) -> str:
    assert isinstance(answer, dict), answer
    return str(answer["reason"])


def test_partitioned_topic_base_name(client_target: Target) -> None:
    t = client_target
    ns = f"public/parts-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", f"/admin/v2/namespaces/{ns}", {"bundles": {"numBundles": 16}})[0] == 204
    base = f"/admin/v2/persistent/{ns}/orders"
    full = f"persistent://{ns}/orders"
    assert call(t, "PUT", f"{base}/partitions", PARTITIONS)[0] == 204
    if len(t.broker_http_urls) >= 2:
        _spread(t, full)

    # subscriptions: created on every partition, listed once, refused twice
    earliest = {"ledgerId": -1, "entryId": -1}
    assert call(t, "PUT", f"{base}/subscription/s", earliest) == (204, None)
    status, answer = call(t, "PUT", f"{base}/subscription/s", earliest)
    assert (status, _reason(answer)) == (409, "Subscription already exists for topic")
    assert call(t, "GET", f"{base}/subscriptions") == (200, ["s"])
    for i in range(PARTITIONS):
        assert call(t, "GET", f"{base}-partition-{i}/subscriptions") == (200, ["s"])

    c = client(t)
    try:
        producer = c.create_producer(
            full,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for n in range(PARTITIONS * PER_PARTITION):
            producer.send(f"m{n}".encode())
        producer.close()
        sent = time.monotonic()
    finally:
        c.close()
    total = PARTITIONS * PER_PARTITION
    assert _backlog(t, base) == (total, [PER_PARTITION] * PARTITIONS)

    # what names one position, or one topic's data, is not for a base name
    for method, path, body in (
        ("POST", "/subscription/s/skip/1", None),
        ("POST", "/subscription/s/resetcursor", {"ledgerId": 1, "entryId": 0}),
        ("GET", "/subscription/s/position/1", None),
        ("GET", "/examinemessage?initialPosition=earliest&messagePosition=1", None),
        ("GET", "/ledger/1/entry/0", None),
        ("POST", "/terminate", None),
    ):
        status, answer = call(t, method, base + path, body)
        assert status == 405, (path, status, answer)
        assert "partitioned" in _reason(answer), answer
    for path in ("/stats", "/internalStats", "/lastMessageId"):
        status, answer = call(t, "GET", base + path)
        assert status == 404 and full in _reason(answer), (path, answer)

    status, internal = call(t, "GET", f"{base}/partitioned-internalStats")
    assert status == 200
    assert internal["metadata"]["partitions"] == PARTITIONS
    assert sorted(internal["partitions"]) == [f"{full}-partition-{i}" for i in range(PARTITIONS)]
    for part in internal["partitions"].values():
        assert part["numberOfEntries"] == PER_PARTITION
        assert "s" in part["cursors"]

    # clear the backlog, reset to the start, expire: on every partition
    assert call(t, "POST", f"{base}/subscription/s/skip_all") == (204, None)
    assert _backlog(t, base) == (0, [0] * PARTITIONS)
    assert call(t, "POST", f"{base}/subscription/s/resetcursor/0") == (204, None)
    assert _backlog(t, base) == (total, [PER_PARTITION] * PARTITIONS)
    # 0 seconds expires nothing (Pulsar's isEntryExpired); 1 second, once every message is
    # older than that, expires them all
    assert call(t, "POST", f"{base}/subscription/s/expireMessages/0") == (204, None)
    assert _backlog(t, base) == (total, [PER_PARTITION] * PARTITIONS)
    time.sleep(max(0.0, sent + 1.5 - time.monotonic()))
    assert call(t, "POST", f"{base}/subscription/s/expireMessages/1") == (204, None)
    wait_until(lambda: _backlog(t, base)[0] == 0, timeout=30, what="the backlog expired")
    for path in ("/subscription/nosuch/skip_all", "/subscription/nosuch/expireMessages/0"):
        status, answer = call(t, "POST", base + path)
        assert status == 404
        assert _reason(answer) == f"Subscription nosuch not found for topic {full}"
    status, answer = call(t, "DELETE", f"{base}/subscription/nosuch")
    assert (status, _reason(answer)) == (404, "Subscription not found")
    assert call(t, "DELETE", f"{base}/subscription/s") == (204, None)
    assert call(t, "GET", f"{base}/subscriptions") == (200, [])

    # terminate each partition: the last message id of each, by partition index
    status, ends = call(t, "POST", f"{base}/terminate/partitions")
    assert status == 200 and sorted(ends) == [str(i) for i in range(PARTITIONS)]
    for i, end in ends.items():
        assert (end["entryId"], end["partitionIndex"], end["batchIndex"]) == (1, -1, -1), i
        status, last = call(t, "GET", f"{base}-partition-{i}/lastMessageId")
        assert status == 200 and (last["ledgerId"], last["entryId"]) == (end["ledgerId"], 1)
    assert call(t, "PUT", f"{base}/unload") == (204, None)
    assert call(t, "DELETE", f"{base}/partitions?force=true") == (204, None)
