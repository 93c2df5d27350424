"""``GET /admin/v2/broker-stats/topics`` (pulsar-admin ``broker-stats topics``, issue 26):
the topics a broker serves, by namespace, bundle (Pulsar's CRC32 layout) and domain, each
with Pulsar's broker-stats figures. Against every Magnetar target (on the cluster, the
brokers' answers together) and, with ``make test-clients-pulsar``, Apache Pulsar 4.0.7.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target
from tests.clients.test_bundles import pulsar_bundle_range
from tests.support.wait import wait_until

FIELDS = {
    "publishers", "replication", "subscriptions", "producerCount", "averageMsgSize",
    "msgRateIn", "msgRateOut", "msgInCount", "bytesInCount", "msgOutCount", "bytesOutCount",
    "msgThroughputIn", "msgThroughputOut", "storageSize", "backlogSize",
    "pendingAddEntriesCount",
}  # fmt: skip


def _served(target: Target) -> dict[str, Any]:
    """Every broker's broker-stats topics, merged (one broker: its own)."""
    merged: dict[str, Any] = {}
    for url in target.broker_http_urls or (target.admin_url,):
        status, found = call(
            dataclasses.replace(target, admin_url=url), "GET", "/admin/v2/broker-stats/topics"
        )
        assert status == 200, found
        for ns, bundles in found.items():
            for bundle, domains in bundles.items():
                for domain, topics in domains.items():
                    merged.setdefault(ns, {}).setdefault(bundle, {}).setdefault(domain, {}).update(
                        topics
                    )
    return merged


def test_broker_stats_topics(client_target: Target) -> None:
    t = client_target
    ns = f"public/bstats-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", f"/admin/v2/namespaces/{ns}", {"bundles": {"numBundles": 4}})[0] == 204
    full = f"persistent://{ns}/events"
    c = client(t)
    try:
        producer = c.create_producer(full, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        bundle = pulsar_bundle_range(full, 4)

        def listed() -> dict[str, Any] | None:
            return _served(t).get(ns, {}).get(bundle, {}).get("persistent", {}).get(full)

        wait_until(lambda: listed() is not None, timeout=30, what="the topic in broker-stats")
        entry = listed()
        assert entry is not None and FIELDS <= set(entry), sorted(FIELDS - set(entry or {}))
        assert (entry["msgInCount"], entry["producerCount"]) == (3, 1)
        assert entry["bytesInCount"] > 0 and len(entry["publishers"]) == 1
        producer.close()
    finally:
        c.close()
    status, _ = call(t, "GET", "/admin/v2/broker-stats/nosuch")
    assert status == 404


def test_load_report(client_target: Target) -> None:
    """``GET /admin/v2/broker-stats/load-report``: the load of the broker that owns a topic
    with a producer and a consumer, as Pulsar's LocalBrokerData. Apache Pulsar 4.0.7's
    standalone answers an empty 204 (docs/compatibility.md, "Admin REST API v2")."""
    t = client_target
    if t.name == "pulsar":
        assert call(t, "GET", "/admin/v2/broker-stats/load-report") == (204, None)
        return
    ns = f"public/load-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", f"/admin/v2/namespaces/{ns}", {"bundles": {"numBundles": 4}})[0] == 204
    full = f"persistent://{ns}/loaded"
    c = client(t)
    try:
        producer = c.create_producer(full, batching_enabled=False)
        consumer = c.subscribe(full, "s")
        producer.send(b"x")
        bundle = f"{ns}/{pulsar_bundle_range(full, 4)}"
        reports = []
        for url in t.broker_http_urls or (t.admin_url,):
            status, report = call(
                dataclasses.replace(t, admin_url=url), "GET", "/admin/v2/broker-stats/load-report"
            )
            assert status == 200 and report["loadReportType"] == "LocalBrokerData", report
            assert report["cpu"]["limit"] > 0 and report["cpu"]["usage"] >= 0
            assert 0 < report["memory"]["usage"] < report["memory"]["limit"]
            assert report["numBundles"] == len(report["bundles"])
            assert report.get("webServiceUrl") or report.get("webServiceUrlTls"), report
            reports.append(report)
        (owner,) = [r for r in reports if bundle in r["bundles"]]
        assert owner["numTopics"] >= 1
        assert owner["numProducers"] >= 1 and owner["numConsumers"] >= 1
        service_url = owner.get("pulsarServiceUrl") or owner.get("pulsarServiceUrlTls", "")
        assert service_url.startswith("pulsar"), owner
        consumer.close()
        producer.close()
    finally:
        c.close()
