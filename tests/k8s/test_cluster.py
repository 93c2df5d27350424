"""PulsarCluster end to end on the real control plane: objects and their specs, scaling up,
status conditions and observedGeneration, and cleanup on deletion (garbage collection).
Scaling bookies down: test_bookie_decommission.py."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.helpers import CR, FakeKubelet, condition, eventually
from tests.support.procs import Proc

pytestmark = pytest.mark.k8s

SPEC: dict[str, Any] = {
    "metadata": {"etcd": {"replicas": 1}},
    "bookies": {
        "replicas": 3,
        "ensembleSize": 2,
        "writeQuorum": 2,
        "ackQuorum": 2,
        "journal": {"storageClassName": "local-nvme", "size": "2Gi"},
        "ledgers": {"size": "8Gi"},
    },
    "brokers": {"replicas": 2, "config": {"maxMessageSize": "1048576"}},
    "persistence": {"reclaimPolicy": "Delete"},
}


def make_cluster(cr: CR, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return cr.create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {"name": name},
            "spec": spec or SPEC,
        },
    )


def test_cluster_objects_scaling_status_and_cleanup(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    cr = CR(api, namespace)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    policy = client.PolicyV1Api(api)
    pc = make_cluster(cr, "dev")
    uid = pc["metadata"]["uid"]

    # -- the expected objects, with the expected specs and owner references
    bookies = eventually(
        lambda: apps.read_namespaced_stateful_set("dev-bookie", namespace),
        what="bookie StatefulSet",
    )
    assert bookies.spec.replicas == 3
    assert bookies.spec.update_strategy.type == "OnDelete"
    claims = {c.metadata.name: c.spec for c in bookies.spec.volume_claim_templates}
    assert set(claims) == {"journal", "ledgers"}
    assert claims["journal"].storage_class_name == "local-nvme"
    assert claims["journal"].resources.requests["storage"] == "2Gi"
    assert claims["ledgers"].resources.requests["storage"] == "8Gi"
    assert bookies.spec.persistent_volume_claim_retention_policy.when_deleted == "Delete"
    owner = bookies.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "PulsarCluster",
        "dev",
        uid,
        True,
    )

    etcd = apps.read_namespaced_stateful_set("dev-etcd", namespace)
    assert etcd.spec.replicas == 1
    broker = eventually(lambda: apps.read_namespaced_deployment("dev-broker", namespace))
    assert broker.spec.replicas == 2
    svc = eventually(lambda: core.read_namespaced_service("dev-broker", namespace))
    assert {p.name: p.port for p in svc.spec.ports} == {"pulsar": 6650, "http": 8080}
    cm = core.read_namespaced_config_map("dev-broker", namespace)
    assert "maxMessageSize=1048576\n" in cm.data["broker.conf"]
    assert "managedLedgerDefaultEnsembleSize=2\n" in cm.data["broker.conf"]
    for name in ("dev-etcd", "dev-bookie", "dev-broker"):
        pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
        assert pdb.spec.max_unavailable == 1
        assert pdb.metadata.owner_references[0].uid == uid
    for name in ("dev-etcd", "dev-etcd-client", "dev-bookie", "dev-broker"):
        assert core.read_namespaced_service(name, namespace).metadata.owner_references[0].uid == uid

    # -- pods come up (our stand-in kubelet marks them Ready): status converges to Ready
    def ready() -> dict[str, Any]:
        obj = cr.get("pulsarclusters", "dev")
        cond = condition(obj, "Ready")
        assert cond and cond["status"] == "True", obj.get("status")
        return obj

    obj = eventually(ready, timeout=60, what="PulsarCluster Ready")
    st = obj["status"]
    assert st["observedGeneration"] == obj["metadata"]["generation"]
    types = {c["type"]: c for c in st["conditions"]}
    assert set(types) == {"Ready", "MetadataReady", "BookiesReady", "BrokersReady", "OffloadReady"}
    for c in types.values():
        assert c["status"] == "True" and c["reason"] and c["lastTransitionTime"]
    assert types["OffloadReady"]["reason"] == "Disabled"
    assert st["bookies"]["summary"] == "3/3"
    assert st["serviceUrl"] == f"pulsar://dev-broker.{namespace}.svc:6650"
    assert st["adminUrl"] == f"http://dev-broker.{namespace}.svc:8080"
    ready_since = types["Ready"]["lastTransitionTime"]

    # -- a replicas change: brokers 2 -> 3 at once, bookies 3 -> 4 up at once
    cr.patch(
        "pulsarclusters", "dev", {"spec": {"brokers": {"replicas": 3}, "bookies": {"replicas": 4}}}
    )
    eventually(
        lambda: apps.read_namespaced_deployment("dev-broker", namespace).spec.replicas == 3,
        what="brokers scaled to 3",
    )
    eventually(
        lambda: apps.read_namespaced_stateful_set("dev-bookie", namespace).spec.replicas == 4,
        what="bookies scaled to 4",
    )
    obj = eventually(
        lambda: (
            (o := ready())
            and o["status"]["observedGeneration"] == o["metadata"]["generation"]
            and o
        ),
        timeout=60,
        what="Ready at the new generation",
    )
    assert obj["status"]["bookies"]["summary"] == "4/4"
    # Ready may have dipped while pods started; if it did not, its transition time stayed.
    assert condition(obj, "Ready")["lastTransitionTime"] >= ready_since

    # Scaling bookies down decommissions them first: tests/k8s/test_bookie_decommission.py.

    # -- deleting the cluster removes every owned object (kube-controller-manager's GC)
    cr.delete("pulsarclusters", "dev")

    def gone() -> bool:
        assert not cr.exists("pulsarclusters", "dev")
        for read in (
            lambda: apps.read_namespaced_stateful_set("dev-bookie", namespace),
            lambda: apps.read_namespaced_stateful_set("dev-etcd", namespace),
            lambda: apps.read_namespaced_deployment("dev-broker", namespace),
            lambda: core.read_namespaced_service("dev-broker", namespace),
            lambda: core.read_namespaced_config_map("dev-bookie", namespace),
        ):
            try:
                read()
            except ApiException as e:
                assert e.status == 404
            else:
                return False
        return True

    eventually(gone, timeout=60, what="owned objects garbage-collected")
    # persistence.reclaimPolicy=Delete: the bookie and etcd PVCs go too.
    eventually(
        lambda: not core.list_namespaced_persistent_volume_claim(namespace).items,
        timeout=60,
        what="PVCs deleted",
    )
    deleted = [e.reason for e in client.CoreV1Api(api).list_namespaced_event(namespace).items]
    assert "DeletedVolumes" in deleted
