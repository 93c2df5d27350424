"""The admin REST client and the Tenant/Topic reconcile functions, against the INTERIM
in-test admin API (fake_admin.py) until Magnetar's broker serves the real one; the Tenant
deletion (never forced) against a real ``magnetar standalone``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from magnetar_operator import resources
from magnetar_operator.pulsar import Admin, AdminError, AdminUnavailable, TopicName
from tests.support.procs import free_port
from tests.support.standalone import StandaloneProc
from tests.unit.operator.fake_admin import FakeAdmin


@pytest.fixture
async def fake() -> AsyncIterator[FakeAdmin]:
    server = await FakeAdmin().start()
    try:
        yield server
    finally:
        await server.stop()


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


async def test_tenant_create_then_idempotent(fake: FakeAdmin) -> None:
    async with Admin(fake.url) as admin:
        changes, managed = await resources.reconcile_tenant(
            admin, TENANT, default_cluster="standalone", managed=[]
        )
        assert "created tenant acme" in changes and managed == ["events", "orders"]
        fake.state.calls.clear()
        again, _ = await resources.reconcile_tenant(
            admin, TENANT, default_cluster="standalone", managed=managed
        )
    assert again == []
    assert all(c.startswith("GET") for c in fake.state.calls), "a second pass only reads"
    pol = fake.state.namespaces["acme/orders"]
    assert pol["offload_threshold"] == 1024
    assert pol["backlog_quota_map"]["destination_storage"]["policy"] == "producer_exception"


async def test_tenant_adopts_existing_and_drops_removed_namespaces(fake: FakeAdmin) -> None:
    fake.state.tenants["acme"] = {"adminRoles": [], "allowedClusters": ["standalone"]}
    fake.state.namespaces["acme/orders"] = {"backlog_quota_map": {}}
    async with Admin(fake.url) as admin:
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


async def test_tenant_unknown_cluster_is_an_admin_error(fake: FakeAdmin) -> None:
    async with Admin(fake.url) as admin:
        with pytest.raises(AdminError) as info:
            await resources.reconcile_tenant(admin, TENANT, default_cluster="nowhere", managed=[])
    assert info.value.status == 412 and not info.value.retryable


async def test_topics(fake: FakeAdmin) -> None:
    async with Admin(fake.url) as admin:
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
        assert fake.state.topics == {
            "persistent://acme/orders/t": 3,
            "non-persistent://acme/orders/np": 0,
        }
        assert await admin.list_topics(TopicName(True, "acme", "orders", "x")) == [
            f"persistent://acme/orders/t-partition-{i}" for i in range(3)
        ]
        await resources.delete_topic(admin, spec)
        await resources.delete_topic(admin, spec)  # already gone: fine
        await resources.delete_topic(admin, np)  # the tenant's deletion is never forced
        await resources.delete_tenant(admin, TENANT, managed=["orders", "events"])
    assert fake.state.tenants == {} and fake.state.topics == {}


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
