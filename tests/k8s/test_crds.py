"""The CRDs on a real API server: Established, served with their printer columns and short
names, and invalid objects rejected with the schema's own messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.controlplane import ROOT
from tests.k8s.helpers import CR

pytestmark = pytest.mark.k8s


def test_crds_established_with_short_names(api: client.ApiClient, crds: list[str]) -> None:
    assert sorted(crds) == [
        "functions.compute.functionmesh.io",
        "pulsarclusters.magnetar.dev",
        "tenants.magnetar.dev",
        "topics.magnetar.dev",
    ]
    resources = client.CustomObjectsApi(api).get_api_resources("magnetar.dev", "v1alpha1")
    short = {r.name: set(r.short_names or []) for r in resources.resources}
    assert short == {
        "pulsarclusters": {"mgc"},
        "pulsarclusters/status": set(),  # status subresource served
        "tenants": {"mgt"},
        "tenants/status": set(),
        "topics": {"mgtp"},
        "topics/status": set(),
    }
    # Function keeps Function Mesh's group; scalable (kubectl scale, the HPA)
    resources = client.CustomObjectsApi(api).get_api_resources(
        "compute.functionmesh.io", "v1alpha1"
    )
    short = {r.name: set(r.short_names or []) for r in resources.resources}
    assert short == {"functions": {"fn"}, "functions/status": set(), "functions/scale": set()}


def served_names(api: client.ApiClient) -> dict[str, str]:
    """Every name kubectl resolves a resource by (plural, singular, short names), from the
    API server's discovery of every group and version but ours, -> the resource it names."""
    names: dict[str, str] = {}
    custom = client.CustomObjectsApi(api)
    listings = [("", client.CoreV1Api(api).get_api_resources())]
    for group in client.ApisApi(api).get_api_versions().groups:
        if group.name in ("magnetar.dev", "compute.functionmesh.io"):
            continue
        listings += [
            (group.name, custom.get_api_resources(group.name, v.version)) for v in group.versions
        ]
    for group_name, listing in listings:
        for r in listing.resources:
            if "/" in r.name:
                continue  # subresources have no names of their own
            full = f"{r.name}.{group_name}" if group_name else r.name
            for name in (r.name, r.singular_name, *(r.short_names or ())):
                if name:
                    names.setdefault(name, full)
    return names


def short_name_collisions(ours: dict[str, list[str]], served: dict[str, str]) -> list[str]:
    """A short name of ours that names another resource on the server: kubectl would pick
    the built-in one (with a warning) and `kubectl get <short>` would list the wrong kind."""
    return [
        f"{name} (of {plural}) already names {served[name]}"
        for plural, shorts in ours.items()
        for name in shorts
        if name in served
    ]


def test_short_names_collide_with_nothing_the_server_serves(
    api: client.ApiClient, crds: list[str]
) -> None:
    served = served_names(api)
    # discovery really lists the built-in resources (PriorityClass's short name included)
    assert served["pc"] == "priorityclasses.scheduling.k8s.io"
    assert served["po"] == "pods" and served["deploy"] == "deployments.apps"
    ours = {
        crd["spec"]["names"]["plural"]: crd["spec"]["names"].get("shortNames", [])
        for crd in (yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml")))
    }
    assert ours == {
        "functions": ["fn"],
        "pulsarclusters": ["mgc"],
        "tenants": ["mgt"],
        "topics": ["mgtp"],
    }
    assert short_name_collisions(ours, served) == []
    # the check catches what issue 29 found: `pc` was PriorityClass's before it was ours
    assert short_name_collisions({"pulsarclusters": ["pc", "mgc"]}, served) == [
        "pc (of pulsarclusters) already names priorityclasses.scheduling.k8s.io"
    ]


def _rejected(fn: Any) -> str:
    with pytest.raises(ApiException) as info:
        fn()
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


def cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "PulsarCluster",
        "metadata": {"name": name},
        "spec": spec,
    }


def topic(name: str, **spec: Any) -> dict[str, Any]:
    base = {"clusterRef": {"name": "c"}, "tenant": "acme", "namespace": "orders", "name": name}
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


