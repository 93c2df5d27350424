"""A bookie spec change rolls one bookie at a time, the next only after the previous is
Ready again and the cluster's admin API reports no under-replicated ledger — shown by the
order of the operator's RollingBookie events and by the pod timeline our stand-in kubelet
records. The admin API is a real ``magnetar standalone`` (annotation
``magnetar.dev/admin-url``); while the operator cannot reach it, no bookie restarts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.k8s.admin_backends import Backend, StandaloneBackend
from tests.k8s.helpers import CR, FakeKubelet, condition, eventually
from tests.support.procs import LOOPBACK, Proc, free_port

pytestmark = pytest.mark.k8s
ADMIN_URL = "magnetar.dev/admin-url"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = StandaloneBackend(tmp_path_factory.mktemp("rollout-standalone"))
    try:
        yield b
    finally:
        b.stop()


def ready_cluster(cr: CR, name: str, generation: int | None) -> dict[str, Any]:
    """The PulsarCluster, asserting it is Ready (for ``generation``, when given)."""
    obj = cr.get("pulsarclusters", name)
    cond = condition(obj, "Ready")
    assert cond and cond["status"] == "True", obj.get("status")
    if generation is not None:
        assert obj["status"]["observedGeneration"] == generation
    return obj


def create_ready_cluster(
    cr: CR, name: str, *, bookies: int, admin_url: str, **spec: Any
) -> dict[str, Any]:
    """Create a PulsarCluster ``name`` (one etcd, one broker, ``bookies`` bookies, ``spec``
    for more; its admin API at ``admin_url``) and wait until it is Ready; the cluster
    object."""
    cr.create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {"name": name, "annotations": {ADMIN_URL: admin_url}},
            "spec": {
                "metadata": {"etcd": {"replicas": 1}},
                "brokers": {"replicas": 1},
                "bookies": {"replicas": bookies},
                **spec,
            },
        },
    )
    found: dict[str, Any] = eventually(
        lambda: ready_cluster(cr, name, None), timeout=60, what="cluster Ready"
    )
    return found


def test_bookie_spec_change_rolls_one_at_a_time(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet, backend: Backend
) -> None:
    cr = CR(api, namespace)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    create_ready_cluster(cr, "roll", bookies=3, admin_url=backend.url)

    def ready(generation: int | None = None) -> dict[str, Any]:
        return ready_cluster(cr, "roll", generation)

    before = {
        p.metadata.name: p.metadata.uid
        for p in core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=bookie"
        ).items
    }
    assert sorted(before) == ["roll-bookie-0", "roll-bookie-1", "roll-bookie-2"]
    t_change = kubelet.timeline[-1].t

    # A bookie config change: new pod template (config hash), so a new update revision.
    obj = cr.patch(
        "pulsarclusters",
        "roll",
        {"spec": {"bookies": {"config": {"journalMaxGroupWaitMSec": "2"}}}},
    )
    obj = eventually(
        lambda: ready(obj["metadata"]["generation"]), timeout=90, what="rolled and Ready"
    )

    sts = apps.read_namespaced_stateful_set("roll-bookie", namespace)
    assert (
        sts.status.current_revision == sts.status.update_revision
        or sts.status.updated_replicas == 3
    )
    after = {
        p.metadata.name: (p.metadata.uid, p.metadata.labels["controller-revision-hash"])
        for p in core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=bookie"
        ).items
    }
    assert all(after[n][0] != before[n] for n in before), "every bookie was restarted"
    assert {rev for _, rev in after.values()} == {sts.status.update_revision}

    # The operator's events: highest ordinal first, one at a time.
    events = sorted(
        (e for e in core.list_namespaced_event(namespace).items if e.reason == "RollingBookie"),
        key=lambda e: (e.metadata.creation_timestamp, int(e.metadata.resource_version)),
    )
    order = [e.message.split()[1] for e in events]
    assert order == ["roll-bookie-2", "roll-bookie-1", "roll-bookie-0"], order

    # The timeline: each restart starts only after the previous bookie is back and Ready,
    # so at most one bookie is ever down.
    tl = [e for e in kubelet.timeline if e.t >= t_change and e.name.startswith("roll-bookie-")]
    down: set[str] = set()
    max_down = 0
    for ev in tl:
        if ev.kind == "gone":
            down.add(ev.name)
        elif ev.kind == "ready":
            down.discard(ev.name)
        max_down = max(max_down, len(down))
    assert max_down == 1, tl
    gone = [ev.name for ev in tl if ev.kind == "gone"]
    assert gone == ["roll-bookie-2", "roll-bookie-1", "roll-bookie-0"], tl

    # persistence.reclaimPolicy defaults to Retain: deleting the cluster keeps the volumes.
    claims = {
        c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
    }
    assert {"journal-roll-bookie-0", "ledgers-roll-bookie-2", "data-roll-etcd-0"} <= claims
    cr.delete("pulsarclusters", "roll")
    eventually(
        lambda: (
            not cr.exists("pulsarclusters", "roll")
            and not apps.list_namespaced_stateful_set(namespace).items
        ),
        timeout=60,
        what="cluster deleted",
    )
    kept = core.list_namespaced_persistent_volume_claim(namespace).items
    assert {c.metadata.name for c in kept} == claims
    assert all(c.metadata.deletion_timestamp is None for c in kept)


def test_version_change_rolls_bookies_then_brokers(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet, backend: Backend
) -> None:
    """An image/version change: every bookie is restarted (one at a time) and Ready again
    before the broker and proxy Deployments get the new template."""
    cr = CR(api, namespace)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    proxy = {"enabled": True, "service": {"type": "NodePort", "nodePorts": {"pulsar": 30651}}}
    obj = create_ready_cluster(cr, "ver", bookies=2, admin_url=backend.url, proxy=proxy)

    def ready(generation: int | None = None) -> dict[str, Any]:
        return ready_cluster(cr, "ver", generation)

    assert condition(obj, "ProxyReady")["status"] == "True"
    assert obj["status"]["proxyUrl"] == f"pulsar://ver-proxy.{namespace}.svc:6650"
    svc = core.read_namespaced_service("ver-proxy", namespace)
    assert svc.spec.type == "NodePort"
    assert {p.name: p.node_port for p in svc.spec.ports}["pulsar"] == 30651
    t_change = kubelet.timeline[-1].t

    obj = cr.patch("pulsarclusters", "ver", {"spec": {"version": "0.1.1"}})
    eventually(lambda: ready(obj["metadata"]["generation"]), timeout=120, what="rolled, Ready")

    for name in ("ver-broker", "ver-proxy"):
        dep = apps.read_namespaced_deployment(name, namespace)
        assert dep.spec.template.spec.containers[0].image.endswith(":0.1.1"), name
    tl = [e for e in kubelet.timeline if e.t >= t_change]
    bookies_ready = [e.t for e in tl if e.kind == "ready" and e.name.startswith("ver-bookie-")]
    bookies_gone = [e.name for e in tl if e.kind == "gone" and e.name.startswith("ver-bookie-")]
    assert bookies_gone == ["ver-bookie-1", "ver-bookie-0"], tl
    new_brokers = [e.t for e in tl if e.kind == "created" and e.name.startswith("ver-broker-")]
    new_proxies = [e.t for e in tl if e.kind == "created" and e.name.startswith("ver-proxy-")]
    assert len(bookies_ready) == 2 and new_brokers and new_proxies, tl
    assert min(new_brokers) > max(bookies_ready), "brokers rolled before the bookies were done"
    assert min(new_proxies) > max(bookies_ready)
    waiting = [
        e for e in core.list_namespaced_event(namespace).items if e.reason == "WaitingForBookies"
    ]
    assert waiting, "the held broker rollout is visible as an event"

    # the proxy is switched off: its objects go
    cr.patch("pulsarclusters", "ver", {"spec": {"proxy": {"enabled": False}}})
    eventually(
        lambda: (
            not apps.list_namespaced_deployment(
                namespace, label_selector="app.kubernetes.io/component=proxy"
            ).items
        ),
        timeout=60,
        what="proxy removed",
    )
    cr.delete("pulsarclusters", "ver")


def test_roll_waits_while_replication_cannot_be_checked(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet, backend: Backend
) -> None:
    """No bookie restarts while the admin API does not answer (it cannot say whether ledgers
    are under-replicated): BookiesReady says why; once it answers, the roll goes on."""
    cr = CR(api, namespace)
    core = client.CoreV1Api(api)
    create_ready_cluster(cr, "hold", bookies=2, admin_url=backend.url)
    closed = f"http://{LOOPBACK}:{free_port()}"  # nothing listens there
    cr.patch("pulsarclusters", "hold", {"metadata": {"annotations": {ADMIN_URL: closed}}})
    before = {
        p.metadata.name: p.metadata.uid
        for p in core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=bookie"
        ).items
    }
    cr.patch("pulsarclusters", "hold", {"spec": {"bookies": {"config": {"k": "v"}}}})

    def holding() -> dict[str, Any]:
        cond = condition(cr.get("pulsarclusters", "hold"), "BookiesReady")
        assert cond and cond["reason"] == "WaitingForReplication", cond
        return cond

    cond = eventually(holding, timeout=60, what="roll held")
    assert "under-replicated" in cond["message"] and closed.split("//")[1] in cond["message"]
    # the pass that decided to hold restarted nothing
    after = {
        p.metadata.name: p.metadata.uid
        for p in core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=bookie"
        ).items
    }
    assert after == before
    assert not [
        e for e in core.list_namespaced_event(namespace).items if e.reason == "RollingBookie"
    ]
    waited = [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "WaitingForReplication"
    ]
    assert waited, "the hold is posted as an event"

    cr.patch("pulsarclusters", "hold", {"metadata": {"annotations": {ADMIN_URL: backend.url}}})
    generation = cr.get("pulsarclusters", "hold")["metadata"]["generation"]
    eventually(lambda: ready_cluster(cr, "hold", generation), timeout=90, what="rolled")
    rolled = [
        e.message.split()[1]
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "RollingBookie"
    ]
    assert sorted(rolled) == ["hold-bookie-0", "hold-bookie-1"], rolled
    cr.delete("pulsarclusters", "hold")
