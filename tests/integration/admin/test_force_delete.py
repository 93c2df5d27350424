"""Forced tenant/namespace deletes against a ``magnetar standalone`` at Pulsar's defaults
(forceDeleteTenantAllowed and forceDeleteNamespaceAllowed false): refused with Pulsar's 405
and reason, through the REST API and ``magnetar admin``, and nothing is deleted. The allowed
case (the same keys set to true in standalone.conf) runs in the suites sharing conftest's
``standalone`` (test_tenants_namespaces.py, test_cli.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from tests.integration.admin.conftest import Admin, running_standalone
from tests.integration.admin.test_cli import admin as run_admin
from tests.support.standalone import StandaloneProc

TENANTS_REFUSED = "Broker doesn't allow forced deletion of tenants"
NAMESPACES_REFUSED = "Broker doesn't allow forced deletion of namespaces"


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    yield from running_standalone(tmp_path_factory, "force-defaults")


@pytest.fixture(scope="module")
def tenant_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    """Forced tenant deletes allowed by flag, forced namespace deletes not."""
    yield from running_standalone(
        tmp_path_factory, "force-tenant-only", ["--force-delete-tenant-allowed", "true"]
    )


def _populate(admin: Admin, proc: StandaloneProc, tenant: str) -> str:
    """A tenant with a namespace holding a topic with a message; the topic's name."""
    assert admin.put(f"/tenants/{tenant}")[0] == 204
    assert admin.put(f"/namespaces/{tenant}/ns")[0] == 204
    topic = f"persistent://{tenant}/ns/t"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic)
        producer.send(b"kept")
        producer.close()
    finally:
        client.close()
    return topic


def test_forced_deletes_refused_by_default(defaults: StandaloneProc) -> None:
    admin = Admin(defaults.http_url)
    topic = _populate(admin, defaults, "keep")
    status, body = admin.delete("/tenants/keep?force=true")
    assert (status, body["reason"]) == (405, TENANTS_REFUSED)
    status, body = admin.delete("/namespaces/keep/ns?force=true")
    assert (status, body["reason"]) == (405, NAMESPACES_REFUSED)
    # Non-forced deletes of non-empty things keep Pulsar's 409.
    status, body = admin.delete("/tenants/keep")
    assert status == 409 and "still has active namespaces" in body["reason"]
    status, body = admin.delete("/namespaces/keep/ns")
    assert status == 409 and "not empty" in body["reason"]
    # Nothing was deleted: the topic still has its message.
    assert admin.get("/persistent/keep/ns")[1] == [topic]
    status, stats = admin.get("/persistent/keep/ns/t/internalStats")
    assert status == 200 and stats["numberOfEntries"] == 1
    # Emptied by hand, the non-forced deletes succeed.
    assert admin.delete("/persistent/keep/ns/t")[0] == 204
    assert admin.delete("/namespaces/keep/ns") == (204, None)
    assert admin.delete("/tenants/keep") == (204, None)


def test_cli_shows_the_refusal(defaults: StandaloneProc) -> None:
    admin = Admin(defaults.http_url)
    _populate(admin, defaults, "cli-keep")
    refused = run_admin(defaults, "tenants", "delete", "cli-keep", "--force", ok=False)
    assert refused.returncode == 1
    assert "405" in refused.stderr and TENANTS_REFUSED in refused.stderr, refused.stderr
    refused = run_admin(defaults, "namespaces", "delete", "cli-keep/ns", "--force", ok=False)
    assert refused.returncode == 1
    assert "405" in refused.stderr and NAMESPACES_REFUSED in refused.stderr, refused.stderr
    assert "cli-keep" in run_admin(defaults, "tenants", "list").stdout.split()


def test_forced_tenant_delete_needs_forced_namespace_deletes(tenant_only: StandaloneProc) -> None:
    """As in Pulsar, a forced tenant delete force-deletes each namespace, which
    forceDeleteNamespaceAllowed must allow; a tenant without namespaces goes."""
    admin = Admin(tenant_only.http_url)
    _populate(admin, tenant_only, "half")
    status, body = admin.delete("/tenants/half?force=true")
    assert (status, body["reason"]) == (405, NAMESPACES_REFUSED)
    assert admin.get("/namespaces/half")[1] == ["half/ns"]
    assert admin.put("/tenants/bare")[0] == 204
    assert admin.delete("/tenants/bare?force=true") == (204, None)
    assert admin.get("/tenants/bare")[0] == 404
