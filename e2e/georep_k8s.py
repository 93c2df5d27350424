"""Geo-replication between two PulsarClusters on the local cluster (issue 25, acceptance point
5), called by e2e/test_pulsarcluster.py with the suite's installed cluster (``e2e``, two
brokers behind a proxy):

* a second PulsarCluster ``geo`` (1 etcd, 1 bookie, 1 broker, a proxy) in its own namespace,
  reconciled by the same operator, turns Ready;
* each cluster registers the other by its brokers' Service names (``magnetar admin clusters
  create``: the brokers reach each other through cluster DNS), and both get the same tenant
  and namespace, replicated to both clusters (docs/geo-replication.md, "Setting up two
  clusters", the same commands);
* a producer on each side publishes to the same topic; the broker pod of ``e2e`` that owns the
  topic is deleted mid-stream (its replicator to ``geo`` and ``geo``'s replicator to it both
  reconnect), and the publishing goes on until its replacement is Ready;
* a consumer on each side receives every receipted message of both producers exactly once: no
  loss, no duplicate (the replicator's resends are dropped by the deduplication a replicated
  topic has), no loop;
* deleting the second cluster leaves no claim.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pulsar
import yaml
from tests.support.wait import wait_until

from e2e.localcluster import Site, pod_ready

NS = "magnetar-geo"
NAME = "geo"
TENANT = "georep"
NAMESPACE = f"{TENANT}/ns"

CLUSTER = {
    "apiVersion": "magnetar.dev/v1alpha1",
    "kind": "PulsarCluster",
    "metadata": {"name": NAME},
    "spec": {
        "metadata": {"etcd": {"replicas": 1}},
        "bookies": {
            "replicas": 1, "ensembleSize": 1, "writeQuorum": 1, "ackQuorum": 1,
            "journal": {"size": "1Gi"}, "ledgers": {"size": "5Gi"},
        },
        "brokers": {"replicas": 1},
        "proxy": {"enabled": True},
        "persistence": {"reclaimPolicy": "Delete"},
    },
}  # fmt: skip


def _admin(url: str) -> Callable[..., str]:
    def run(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", url, *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, f"magnetar admin {' '.join(args)} ({url}): {out.stderr}"
        return out.stdout

    return run


def check(site: Site) -> None:
    """Apply the second cluster in its own namespace, check replication both ways, delete
    it (and its cluster record on the first)."""
    c = site.c
    c.k("apply", "-f", "-", stdin=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))  # fmt: skip
    try:
        _check(site)
    finally:
        c.k("-n", NS, "delete", "pulsarcluster", NAME, "--ignore-not-found", "--timeout=180s",
            timeout=200)  # fmt: skip
        wait_until(
            lambda: not c.k("-n", NS, "get", "pvc", "-o", "name").strip(),
            timeout=120,
            what="the second cluster's claims deleted",
        )
        c.k("delete", "namespace", NS, "--timeout=120s", timeout=150)


def _check(site: Site) -> None:
    c, admin = site.c, site.admin
    t0 = time.monotonic()
    c.k("-n", NS, "apply", "-f", "-", stdin=yaml.safe_dump(CLUSTER))
    c.k("-n", NS, "wait", f"pulsarcluster/{NAME}", "--for=condition=Ready", "--timeout=600s",
        timeout=620)  # fmt: skip
    site.timings["geo_ready"] = time.monotonic() - t0
    print(f"second PulsarCluster Ready {site.timings['geo_ready']:.1f}s after apply")
    proxy_ip = json.loads(c.k("-n", NS, "get", "svc", f"{NAME}-proxy", "-o", "json"))["spec"][
        "clusterIP"
    ]
    geo_admin = _admin(f"http://{proxy_ip}:8080")

    # each cluster registers the other by its brokers' Service (cluster DNS), then the same
    # tenant and namespace on both, replicated to both
    def register(run: Callable[..., str], other: str, other_ns: str) -> None:
        host = f"{other}-broker.{other_ns}.svc"
        run("clusters", "create", other, "--url", f"http://{host}:8080",
            "--broker-url", f"pulsar://{host}:6650")  # fmt: skip

    register(admin, NAME, NS)
    register(geo_admin, site.cluster_name, site.namespace)
    both = f"{site.cluster_name},{NAME}"
    for run in (admin, geo_admin):
        run("tenants", "create", TENANT, "--allowed-clusters", both)
        run("namespaces", "create", NAMESPACE)
        run("namespaces", "set-clusters", NAMESPACE, "--clusters", both)
    assert json.loads(geo_admin("-o", "json", "namespaces", "get-clusters", NAMESPACE)) == [
        site.cluster_name,
        NAME,
    ]
    try:
        _replicate_both_ways(site, geo_admin, f"pulsar://{proxy_ip}:6650")
    finally:
        admin("clusters", "delete", NAME)


def _replicate_both_ways(site: Site, geo_admin: Callable[..., str], geo_service_url: str) -> None:
    c, namespace, admin = site.c, site.namespace, site.admin
    topic = f"persistent://{NAMESPACE}/both-ways-{int(time.time())}"
    here = pulsar.Client(site.service_url, operation_timeout_seconds=120)
    there = pulsar.Client(geo_service_url, operation_timeout_seconds=120)
    try:
        consumers = {
            side: client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
            for side, client in ((site.cluster_name, here), (NAME, there))
        }
        pubs = [
            site.publisher(here, topic, "from-e2e"),
            site.publisher(there, topic, f"from-{NAME}"),
        ]
        for pub in pubs:
            pub.start()
        wait_until(lambda: all(p.count() >= 1000 for p in pubs), timeout=180,
                   what="1,000 receipts on each side")  # fmt: skip

        def brokers() -> list[dict[str, Any]]:
            out = c.k("-n", namespace, "get", "pods", "-l",
                      "app.kubernetes.io/component=broker", "-o", "json")  # fmt: skip
            items: list[dict[str, Any]] = json.loads(out)["items"]
            return items

        url = json.loads(admin("-o", "json", "topics", "lookup", topic))["brokerUrl"]
        ip = str(url).rsplit("/", 1)[-1].split(":")[0]
        victim = next(p for p in brokers() if p["status"].get("podIP") == ip)
        old_uid = victim["metadata"]["uid"]
        t0 = time.monotonic()
        c.k("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")

        def replaced() -> bool:
            pods = brokers()
            return len(pods) >= 2 and all(
                p["metadata"]["uid"] != old_uid
                and pod_ready(p)
                and p["status"]["phase"] == "Running"
                for p in pods
            )

        wait_until(replaced, timeout=300, interval=1, what="the broker replaced and Ready")
        site.timings["georep_broker_replaced"] = time.monotonic() - t0
        at = [p.count() for p in pubs]
        wait_until(lambda: all(p.count() >= n + 1000 for p, n in zip(pubs, at, strict=True)),
                   timeout=180, what="1,000 more receipts on each side")  # fmt: skip
        for pub in pubs:
            pub.finish()
        wanted = set().union(*(p.receipted for p in pubs))
        sent = {f"{p.prefix}-{i}" for p in pubs for i in range(p.sent)}
        for side, consumer in consumers.items():
            counts = _receive(consumer, wanted)
            lost = wanted - counts.keys()
            dups = {k: n for k, n in counts.items() if n > 1}
            alien = counts.keys() - sent
            print(
                f"georep {side}: receipted {len(wanted)} (of {len(sent)} sent, "
                f"{sum(len(p.failed) for p in pubs)} failed), received {sum(counts.values())} "
                f"({len(counts)} distinct), lost {len(lost)}, duplicated {len(dups)}"
            )
            assert not lost, f"{side}: {len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}"
            assert not dups, f"{side}: {len(dups)} messages received twice, e.g. {sorted(dups)[:5]}"
            assert not alien, f"{side}: messages never sent: {sorted(alien)[:5]}"
            consumer.close()
        for run, remote in ((admin, NAME), (geo_admin, site.cluster_name)):
            stats = json.loads(run("-o", "json", "topics", "stats", topic))
            print(f"replication to {remote}: {json.dumps(stats.get('replication', {}))[:400]}")
            assert remote in stats.get("replication", {}), stats.get("replication")
    finally:
        here.close()
        there.close()


def _receive(consumer: pulsar.Consumer, wanted: set[str]) -> collections.Counter[str]:
    """Each payload's count: receive (and acknowledge) until every wanted payload came, then
    10 s more, so a duplicate arriving late is counted too."""
    counts: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + 300
    quiet_until: float | None = None
    while time.monotonic() < deadline:
        if quiet_until is None and wanted <= counts.keys():
            quiet_until = time.monotonic() + 10
        if quiet_until is not None and time.monotonic() > quiet_until:
            break
        try:
            msg = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            continue
        counts[msg.data().decode()] += 1
        consumer.acknowledge(msg)
    return counts
