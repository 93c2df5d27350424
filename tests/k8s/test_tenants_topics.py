"""Tenant and Topic resources reconciled by the real operator through the admin REST API.

The admin API is a real `magnetar standalone` (tests/k8s/admin_backends.py). Everything is
observed and disturbed over HTTP.
Covers: create, update, drift correction (a topic deleted behind the operator's back),
adoption, deletion (never forced: blocked by what the operator did not create), and deletion
that completes when the cluster is gone.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.k8s.admin_backends import AdminView, Backend, StandaloneBackend
from tests.k8s.conftest import start_operator
from tests.k8s.controlplane import ControlPlane
from tests.k8s.helpers import CR, condition, eventually
from tests.support.procs import Proc

pytestmark = pytest.mark.k8s


@pytest.fixture
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = StandaloneBackend(tmp_path_factory.mktemp("standalone"))
    try:
        yield b
    finally:
        b.stop()


def tenant(name: str, url: str, namespaces: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"adminUrl": url}, "name": name, "namespaces": namespaces, **extra},
    }


def topic(name: str, ref: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name},
        "spec": {"clusterRef": ref, "tenant": "acme", "namespace": "orders", "name": name, **spec},
    }


def ready(cr: CR, plural: str, name: str) -> dict[str, Any]:
    obj = cr.get(plural, name)
    cond = condition(obj, "Ready")
    assert cond and cond["status"] == "True", obj.get("status")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    return obj


def reasons(api: client.ApiClient, namespace: str) -> list[str]:
    return [e.reason for e in client.CoreV1Api(api).list_namespaced_event(namespace).items]


def deletion_retries(body: dict[str, Any]) -> int:
    """How many times kopf has retried the Tenant's deletion handler (its progress record)."""
    record = (body["metadata"].get("annotations") or {}).get("magnetar.dev/tenant_deleted")
    return int(json.loads(record).get("retries", 0)) if record else 0


ORDERS = {
    "name": "orders",
    "policies": {
        "messageTTLSeconds": 60,
        "retentionTimeMinutes": 10,
        "retentionSizeMB": 100,
        "deduplicationEnabled": True,
        "backlogQuota": {"limitBytes": 1000},
    },
}


