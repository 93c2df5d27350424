"""Tenant and Topic resources reconciled by the real operator through the admin REST API.

The admin API here is the INTERIM in-test fake (tests/unit/operator/fake_admin.py) until
Magnetar's broker serves it; then these tests point at `magnetar standalone` instead.
Covers: create, update, drift correction (a topic deleted behind the operator's back),
adoption, deletion, and deletion that completes when the cluster is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.k8s.helpers import CR, condition, eventually
from tests.support.procs import Proc
from tests.unit.operator.fake_admin import FakeAdmin

pytestmark = pytest.mark.k8s


@pytest.fixture
def admin() -> Iterator[FakeAdmin]:
    fake = FakeAdmin().start_in_thread()
    try:
        yield fake
    finally:
        fake.stop_thread()


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


def test_tenant_and_topic_lifecycle(
    api: client.ApiClient, operator: Proc, namespace: str, admin: FakeAdmin
) -> None:
    cr = CR(api, namespace)
    st = admin.state
    # Adoption: the tenant already exists in Pulsar (with other roles).
    st.tenants["acme"] = {"adminRoles": ["old"], "allowedClusters": ["standalone"]}
    cr.create(
        "tenants",
        tenant(
            "acme",
            admin.url,
            [
                {
                    "name": "orders",
                    "policies": {
                        "messageTTLSeconds": 60,
                        "retentionTimeMinutes": 10,
                        "retentionSizeMB": 100,
                        "deduplicationEnabled": True,
                        "backlogQuota": {"limitBytes": 1000},
                    },
                },
                {"name": "events"},
            ],
            adminRoles=["acme-admin"],
        ),
    )
    eventually(lambda: ready(cr, "tenants", "acme"), what="Tenant Ready")
    assert st.tenants["acme"] == {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
    assert set(st.namespaces) == {"acme/orders", "acme/events"}
    pol = st.namespaces["acme/orders"]
    assert pol["message_ttl_in_seconds"] == 60
    assert pol["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 100}
    assert pol["deduplicationEnabled"] is True
    assert pol["backlog_quota_map"]["destination_storage"]["limitSize"] == 1000

    ref = {"adminUrl": admin.url}
    cr.create("topics", topic("created", ref, partitions=2, policies={"messageTTLSeconds": 30}))
    cr.create("topics", topic("single", ref))
    eventually(lambda: ready(cr, "topics", "created") and ready(cr, "topics", "single"))
    assert st.topics["persistent://acme/orders/created"] == 2
    assert st.topics["persistent://acme/orders/single"] == 0
    assert st.topic_policies["persistent://acme/orders/created"]["messageTTL"] == 30
    assert cr.get("topics", "created")["status"]["topicName"] == "persistent://acme/orders/created"

    # Update: more partitions.
    cr.patch("topics", "created", {"spec": {"partitions": 4}})
    eventually(lambda: st.topics["persistent://acme/orders/created"] == 4, what="4 partitions")

    # Drift: the topic is deleted behind the operator's back; the resync recreates it.
    del st.topics["persistent://acme/orders/single"]
    eventually(
        lambda: "persistent://acme/orders/single" in st.topics,
        timeout=20,
        what="deleted topic recreated",
    )
    # ...and a policy changed behind its back is put back.
    st.namespaces["acme/orders"]["message_ttl_in_seconds"] = 5
    eventually(lambda: st.namespaces["acme/orders"]["message_ttl_in_seconds"] == 60, timeout=20)

    # Tenant update: a namespace dropped from the spec is deleted.
    cr.patch(
        "tenants",
        "acme",
        {
            "spec": {
                "namespaces": [
                    {
                        "name": "orders",
                        "policies": {
                            "messageTTLSeconds": 60,
                            "retentionTimeMinutes": 10,
                            "retentionSizeMB": 100,
                            "deduplicationEnabled": True,
                            "backlogQuota": {"limitBytes": 1000},
                        },
                    }
                ]
            }
        },
    )
    eventually(lambda: "acme/events" not in st.namespaces, what="namespace removed")

    # Deletion.
    cr.delete("topics", "created")
    eventually(lambda: not cr.exists("topics", "created"), what="Topic deleted")
    assert "persistent://acme/orders/created" not in st.topics
    cr.delete("topics", "single")
    cr.delete("tenants", "acme")
    eventually(lambda: not cr.exists("tenants", "acme") and not cr.exists("topics", "single"))
    assert "acme" not in st.tenants and not st.namespaces


def test_errors_reported_in_status(
    api: client.ApiClient, operator: Proc, namespace: str, admin: FakeAdmin
) -> None:
    cr = CR(api, namespace)
    # The namespace does not exist in Pulsar: the admin API says 404, the status says so.
    cr.create("topics", topic("orphan", {"adminUrl": admin.url}))

    def failing() -> dict[str, Any]:
        cond = condition(cr.get("topics", "orphan"), "Ready")
        assert cond and cond["status"] == "False" and cond["reason"] == "AdminError", cond
        return cond

    cond = eventually(failing)
    assert (
        "Namespace does not exist" in cond["message"] or "Tenant does not exist" in cond["message"]
    )
    cr.delete("topics", "orphan")
    eventually(lambda: not cr.exists("topics", "orphan"))


def test_deletion_completes_when_cluster_is_gone(
    api: client.ApiClient, operator: Proc, namespace: str, admin: FakeAdmin
) -> None:
    cr = CR(api, namespace)
    cr.create("tenants", tenant("acme", admin.url, [{"name": "orders"}]))
    cr.create("topics", topic("t", {"adminUrl": admin.url}))
    eventually(lambda: ready(cr, "tenants", "acme") and ready(cr, "topics", "t"))
    # A PulsarCluster reference that no longer exists.
    cr.create("topics", topic("lost", {"name": "no-such-cluster"}))

    def cluster_not_found() -> bool:
        cond = condition(cr.get("topics", "lost"), "Ready")
        assert cond and cond["reason"] == "ClusterNotFound", cond
        return True

    eventually(cluster_not_found)

    admin.stop_thread()  # the cluster is gone: nothing answers at adminUrl any more
    for plural, name in (("topics", "t"), ("tenants", "acme"), ("topics", "lost")):
        cr.delete(plural, name)
    eventually(
        lambda: (
            not any(
                cr.exists(p, n)
                for p, n in (("topics", "t"), ("tenants", "acme"), ("topics", "lost"))
            )
        ),
        timeout=30,
        what="finalizers gave up",
    )
    got = reasons(api, namespace)
    assert "ClusterUnreachable" in got and "ClusterGone" in got, got
