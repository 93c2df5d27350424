"""The admin REST client and the Tenant/Topic reconcile functions, against Magnetar's real
admin REST API: an in-process broker serving it on a free loopback port
(``tests/support/inprocess.py``); the Tenant deletion (never forced) against a real
``magnetar standalone``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from magnetar_operator import resources
from magnetar_operator.pulsar import Admin, AdminError, AdminUnavailable, TopicName
from tests.support.inprocess import AdminServer, admin_server
from tests.support.procs import free_port
from tests.support.standalone import StandaloneProc


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[AdminServer]:
    async with admin_server(tmp_path) as server:
        yield server


TENANT = {
    "name": "acme",
    "adminRoles": ["ops"],
    "namespaces": [
        {
            "name": "orders",
            "policies": {
                "messageTTLSeconds": 60,
                "deduplicationEnabled": True,
                "offloadThresholdBytes": 1024,
                "backlogQuota": {"limitBytes": 10, "policy": "producer_exception"},
            },
        },
        {"name": "events"},
    ],
}


async def test_tenant_create_then_idempotent(broker: AdminServer) -> None:
    async with Admin(broker.url) as admin:
        changes, managed = await resources.reconcile_tenant(
            admin, TENANT, default_cluster="standalone", managed=[]
        )
        assert "created tenant acme" in changes and managed == ["events", "orders"]
        broker.calls.clear()
        again, _ = await resources.reconcile_tenant(
            admin, TENANT, default_cluster="standalone", managed=managed
        )
        assert again == []
        assert broker.calls, "the second pass asked the broker"
        assert all(c.startswith("GET") for c in broker.calls), "a second pass only reads"
        pol = await admin.get_policies("acme", "orders")
    assert pol["message_ttl_in_seconds"] == 60 and pol["deduplicationEnabled"] is True
    assert pol["offload_threshold"] == 1024
    assert pol["backlog_quota_map"]["destination_storage"]["policy"] == "producer_exception"


async def test_tenant_adopts_existing_and_drops_removed_namespaces(broker: AdminServer) -> None:
    async with Admin(broker.url) as admin:
        await admin.create_tenant("acme", {"adminRoles": [], "allowedClusters": ["standalone"]})
        await admin.create_namespace("acme", "orders")
        changes, managed = await resources.reconcile_tenant(
            admin, TENANT, default_cluster="standalone", managed=[]
        )
        assert "updated tenant acme" in changes
        assert "created namespace acme/orders" not in changes, "existing namespace adopted"
        spec = {**TENANT, "namespaces": [TENANT["namespaces"][0]]}
        changes, managed = await resources.reconcile_tenant(
            admin, spec, default_cluster="standalone", managed=managed
        )
    assert changes == ["deleted namespace acme/events"] and managed == ["orders"]


async def test_tenant_unknown_cluster_is_an_admin_error(broker: AdminServer) -> None:
    async with Admin(broker.url) as admin:
        with pytest.raises(AdminError) as info:
            await resources.reconcile_tenant(admin, TENANT, default_cluster="nowhere", managed=[])
    assert info.value.status == 412 and not info.value.retryable


async def test_topics(broker: AdminServer) -> None:
    async with Admin(broker.url) as admin:
        await resources.reconcile_tenant(admin, TENANT, default_cluster="standalone", managed=[])
        spec = {
            "tenant": "acme",
            "namespace": "orders",
            "name": "t",
            "partitions": 2,
            "policies": {
                "messageTTLSeconds": 5,
                "retentionTimeMinutes": 1,
                "retentionSizeMB": 2,
                "deduplicationEnabled": False,
            },
        }
        assert await resources.reconcile_topic(admin, spec)
        assert await resources.reconcile_topic(admin, spec) == []
        assert await resources.reconcile_topic(admin, {**spec, "partitions": 3}) == [
            "partitions of persistent://acme/orders/t: 2 -> 3"
        ]
        with pytest.raises(resources.TopicConflict):
            await resources.reconcile_topic(admin, {**spec, "partitions": 1})
        np = {"tenant": "acme", "namespace": "orders", "name": "np", "persistent": False}
        assert await resources.reconcile_topic(admin, np) == [
            "created topic non-persistent://acme/orders/np"
        ]
        t = TopicName(True, "acme", "orders", "t")
        assert await admin.list_partitioned_topics(t) == [str(t)]
        assert await admin.get_partitions(t) == 3
        assert await admin.get_topic_policy(t, "messageTTL") == 5
        assert await admin.list_topics(t) == [f"{t}-partition-{i}" for i in range(3)]
        assert await admin.list_topics(TopicName(False, "acme", "orders", "x")) == [
            "non-persistent://acme/orders/np"
        ]
        await resources.delete_topic(admin, spec)
        await resources.delete_topic(admin, spec)  # already gone: fine
        await resources.delete_topic(admin, np)  # the tenant's deletion is never forced
        assert await admin.list_partitioned_topics(t) == []
        await resources.delete_tenant(admin, TENANT, managed=["orders", "events"])
        assert await admin.get_tenant("acme") is None


async def test_unreachable_admin() -> None:
    async with Admin(f"http://127.0.0.1:{free_port()}", timeout=2) as admin:
        with pytest.raises(AdminUnavailable):
            await admin.get_tenant("x")


def test_topic_name() -> None:
    t = TopicName(False, "a b", "ns", "t/1")
    assert str(t) == "non-persistent://a b/ns/t/1"
    assert t.path == "/admin/v2/non-persistent/a%20b/ns/t%2F1"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    """A real ``magnetar standalone`` at Pulsar's defaults: forced deletes are refused."""
    proc = StandaloneProc(tmp_path_factory.mktemp("operator-admin") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


async def test_tenant_deletion_deletes_only_what_it_manages(standalone: StandaloneProc) -> None:
    spec = {"name": "owned", "namespaces": [{"name": "a"}]}
    async with Admin(standalone.http_url) as admin:
        _, managed = await resources.reconcile_tenant(
            admin, spec, default_cluster="standalone", managed=[]
        )
        assert managed == ["a"]
        # A topic in its namespace and a namespace it did not create: both block, never forced.
        topic = TopicName(True, "owned", "a", "t")
        await admin.create_topic(topic)
        with pytest.raises(AdminError) as err:
            await resources.delete_tenant(admin, spec, managed=managed)
        assert err.value.status == 409 and "not empty" in err.value.reason
        assert await admin.list_topics(topic) == [str(topic)]
        await admin.delete_topic(topic, partitioned=False)
        await admin.create_namespace("owned", "foreign")
        with pytest.raises(AdminError) as err:
            await resources.delete_tenant(admin, spec, managed=managed)
        assert err.value.status == 409 and "active namespaces" in err.value.reason
        assert await admin.list_namespaces("owned") == ["foreign"]  # its own "a" is gone
        # Once the owner removes what it created, the retried deletion completes.
        await admin.delete_namespace("owned", "foreign")
        await resources.delete_tenant(admin, spec, managed=managed)
        assert await admin.get_tenant("owned") is None