def test_tenant_and_topic_lifecycle(
    api: client.ApiClient, operator: Proc, namespace: str, backend: Backend
) -> None:
    cr = CR(api, namespace)
    view = AdminView(backend.url)
    # Adoption: the tenant already exists in Pulsar (with other roles).
    view.call(
        "PUT",
        "/admin/v2/tenants/acme",
        {"adminRoles": ["old"], "allowedClusters": [backend.cluster_name]},
    )
    cr.create(
        "tenants",
        tenant("acme", backend.url, [ORDERS, {"name": "events"}], adminRoles=["acme-admin"]),
    )
    eventually(lambda: ready(cr, "tenants", "acme"), what="Tenant Ready")
    info = view.tenant("acme") or {}
    assert info["adminRoles"] == ["acme-admin"]
    assert sorted(view.namespaces("acme")) == ["acme/events", "acme/orders"]
    pol = view.policies("acme", "orders")
    assert pol["message_ttl_in_seconds"] == 60
    assert pol["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 100}
    assert pol["deduplicationEnabled"] is True
    assert pol["backlog_quota_map"]["destination_storage"]["limitSize"] == 1000

    ref = {"adminUrl": backend.url}
    cr.create("topics", topic("created", ref, partitions=2, policies={"messageTTLSeconds": 30}))
    cr.create("topics", topic("single", ref))
    eventually(lambda: ready(cr, "topics", "created") and ready(cr, "topics", "single"))
    assert view.partitioned("acme", "orders") == ["persistent://acme/orders/created"]
    assert "persistent://acme/orders/single" in view.topics("acme", "orders")
    assert view.partitions("acme", "orders", "created") == 2
    assert view.topic_policy("acme", "orders", "created", "messageTTL") == 30
    assert cr.get("topics", "created")["status"]["topicName"] == "persistent://acme/orders/created"

    # Update: more partitions.
    cr.patch("topics", "created", {"spec": {"partitions": 4}})
    eventually(lambda: view.partitions("acme", "orders", "created") == 4, what="4 partitions")

    # Drift: the topic is deleted behind the operator's back; the resync recreates it.
    view.call("DELETE", "/admin/v2/persistent/acme/orders/single?force=true")
    assert "persistent://acme/orders/single" not in view.topics("acme", "orders")
    eventually(
        lambda: "persistent://acme/orders/single" in view.topics("acme", "orders"),
        timeout=20,
        what="deleted topic recreated",
    )
    # ...and a policy changed behind its back is put back.
    view.call("POST", "/admin/v2/namespaces/acme/orders/messageTTL", 5)
    eventually(lambda: view.policies("acme", "orders")["message_ttl_in_seconds"] == 60, timeout=20)

    # Tenant update: a namespace dropped from the spec is deleted.
    cr.patch("tenants", "acme", {"spec": {"namespaces": [ORDERS]}})
    eventually(lambda: view.namespaces("acme") == ["acme/orders"], what="namespace removed")

    # Deletion.
    cr.delete("topics", "created")
    eventually(lambda: not cr.exists("topics", "created"), what="Topic deleted")
    assert view.partitioned("acme", "orders") == []
    cr.delete("topics", "single")
    cr.delete("tenants", "acme")
    eventually(lambda: not cr.exists("tenants", "acme") and not cr.exists("topics", "single"))
    assert view.tenant("acme") is None


def test_tenant_deletion_is_never_forced(
    api: client.ApiClient, operator: Proc, namespace: str, backend: Backend
) -> None:
    """The finalizer deletes the namespaces the resource manages, then the tenant without
    force; a namespace someone else created blocks it (reported, retried) until removed."""
    cr = CR(api, namespace)
    view = AdminView(backend.url)
    cr.create("tenants", tenant("acme", backend.url, [{"name": "orders"}]))
    eventually(lambda: ready(cr, "tenants", "acme"), what="Tenant Ready")
    view.call("PUT", "/admin/v2/namespaces/acme/foreign")  # not the operator's
    cr.delete("tenants", "acme")

    def blocked() -> dict[str, Any]:
        cond = condition(cr.get("tenants", "acme"), "Ready")
        assert cond and cond["status"] == "False" and cond["reason"] == "DeleteBlocked", cond
        return cond

    cond = eventually(blocked, what="deletion reported as blocked")
    assert "409" in cond["message"], cond
    assert view.namespaces("acme") == ["acme/foreign"]  # its own namespace went, not the other
    eventually(lambda: "DeleteBlocked" in reasons(api, namespace), what="DeleteBlocked event")
    # The finalizer keeps retrying (kopf counts them in its progress annotation); the event is
    # posted once, not once per retry.
    first = deletion_retries(cr.get("tenants", "acme"))
    eventually(
        lambda: deletion_retries(cr.get("tenants", "acme")) >= first + 3, what="three more retries"
    )
    assert reasons(api, namespace).count("DeleteBlocked") == 1, reasons(api, namespace)
    view.call("DELETE", "/admin/v2/namespaces/acme/foreign")
    eventually(lambda: not cr.exists("tenants", "acme"), what="Tenant deleted once emptied")
    assert view.tenant("acme") is None


def test_errors_reported_in_status(
    api: client.ApiClient, operator: Proc, namespace: str, backend: Backend
) -> None:
    cr = CR(api, namespace)
    view = AdminView(backend.url)
    # The tenant/namespace does not exist in Pulsar: the status says what it waits for.
    cr.create("topics", topic("orphan", {"adminUrl": backend.url}))

    def waiting() -> dict[str, Any]:
        cond = condition(cr.get("topics", "orphan"), "Ready")
        assert cond and cond["status"] == "False", cond
        assert cond["reason"] == "WaitingForNamespace", cond
        return cond

    cond = eventually(waiting)
    assert "waiting for namespace acme/orders" in cond["message"], cond
    cr.delete("topics", "orphan")
    eventually(lambda: not cr.exists("topics", "orphan"))

    # A topic the spec cannot reach (more partitions than it asks for): AdminError, said.
    info = {"adminRoles": [], "allowedClusters": [backend.cluster_name]}
    view.call("PUT", "/admin/v2/tenants/acme", info)
    view.call("PUT", "/admin/v2/namespaces/acme/orders")
    view.call("PUT", "/admin/v2/persistent/acme/orders/wide/partitions", 4)
    cr.create("topics", topic("wide", {"adminUrl": backend.url}, partitions=2))

    def failing() -> dict[str, Any]:
        cond = condition(cr.get("topics", "wide"), "Ready")
        assert cond and cond["status"] == "False" and cond["reason"] == "AdminError", cond
        return cond

    cond = eventually(failing)
    assert "has 4 partitions, more than the spec's 2" in cond["message"], cond
    cr.patch("topics", "wide", {"spec": {"deletionPolicy": "Orphan"}})
    cr.delete("topics", "wide")
    eventually(lambda: not cr.exists("topics", "wide"))


def test_tenant_and_topic_applied_together_converge_within_seconds(
    api: client.ApiClient,
    control_plane: ControlPlane,
    crds: list[str],
    backend: Backend,
    tmp_path: Path,
) -> None:
    """Issue 29: a Topic applied in the same command as its Tenant (here even before it)
    finds no namespace at first; it retries after 1, 2, 4 ... s, not after the resource
    resync (60 s) or the retry delay (10 s), so both are Ready within seconds -- with the
    operator's own default settings, in a namespace only that operator watches."""
    name = f"conv-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    proc = start_operator(
        control_plane.kubeconfig, tmp_path / "operator.log", scope=[f"--namespace={name}"],
        settings={},
    )  # fmt: skip
    try:
        cr = CR(api, name)
        t0 = time.monotonic()
        cr.create("topics", topic("created", {"adminUrl": backend.url}, partitions=2))

        def waiting() -> dict[str, Any]:
            cond = condition(cr.get("topics", "created"), "Ready")
            assert cond and cond["reason"] == "WaitingForNamespace", cond
            return cond

        cond = eventually(waiting, what="the Topic waiting for its namespace")
        assert "waiting for namespace acme/orders" in cond["message"], cond
        cr.create("tenants", tenant("acme", backend.url, [{"name": "orders"}]))
        # bounded well below the resync (60 s) the Topic used to wait for
        eventually(
            lambda: ready(cr, "tenants", "acme") and ready(cr, "topics", "created"),
            timeout=30,
            what="Tenant and Topic Ready",
        )
        print(f"Tenant and Topic Ready {time.monotonic() - t0:.1f}s after the Topic was applied")
        view = AdminView(backend.url)
        assert view.partitioned("acme", "orders") == ["persistent://acme/orders/created"]
        for plural, obj in (("topics", "created"), ("tenants", "acme")):
            cr.delete(plural, obj)
            eventually(lambda p=plural, o=obj: not cr.exists(p, o), what=f"{obj} deleted")
    finally:
        proc.stop(timeout=15)
        core.delete_namespace(name)


def test_deletion_completes_when_cluster_is_gone(
    api: client.ApiClient, operator: Proc, namespace: str, backend: Backend
) -> None:
    cr = CR(api, namespace)
    cr.create("tenants", tenant("acme", backend.url, [{"name": "orders"}]))
    cr.create("topics", topic("t", {"adminUrl": backend.url}))
    eventually(lambda: ready(cr, "tenants", "acme") and ready(cr, "topics", "t"))
    # A PulsarCluster reference that no longer exists.
    cr.create("topics", topic("lost", {"name": "no-such-cluster"}))

    def cluster_not_found() -> bool:
        cond = condition(cr.get("topics", "lost"), "Ready")
        assert cond and cond["reason"] == "ClusterNotFound", cond
        return True

    eventually(cluster_not_found)

    backend.stop()  # the cluster is gone: nothing answers at adminUrl any more
    items = (("topics", "t"), ("tenants", "acme"), ("topics", "lost"))
    for plural, name in items:
        cr.delete(plural, name)
    eventually(
        lambda: not any(cr.exists(p, n) for p, n in items), timeout=30, what="finalizers gave up"
    )
    got = reasons(api, namespace)
    assert "ClusterUnreachable" in got and "ClusterGone" in got, got
