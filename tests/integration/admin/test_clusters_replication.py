"""Clusters CRUD, namespace replication clusters and the tenant's allowed clusters, with bad
input: the same calls against a Magnetar standalone and against Apache Pulsar 4.0.7 (when
``scripts/bench/install_pulsar.sh`` installed it), which must give the same statuses and
reasons (docs/geo-replication.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.admin.conftest import Admin, running_standalone
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[3]
PULSAR_HOME = ROOT / ".cache" / "pulsar-4.0.7"


def _pulsar(tmp: Path) -> Iterator[str]:
    if not PULSAR_HOME.exists():
        pytest.skip("Apache Pulsar 4.0.7 is not installed (scripts/bench/install_pulsar.sh)")
    spec = importlib.util.spec_from_file_location("peer_systems", ROOT / "bench/peers/systems.py")
    assert spec is not None and spec.loader is not None
    systems = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(systems)
    pulsar = systems.PulsarStandalone(tmp)
    pulsar.install()
    pulsar.start()
    try:
        yield f"http://127.0.0.1:{pulsar.http_port}"
    finally:
        pulsar.stop()


@pytest.fixture(scope="module", params=["magnetar", "pulsar"])
def admin(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Admin]:
    if request.param == "pulsar":
        for url in _pulsar(tmp_path_factory.mktemp("repl-pulsar")):
            yield Admin(url)
    else:
        for proc in running_standalone(tmp_path_factory, "repl-admin"):
            yield Admin(proc.http_url)


def _reason(answer: object) -> str:
    assert isinstance(answer, dict) and isinstance(answer.get("reason"), str), answer
    return str(answer["reason"])


def test_cluster_crud(admin: Admin) -> None:
    east = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:2"}
    assert admin.put("/clusters/crud-east", east) == (200, None)
    status, answer = admin.put("/clusters/crud-east", east)
    assert (status, _reason(answer)) == (409, "Cluster already exists")
    status, got = admin.get("/clusters/crud-east")
    assert status == 200 and {k: got[k] for k in east} == east
    assert "crud-east" in admin.get("/clusters")[1]
    assert admin.post("/clusters/crud-east", {"serviceUrl": "http://127.0.0.1:3"}) == (200, None)
    status, got = admin.get("/clusters/crud-east")
    assert got["serviceUrl"] == "http://127.0.0.1:3" and "brokerServiceUrl" not in got
    assert admin.post("/clusters/crud-nope", {"serviceUrl": "http://x:1"})[0] == 404
    assert admin.delete("/clusters/crud-nope")[0] == 404
    status, answer = admin.put("/clusters/bad%20name", east)
    assert status == 412, answer
    assert admin.delete("/clusters/crud-east") == (204, None)
    assert admin.get("/clusters/crud-east")[0] == 404


def test_replication_clusters_checked_against_clusters_and_tenant(admin: Admin) -> None:
    east = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:2"}
    assert admin.put("/clusters/repl-east", east) == (200, None)
    assert admin.put("/tenants/geo-t", {"allowedClusters": ["standalone"]}) == (204, None)
    assert admin.put("/namespaces/geo-t/ns") == (204, None)
    # no replication clusters given: the local cluster
    assert admin.get("/namespaces/geo-t/ns/replication") == (200, ["standalone"])
    ns = "/namespaces/geo-t/ns/replication"
    refused = [
        ([], 412, "ClusterIds should not be null or empty"),
        (["global"], 412, "Cannot specify global in the list of replication clusters"),
        (["standalone", "mars"], 403, "Invalid cluster id: mars"),
        (
            ["standalone", "repl-east"],
            403,
            "Cluster [repl-east] is not in the list of allowed clusters list for tenant [geo-t]",
        ),
    ]
    for clusters, status, reason in refused:
        got, answer = admin.post(ns, clusters)
        assert (got, _reason(answer)) == (status, reason), clusters
    got, answer = admin.put("/namespaces/geo-t/ns2", {"replication_clusters": ["repl-east"]})
    assert (got, _reason(answer)) == (
        403,
        "Cluster [repl-east] is not in the list of allowed clusters list for tenant [geo-t]",
    )
    assert admin.post("/namespaces/geo-t/missing/replication", ["standalone"])[0] == 404
    assert admin.get("/namespaces/geo-t/ns/replication") == (200, ["standalone"])
    # allowed: stored once each, sorted
    allowed = {"allowedClusters": ["standalone", "repl-east"]}
    assert admin.post("/tenants/geo-t", allowed) == (204, None)
    assert admin.post(ns, ["standalone", "repl-east", "repl-east"]) == (200, None)
    assert admin.get(ns) == (200, ["repl-east", "standalone"])
    assert admin.get("/namespaces/geo-t/ns")[1]["replication_clusters"] == [
        "repl-east",
        "standalone",
    ]
    assert admin.put("/namespaces/geo-t/ns3", {"replication_clusters": ["repl-east"]}) == (
        204,
        None,
    )
    assert admin.get("/namespaces/geo-t/ns3/replication") == (200, ["repl-east"])
    # back to the local cluster only, so the cluster record can go
    assert admin.post(ns, ["standalone"]) == (200, None)


def test_topic_replication_clusters(admin: Admin) -> None:
    east = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:2"}
    assert admin.put("/clusters/topic-east", east) == (200, None)
    assert admin.put("/tenants/geo-tt", {"allowedClusters": ["standalone"]}) == (204, None)
    assert admin.put("/namespaces/geo-tt/ns") == (204, None)
    assert admin.put("/persistent/geo-tt/ns/tp") == (204, None)
    path = "/persistent/geo-tt/ns/tp/replication"
    assert admin.get(path) == (200, None)  # unset: the namespace's apply
    refused = [
        ([], 412, "ClusterIds should not be null or empty"),
        (["global"], 412, "Cannot specify global in the list of replication clusters"),
        (["standalone", "mars"], 403, "Invalid cluster id: mars"),
        (
            ["standalone", "topic-east"],
            403,
            "Cluster [topic-east] is not in the list of allowed clusters list for tenant [geo-tt]",
        ),
    ]
    for clusters, status, reason in refused:
        got, answer = admin.post(path, clusters)
        assert (got, _reason(answer)) == (status, reason), clusters
    assert admin.post("/persistent/geo-tt/ns/missing/replication", ["standalone"])[0] == 404
    assert admin.post(path, ["standalone"]) == (204, None)
    # (Pulsar applies topic policies asynchronously)
    wait_until(lambda: admin.get(path) == (200, ["standalone"]), what="topic replication set")
    assert admin.delete(path) == (204, None)
    wait_until(lambda: admin.get(path) == (200, None), what="topic replication removed")


def test_replicated_subscription_status(admin: Admin) -> None:
    """``.../subscription/{sub}/replicatedSubscriptionStatus``: the flag a consumer's
    ``replicate_subscription_state`` sets, read and set by the administrator (on each
    partition of a partitioned topic)."""
    assert admin.put("/tenants/rss", {"allowedClusters": ["standalone"]}) == (204, None)
    assert admin.put("/namespaces/rss/ns") == (204, None)
    t = "/persistent/rss/ns/t"
    assert admin.put(t) == (204, None)
    assert admin.put(f"{t}/subscription/s") == (204, None)
    status = f"{t}/subscription/s/replicatedSubscriptionStatus"
    assert admin.get(status) == (200, {"persistent://rss/ns/t": False})
    assert admin.post(status, True) == (204, None)
    assert admin.get(status) == (200, {"persistent://rss/ns/t": True})
    assert admin.get(f"{t}/stats")[1]["subscriptions"]["s"]["isReplicated"] is True
    assert admin.post(status, False) == (204, None)
    assert admin.get(status) == (200, {"persistent://rss/ns/t": False})
    assert admin.post(status)[0] == 400  # no body
    assert admin.post(status, "yes")[0] == 400
    missing = f"{t}/subscription/nope/replicatedSubscriptionStatus"
    for answer in (admin.post(missing, True), admin.get(missing)):
        assert (answer[0], _reason(answer[1])) == (
            404,
            "Subscription nope not found for topic persistent://rss/ns/t",
        )
    no_topic = "/persistent/rss/ns/nope/subscription/s/replicatedSubscriptionStatus"
    for answer in (admin.post(no_topic, True), admin.get(no_topic)):
        assert (answer[0], _reason(answer[1])) == (404, "Topic persistent://rss/ns/nope not found")
    p = "/persistent/rss/ns/p"
    assert admin.put(f"{p}/partitions", 2) == (204, None)
    assert admin.put(f"{p}/subscription/s") == (204, None)
    partitioned = f"{p}/subscription/s/replicatedSubscriptionStatus"
    parts = [f"persistent://rss/ns/p-partition-{i}" for i in range(2)]
    assert admin.get(partitioned) == (200, dict.fromkeys(parts, False))
    assert admin.post(partitioned, True) == (204, None)
    assert admin.get(partitioned) == (200, dict.fromkeys(parts, True))
    status, answer = admin.post(
        "/non-persistent/rss/ns/np/subscription/s/replicatedSubscriptionStatus", True
    )
    assert (status, _reason(answer)) == (
        405,
        "Cannot enable/disable replicated subscriptions on non-persistent topics",
    )
