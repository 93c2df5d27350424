"""A bookie scale-down decommissions first: the highest ordinal is decommissioned through the
cluster's admin API, and the StatefulSet's replicas are lowered (and the pod's claims
deleted) only once the cluster reports it ``decommissioned``; then the next one. A bookie
whose node is deleted is reported (``nodeLossPolicy: Manual``) or, with ``Replace``,
decommissioned and then recycled (claims and pod deleted) so a fresh bookie takes its place.

The data plane is real and runs on loopback: etcd, four ``magnetar bookie`` processes that
advertise the addresses of the StatefulSet's pods (``<pod>.<service>.<namespace>.svc``, as
the operator's bookies do; nothing connects to them, no ledger is written), a ``magnetar
broker`` whose admin API the PulsarCluster names (annotation ``magnetar.dev/admin-url``)
and, started only once the operator is seen waiting, a ``magnetar autorecovery`` whose
auditor finishes the decommissions. The test plays kubelet: pods turn Ready, and a bookie
process stops once its pod is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from magnetar.client import admin
from tests.k8s.helpers import CR, FakeKubelet, condition, events, eventually
from tests.support.autorecovery import AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.procs import Proc
from tests.support.standalone import BrokerProc

pytestmark = pytest.mark.k8s

NAME = "dc"


class DataPlane:
    """etcd, bookies named after the pods, a broker; autorecovery on demand."""

    def __init__(self, workdir: Path, namespace: str, bookies: int) -> None:
        self.workdir = workdir
        self.namespace = namespace
        self.etcd = EtcdServer(workdir / "etcd").start()
        self.bookies: dict[str, BookieProc] = {}
        self.retired: list[BookieProc] = []
        self.autorecovery: AutorecoveryProc | None = None
        self.broker: BrokerProc | None = None
        for i in range(bookies):
            self.start_bookie(f"{NAME}-bookie-{i}")
        self.broker = BrokerProc(self.etcd.url, workdir).start()

    def start_bookie(self, pod: str) -> None:
        """A bookie for ``pod``, on a fresh disk, at the pod's address."""
        old = self.bookies.pop(pod, None)
        if old is not None:
            self.retired.append(old)
        address = f"{pod}.{NAME}-bookie.{self.namespace}.svc"
        proc = BookieProc(self.etcd.url, self.workdir, extra_args=["--advertised-address", address])
        self.bookies[pod] = proc.start()

    @property
    def admin_url(self) -> str:
        assert self.broker is not None
        return f"http://127.0.0.1:{self.broker.http_port}"

    def listed(self) -> list[dict[str, Any]]:
        doc = admin.AdminClient(self.admin_url, timeout=10).call(
            "GET", "/admin/v2/bookies/all", admin.NO_BODY
        )
        return list(doc["bookies"])

    def states(self) -> dict[str, str]:
        """Pod name -> its bookie's state, as the broker's admin API reports it."""
        return {b["bookieId"].split(".", 1)[0]: b["state"] for b in self.listed()}

    def start_autorecovery(self) -> None:
        self.autorecovery = AutorecoveryProc(self.etcd.url, self.workdir).start()

    def stop(self) -> None:
        procs = [
            self.autorecovery,
            self.broker,
            *self.bookies.values(),
            *self.retired,
            self.etcd,
        ]
        for proc in procs:
            if proc is not None:
                proc.stop()


@pytest.fixture
def data_plane(tmp_path: Path, namespace: str) -> Iterator[DataPlane]:
    if not etcd_available():
        pytest.skip("etcd binary not available")
    plane = DataPlane(tmp_path, namespace, bookies=4)
    try:
        yield plane
    finally:
        plane.stop()


def create_cluster(cr: CR, plane: DataPlane, bookies: int, **more: Any) -> None:
    cr.create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {"name": NAME, "annotations": {"magnetar.dev/admin-url": plane.admin_url}},
            "spec": {
                "metadata": {"etcd": {"replicas": 1}},
                "brokers": {"replicas": 1},
                "bookies": {
                    "replicas": bookies,
                    "ensembleSize": 2,
                    "writeQuorum": 2,
                    "ackQuorum": 2,
                    **more,
                },
            },
        },
    )


