"""Manifest builders: the objects each spec produces, and every one of them valid against
the Kubernetes OpenAPI schemas (offline)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from magnetar import cli
from magnetar_operator.builders import bookie, broker, build_all, common, etcd, monitoring, proxy
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec
from tests.unit.operator.schemas import ROOT, validate

OWNER = Owner(name="dev", namespace="pulsar", uid="0b1c2d3e-aaaa-bbbb-cccc-000000000001")


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "crds/examples" / name).read_text())
    return doc


SPECS = {
    "empty": {},
    "minimal": example("pulsarcluster-minimal.yaml")["spec"],
    "production": example("pulsarcluster-production.yaml")["spec"],
    "external-metadata": {
        "metadata": {
            "mode": "external",
            "externalEndpoints": ["http://etcd-0:2379", "http://etcd-1:2379"],
        },
        "monitoring": {"enabled": True, "kind": "PodMonitor"},
    },
    "proxy-nodeport": {
        "proxy": {"enabled": True, "service": {"type": "NodePort", "nodePorts": {"pulsar": 30650}}}
    },
    "secured": example("pulsarcluster-secured.yaml")["spec"],
    "secured-3": {
        **example("pulsarcluster-production.yaml")["spec"],
        "tls": {"enabled": True},
        "auth": {"enabled": True, "secretName": "keys"},
    },
}


def by_kind_name(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_every_object_is_valid_and_owned(case: str) -> None:
    objs = build_all(OWNER, ClusterSpec.parse(SPECS[case]))
    assert objs
    for obj in objs:
        validate(obj)
        meta = obj["metadata"]
        assert meta["namespace"] == "pulsar"
        assert meta["ownerReferences"] == [OWNER.owner_reference()]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "magnetar-operator"
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), "no object is built twice"


def test_reconcile_order_metadata_bookies_brokers_services_monitoring() -> None:
    objs = build_all(OWNER, ClusterSpec.parse(SPECS["production"]))
    components = [o["metadata"]["labels"]["app.kubernetes.io/component"] for o in objs]
    first = {c: components.index(c) for c in ("etcd", "bookie", "broker")}
    assert first["etcd"] < first["bookie"] < first["broker"]
    assert objs[-1]["kind"] == "ServiceMonitor"


def test_builders_are_pure() -> None:
    spec = ClusterSpec.parse(SPECS["production"])
    assert build_all(OWNER, spec) == build_all(OWNER, spec)


def test_bookie_statefulset_production() -> None:
    spec = ClusterSpec.parse(SPECS["production"])
    sts = bookie.statefulset(OWNER, spec)
    s = sts["spec"]
    assert s["replicas"] == 6
    assert s["updateStrategy"] == {"type": "OnDelete"}, "the operator rolls bookies itself"
    claims = {c["metadata"]["name"]: c["spec"] for c in s["volumeClaimTemplates"]}
    assert claims["journal"]["storageClassName"] == "local-nvme"
    assert claims["journal"]["resources"]["requests"]["storage"] == "100Gi"
    assert claims["ledgers"]["storageClassName"] == "fast-ssd"
    assert claims["ledgers"]["resources"]["requests"]["storage"] == "1Ti"
    pod = s["template"]["spec"]
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["journal"] == bookie.JOURNAL_DIR and mounts["ledgers"] == bookie.LEDGERS_DIR
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert s["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }


def test_bookie_without_rack_awareness_only_prefers_spreading() -> None:
    pod = bookie.statefulset(OWNER, ClusterSpec.parse({}))["spec"]["template"]["spec"]
    assert pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]


def test_config_change_changes_pod_template_hash() -> None:
    a = bookie.statefulset(OWNER, ClusterSpec.parse({}))
    b = bookie.statefulset(OWNER, ClusterSpec.parse({"bookies": {"config": {"x": "1"}}}))
    key = common.CONFIG_HASH_ANNOTATION
    assert (
        a["spec"]["template"]["metadata"]["annotations"][key]
        != (b["spec"]["template"]["metadata"]["annotations"][key])
    )


def test_scale_down_override() -> None:
    sts = bookie.statefulset(OWNER, ClusterSpec.parse({"bookies": {"replicas": 3}}), replicas=4)
    assert sts["spec"]["replicas"] == 4


def test_rack_map() -> None:
    cm = bookie.rack_map(OWNER, {"dev-bookie-1": "rack-b", "dev-bookie-0": "rack-a"})
    validate(cm)
    assert cm["data"] == {"dev-bookie-0": "/rack-a", "dev-bookie-1": "/rack-b"}


def test_broker_deployment_service_and_config() -> None:
    spec = ClusterSpec.parse(SPECS["production"])
    dep = broker.deployment(OWNER, spec)
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"] for p in c["ports"]} == {"pulsar", "http"}
    svc = broker.service(OWNER, spec)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"pulsar": 6650, "http": 8080}
    conf = broker.config_data(OWNER, spec)
    assert conf["managedLedgerDefaultEnsembleSize"] == "3"
    assert conf["managedLedgerDefaultAckQuorum"] == "2"
    assert conf["maxMessageSize"] == "5242880", "user overrides win"
    assert conf["metadataStoreUrl"] == "etcd://dev-etcd-client.pulsar.svc:2379"
    assert broker.service_url(OWNER, spec) == "pulsar://dev-broker.pulsar.svc:6650"
    assert broker.admin_url(OWNER, ClusterSpec.parse({})) == "http://dev-broker.pulsar.svc:8080"
    plain = broker.service(OWNER, ClusterSpec.parse({}))
    assert {p["port"] for p in plain["spec"]["ports"]} == {6650, 8080}


def test_probes_ask_whether_the_process_serves() -> None:
    spec = ClusterSpec.parse(SPECS["production"])
    objs = by_kind_name(build_all(OWNER, spec))

    def probe(name: str, kind: str = "Deployment") -> str:
        c = objs[(kind, name)]["spec"]["template"]["spec"]["containers"][0]
        return str(c["readinessProbe"]["httpGet"]["path"])

    assert probe("dev-broker") == "/status.html"  # no credentials needed (spec.auth)
    assert probe("dev-bookie", "StatefulSet") == "/health"
    assert probe("dev-proxy") == "/status.html"


def test_proxy_objects() -> None:
    spec = ClusterSpec.parse(SPECS["proxy-nodeport"])
    objs = by_kind_name(build_all(OWNER, spec))
    dep = objs[("Deployment", "dev-proxy")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == spec.images.broker, "the proxy runs from the broker image"
    assert c["args"] == ["proxy", "--config=/etc/magnetar/proxy/proxy.conf"]
    svc = objs[("Service", "dev-proxy")]["spec"]
    assert svc["type"] == "NodePort"
    assert {p["name"]: p.get("nodePort") for p in svc["ports"]} == {"pulsar": 30650, "http": None}
    assert proxy.config_data(OWNER, spec)["metadataStoreUrl"] == (
        "etcd://dev-etcd-client.pulsar.svc:2379"
    )
    assert ("Deployment", "dev-proxy") not in by_kind_name(
        build_all(OWNER, ClusterSpec.parse({}))
    ), "no proxy unless enabled"


def test_etcd_initial_cluster_and_external_metadata() -> None:
    spec = ClusterSpec.parse({"metadata": {"etcd": {"replicas": 3}}})
    cmd = etcd.statefulset(OWNER, spec)["spec"]["template"]["spec"]["containers"][0]["command"]
    init = next(a for a in cmd if a.startswith("--initial-cluster="))
    assert (
        init.count("=http://") == 3
        and "dev-etcd-2=http://dev-etcd-2.dev-etcd.pulsar.svc:2380" in init
    )
    ext = ClusterSpec.parse(SPECS["external-metadata"])
    assert etcd.build(OWNER, ext) == []
    assert etcd.metadata_store_url(OWNER, ext) == "etcd://etcd-0:2379,etcd-1:2379"


def test_monitoring_kinds() -> None:
    assert monitoring.build(OWNER, ClusterSpec.parse({})) == []
    sm = monitoring.build(OWNER, ClusterSpec.parse(SPECS["production"]))
    assert [o["kind"] for o in sm] == ["ServiceMonitor"] * 3
    pm = monitoring.build(OWNER, ClusterSpec.parse(SPECS["external-metadata"]))
    assert [o["kind"] for o in pm] == ["PodMonitor"] * 2, "no etcd monitor for external etcd"
    # a broker's Pulsar namespace label is kept (honorLabels), the others get the target's
    honor = [o["spec"]["endpoints"][0].get("honorLabels", False) for o in sm]
    assert honor == [True, False, False]
    assert pm[0]["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


def test_bookie_command_line_matches_magnetar_bookie() -> None:
    spec = ClusterSpec.parse(SPECS["production"])
    c = bookie.statefulset(OWNER, spec)["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == [
        "bookie",
        "--config=/etc/magnetar/bookkeeper.conf",
        "--advertised-address=$(POD_NAME).dev-bookie.pulsar.svc",
        "--journal-group-wait-ms=1",  # spec.bookies.extraArgs come last
    ]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["config"] == "/etc/magnetar"
    conf = bookie.config_data(OWNER, spec)
    assert conf["metadataServiceUri"] == "etcd://dev-etcd-client.pulsar.svc:2379"
    assert conf["ledgerDirectories"] == bookie.LEDGERS_DIR
    assert conf["journalDirectories"] == bookie.JOURNAL_DIR
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MAGNETAR_RACK_FILE"] == f"{bookie.RACKS_DIR}/$(POD_NAME)"
    plain = bookie.statefulset(OWNER, ClusterSpec.parse({}))["spec"]["template"]["spec"]
    assert "MAGNETAR_RACK_FILE" not in {e["name"] for e in plain["containers"][0]["env"]}


def test_broker_command_line_matches_magnetar_broker() -> None:
    spec = ClusterSpec.parse({"brokers": {"extraArgs": ["--session-ttl=20"]}})
    c = broker.deployment(OWNER, spec)["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == [
        "broker",
        "--config=/etc/magnetar/conf/broker.conf",
        "--advertised-address=$(POD_IP)",
        "--session-ttl=20",
    ]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["config"] == "/etc/magnetar/conf"


@pytest.mark.parametrize(
    ("brokers", "workers"),
    [
        ({}, 1),  # auto by default, no CPU limit
        ({"resources": {"limits": {"cpu": 2}}}, 2),  # auto by default
        ({"workers": 1, "resources": {"limits": {"cpu": 2}}}, 1),
        # advertisedListeners name one address, which workers cannot share
        (
            {
                "resources": {"limits": {"cpu": 2}},
                "config": {"advertisedListeners": "a:pulsar://h:1"},
            },
            1,
        ),
        ({"workers": 3}, 3),
        ({"workers": "auto"}, 1),  # no CPU limit
        ({"workers": "auto", "resources": {"limits": {"cpu": 4}}}, 4),
        ({"workers": "auto", "resources": {"limits": {"cpu": "2500m"}}}, 2),
        ({"workers": "auto", "resources": {"limits": {"cpu": "500m"}}}, 1),
        ({"workers": "auto", "resources": {"limits": {"cpu": "1.5"}}}, 1),
    ],
)
def test_broker_workers_from_the_spec_or_the_cpu_limit(
    brokers: dict[str, Any], workers: int
) -> None:
    """``spec.brokers.workers``: a count, or ``auto`` (the default) from the pod's CPU limit;
    one worker is the plain broker (no flag)."""
    spec = ClusterSpec.parse({"brokers": brokers})
    c = broker.deployment(OWNER, spec)["spec"]["template"]["spec"]["containers"][0]
    flags = [a for a in c["args"] if a.startswith("--workers")]
    assert flags == ([f"--workers={workers}"] if workers > 1 else [])
    if workers > 1:  # what magnetar broker parses
        flags = [a for a in c["args"][1:] if not a.startswith("--config=")]  # not mounted here
        assert cli.parse_args(["broker", "--metadata-url=etcd://e:2379", *flags]).workers == workers


def test_broker_workers_refuse_a_bad_cpu_limit() -> None:
    spec = ClusterSpec.parse(
        {"brokers": {"workers": "auto", "resources": {"limits": {"cpu": "x"}}}}
    )
    with pytest.raises(ValueError, match="'x' is not a CPU quantity"):
        spec.brokers.worker_count()


def test_data_pods_get_default_requests() -> None:
    """Bookies and etcd are never BestEffort: requests by default, the user's when given
    (limits alone: Kubernetes takes them as the requests)."""

    def resources(spec: ClusterSpec, kind: str, name: str) -> dict[str, Any]:
        objs = by_kind_name(build_all(OWNER, spec))
        out: dict[str, Any] = objs[(kind, name)]["spec"]["template"]["spec"]["containers"][0][
            "resources"
        ]
        return out

    plain = ClusterSpec.parse({})
    assert resources(plain, "StatefulSet", "dev-bookie") == {"requests": bookie.DEFAULT_REQUESTS}
    assert resources(plain, "StatefulSet", "dev-etcd") == {"requests": etcd.DEFAULT_REQUESTS}
    given = ClusterSpec.parse(
        {
            "bookies": {"resources": {"requests": {"memory": "4Gi"}}},
            "metadata": {"etcd": {"resources": {"limits": {"memory": "1Gi"}}}},
        }
    )
    assert resources(given, "StatefulSet", "dev-bookie") == {"requests": {"memory": "4Gi"}}
    assert resources(given, "StatefulSet", "dev-etcd") == {"limits": {"memory": "1Gi"}}