def test_defaults_applied(api: client.ApiClient, crds: list[str], namespace: str) -> None:
    cr = CR(api, namespace)
    obj = cr.create("pulsarclusters", cluster("defaults"))
    spec = obj["spec"]
    assert spec["bookies"]["replicas"] == 3
    assert spec["bookies"]["journal"]["size"] == "10Gi"
    assert spec["metadata"]["etcd"]["replicas"] == 3
    assert spec["persistence"]["reclaimPolicy"] == "Retain"


def test_invalid_quorums_rejected(api: client.ApiClient, crds: list[str], namespace: str) -> None:
    cr = CR(api, namespace)
    body = _rejected(
        lambda: cr.create(
            "pulsarclusters",
            cluster(
                "bad", bookies={"replicas": 3, "ensembleSize": 2, "writeQuorum": 3, "ackQuorum": 2}
            ),
        )
    )
    assert "ackQuorum <= writeQuorum <= ensembleSize is required" in body
    body = _rejected(
        lambda: cr.create(
            "pulsarclusters",
            cluster(
                "bad", bookies={"replicas": 1, "ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 2}
            ),
        )
    )
    assert "ensembleSize must not exceed replicas" in body


def test_schema_errors_rejected(api: client.ApiClient, crds: list[str], namespace: str) -> None:
    cr = CR(api, namespace)
    body = _rejected(lambda: cr.create("pulsarclusters", cluster("bad", brokers={"replicas": 0})))
    assert "spec.brokers.replicas" in body
    body = _rejected(
        lambda: cr.create("pulsarclusters", cluster("bad", persistence={"reclaimPolicy": "Burn"}))
    )
    assert "Unsupported value" in body
    body = _rejected(lambda: cr.create("pulsarclusters", cluster("bad", offload={"enabled": True})))
    assert "offload.bucket and offload.credentialsSecret are required" in body
    body = _rejected(
        lambda: cr.create("pulsarclusters", cluster("bad", metadata={"mode": "external"}))
    )
    assert "metadata.externalEndpoints is required" in body


def test_broker_workers_count_or_auto(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    cr = CR(api, namespace)
    assert cr.create("pulsarclusters", cluster("wdef"))["spec"]["brokers"]["workers"] == "auto"
    obj = cr.create("pulsarclusters", cluster("w1", brokers={"workers": 1}))
    assert obj["spec"]["brokers"]["workers"] == 1
    obj = cr.create("pulsarclusters", cluster("wauto", brokers={"workers": "auto"}))
    assert obj["spec"]["brokers"]["workers"] == "auto"
    obj = cr.create("pulsarclusters", cluster("w4", brokers={"workers": 4}))
    assert obj["spec"]["brokers"]["workers"] == 4
    for bad in (0, 65, "many"):
        body = _rejected(
            lambda bad=bad: cr.create("pulsarclusters", cluster("bad", brokers={"workers": bad}))
        )
        assert "brokers.workers: 1 to 64, or auto" in body


def test_etcd_replicas_immutable(api: client.ApiClient, crds: list[str], namespace: str) -> None:
    cr = CR(api, namespace)
    cr.create("pulsarclusters", cluster("fixed", metadata={"etcd": {"replicas": 1}}))
    body = _rejected(
        lambda: cr.patch(
            "pulsarclusters", "fixed", {"spec": {"metadata": {"etcd": {"replicas": 3}}}}
        )
    )
    assert "metadata.etcd.replicas is immutable" in body


def test_topic_name_and_persistence_immutable(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    cr = CR(api, namespace)
    cr.create("topics", topic("t1", partitions=2))
    body = _rejected(lambda: cr.patch("topics", "t1", {"spec": {"name": "other"}}))
    assert "spec.tenant, spec.namespace and spec.name are immutable" in body
    body = _rejected(lambda: cr.patch("topics", "t1", {"spec": {"persistent": False}}))
    assert "spec.persistent is immutable" in body
    body = _rejected(lambda: cr.patch("topics", "t1", {"spec": {"partitions": 1}}))
    assert "spec.partitions can only grow" in body
    cr.patch("topics", "t1", {"spec": {"partitions": 4}})  # growing is fine


def test_topic_cluster_ref_exactly_one(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    cr = CR(api, namespace)
    body = _rejected(
        lambda: cr.create(
            "topics", topic("t2", clusterRef={"name": "c", "adminUrl": "http://x:8080"})
        )
    )
    assert "set exactly one of name and adminUrl" in body
    body = _rejected(lambda: cr.create("topics", topic("bad name")))
    assert "metadata.name" in body or "spec.name" in body