def test_scale_down_decommissions_highest_first_then_removes(
    api: client.ApiClient,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    data_plane: DataPlane,
) -> None:
    cr = CR(api, namespace)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    create_cluster(cr, data_plane, 4)

    def bookies_cond() -> dict[str, Any]:
        cond = condition(cr.get("pulsarclusters", NAME), "BookiesReady")
        assert cond is not None
        return cond

    eventually(lambda: bookies_cond()["status"] == "True", timeout=90, what="bookies Ready")
    assert data_plane.states() == {f"{NAME}-bookie-{i}": "rw" for i in range(4)}
    claims = {
        c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
    }
    assert {f"ledgers-{NAME}-bookie-3", f"journal-{NAME}-bookie-2"} <= claims

    # 4 -> 2: no auditor runs yet, so the decommission of the highest ordinal cannot finish
    cr.patch("pulsarclusters", NAME, {"spec": {"bookies": {"replicas": 2}}})

    def decommissioning() -> dict[str, Any]:
        cond = bookies_cond()
        assert cond["reason"] == "Decommissioning", cond
        return cond

    cond = eventually(decommissioning, timeout=60, what="decommission started")
    assert f"{NAME}-bookie-3" in cond["message"]
    assert data_plane.states()[f"{NAME}-bookie-3"] == "decommissioning"
    assert data_plane.states()[f"{NAME}-bookie-2"] == "rw", "one at a time"
    # the operator waits: the pod and its claims are still there
    assert apps.read_namespaced_stateful_set(f"{NAME}-bookie", namespace).spec.replicas == 4
    st = cr.get("pulsarclusters", NAME)["status"]
    assert st["bookies"]["decommissioning"] == [f"{NAME}-bookie-3"]

    # the auditor finishes it (no ledger references the bookie); then 3 -> 2 the same way
    data_plane.start_autorecovery()

    def stop_removed_bookies() -> bool:
        """Kubelet's part: a bookie whose pod is gone stops."""
        pods = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
        for pod, proc in data_plane.bookies.items():
            if pod not in pods and proc.alive():
                proc.stop()
        return True

    def scaled_down() -> bool:
        stop_removed_bookies()
        sts = apps.read_namespaced_stateful_set(f"{NAME}-bookie", namespace)
        assert sts.spec.replicas == 2
        left = {
            c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
        }
        assert not {c for c in left if c.endswith(("-bookie-2", "-bookie-3"))}, left
        cond = bookies_cond()
        assert cond["status"] == "True", cond
        return True

    eventually(scaled_down, timeout=120, what="bookies 4 -> 2, claims deleted")
    states = data_plane.states()
    assert states[f"{NAME}-bookie-3"] == "decommissioned"
    assert states[f"{NAME}-bookie-2"] == "decommissioned"
    assert states[f"{NAME}-bookie-0"] == states[f"{NAME}-bookie-1"] == "rw"
    claims = {
        c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
    }
    assert {f"journal-{NAME}-bookie-0", f"ledgers-{NAME}-bookie-1"} <= claims

    # the order: each bookie decommissioned before the replicas drop past it, its claims
    # deleted after (the next decommission may start in the same pass as that deletion)
    seen = [
        (e.reason, e.message)
        for e in events(api, namespace)
        if e.reason in {"DecommissioningBookie", "ScalingBookies", "DeletedBookieVolumes"}
    ]
    steps = [(r, m.split(":")[0]) for r, m in seen if r != "DeletedBookieVolumes"]
    assert steps == [
        ("DecommissioningBookie", f"{NAME}-bookie-3"),
        ("ScalingBookies", "bookies 4 -> 3 (target 2)"),
        ("DecommissioningBookie", f"{NAME}-bookie-2"),
        ("ScalingBookies", "bookies 3 -> 2 (target 2)"),
    ], seen
    position = {(r, m.split(":")[0]): i for i, (r, m) in enumerate(seen)}
    for pod, scaled in ((3, "bookies 4 -> 3 (target 2)"), (2, "bookies 3 -> 2 (target 2)")):
        assert (
            position[("DeletedBookieVolumes", f"{NAME}-bookie-{pod}")]
            > position[("ScalingBookies", scaled)]
        ), seen
    cr.delete("pulsarclusters", NAME)


