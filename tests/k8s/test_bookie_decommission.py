"""A bookie scale-down decommissions first: the highest ordinal is decommissioned through the
cluster's admin API, and the StatefulSet's replicas are lowered (and the pod's claims
deleted) only once the cluster reports it ``decommissioned``; then the next one.

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
        self.etcd = EtcdServer(workdir / "etcd").start()
        self.bookies: dict[str, BookieProc] = {}
        self.autorecovery: AutorecoveryProc | None = None
        self.broker: BrokerProc | None = None
        for i in range(bookies):
            pod = f"{NAME}-bookie-{i}"
            address = f"{pod}.{NAME}-bookie.{namespace}.svc"
            proc = BookieProc(self.etcd.url, workdir, extra_args=["--advertised-address", address])
            self.bookies[pod] = proc.start()
        self.broker = BrokerProc(self.etcd.url, workdir).start()

    @property
    def admin_url(self) -> str:
        assert self.broker is not None
        return f"http://127.0.0.1:{self.broker.http_port}"

    def states(self) -> dict[str, str]:
        """Pod name -> its bookie's state, as the broker's admin API reports it."""
        doc = admin.AdminClient(self.admin_url, timeout=10).call(
            "GET", "/admin/v2/bookies/all", admin.NO_BODY
        )
        return {b["bookieId"].split(".", 1)[0]: b["state"] for b in doc["bookies"]}

    def start_autorecovery(self) -> None:
        self.autorecovery = AutorecoveryProc(self.etcd.url, self.workdir).start()

    def stop(self) -> None:
        procs = [self.autorecovery, self.broker, *self.bookies.values(), self.etcd]
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


def test_scale_down_decommissions_highest_first_then_removes(
    api: client.ApiClient,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    data_plane: DataPlane,
) -> None:
    cr = CR(api, namespace)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    cr.create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {
                "name": NAME,
                "annotations": {"magnetar.dev/admin-url": data_plane.admin_url},
            },
            "spec": {
                "metadata": {"etcd": {"replicas": 1}},
                "brokers": {"replicas": 1},
                "bookies": {"replicas": 4, "ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 2},
            },
        },
    )

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