@pytest.fixture
def three_bookies(tmp_path: Path, namespace: str) -> Iterator[DataPlane]:
    if not etcd_available():
        pytest.skip("etcd binary not available")
    plane = DataPlane(tmp_path, namespace, bookies=3)
    try:
        yield plane
    finally:
        plane.stop()


def test_lost_node_reported_then_replaced(
    api: client.ApiClient,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    three_bookies: DataPlane,
) -> None:
    plane = three_bookies
    cr = CR(api, namespace)
    core = client.CoreV1Api(api)
    create_cluster(cr, plane, 3)
    plane.start_autorecovery()

    def bookies_cond() -> dict[str, Any]:
        cond = condition(cr.get("pulsarclusters", NAME), "BookiesReady")
        assert cond is not None
        return cond

    eventually(lambda: bookies_cond()["status"] == "True", timeout=90, what="bookies Ready")
    victim = f"{NAME}-bookie-1"
    old_uid = core.read_namespaced_pod(victim, namespace).metadata.uid
    old_id = next(b for b in plane.listed() if b["bookieId"].startswith(f"{victim}."))
    # the pod runs on a node; the node goes away with the bookie and its local volume
    node = f"nvme-{namespace}"
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    core.create_namespaced_pod_binding(
        victim,
        namespace,
        client.V1Binding(
            metadata=client.V1ObjectMeta(name=victim),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        ),
        _preload_content=False,
    )
    plane.bookies[victim].stop()
    core.delete_node(node)

    # nodeLossPolicy defaults to Manual: reported, nothing deleted or decommissioned
    def reported() -> dict[str, Any]:
        cond = bookies_cond()
        assert cond["reason"] == "NodeLost", cond
        return cond

    cond = eventually(reported, timeout=60, what="NodeLost")
    assert f"node {node} no longer exists" in cond["message"] and "Manual" in cond["message"]
    assert [e for e in events(api, namespace, reason="NodeLost") if e.type == "Warning"]
    assert plane.states()[victim] != "decommissioning"
    assert core.read_namespaced_pod(victim, namespace).metadata.uid == old_uid

    # Replace: decommissioned (nothing to copy here), then the pod and its claims recycled
    cr.patch("pulsarclusters", NAME, {"spec": {"bookies": {"nodeLossPolicy": "Replace"}}})

    def recycled() -> bool:
        pod = core.read_namespaced_pod(victim, namespace)
        assert pod.metadata.uid != old_uid
        return True

    eventually(recycled, timeout=120, what="a fresh pod in its place")
    states = {b["bookieId"]: b["state"] for b in plane.listed()}
    assert states[old_id["bookieId"]] == "decommissioned"
    # kubelet's part: the fresh pod starts a bookie on an empty disk at the same address
    plane.start_bookie(victim)

    def replaced() -> bool:
        fresh = [
            b
            for b in plane.listed()
            if b["bookieId"].startswith(f"{victim}.") and b["state"] == "rw"
        ]
        assert fresh and fresh[0]["instanceId"] != old_id["instanceId"], plane.listed()
        cond = bookies_cond()
        assert cond["status"] == "True", cond
        st = cr.get("pulsarclusters", NAME)["status"]
        assert not st["bookies"].get("decommissioning"), st["bookies"]
        return True

    eventually(replaced, timeout=90, what="replaced and Ready")
    reasons = [
        e.reason
        for e in events(api, namespace)
        if e.reason in {"NodeLost", "DecommissioningBookie", "ReplacingBookie"}
    ]
    first = reasons.index("DecommissioningBookie")
    assert reasons[0] == "NodeLost" and "ReplacingBookie" in reasons[first:], reasons
    replacing = events(api, namespace, reason="ReplacingBookie")
    assert any(f"journal-{victim}" in e.message for e in replacing), [e.message for e in replacing]
    cr.delete("pulsarclusters", NAME)
