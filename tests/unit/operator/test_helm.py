"""helm/magnetar with the pinned helm (scripts/k8s/install-helm.sh): `helm lint` clean,
`helm template` of every ci/values-*.yaml valid against the Kubernetes schemas offline,
least-privilege RBAC, and bad values failing at render time with a clear message."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.controlplane import binary
from tests.unit.operator.schemas import ROOT, validate

CHART = ROOT / "helm/magnetar"
CI_VALUES = sorted((CHART / "ci").glob("values-*.yaml"))
KUBE = ["--kube-version", "1.34.0", "--api-versions", "monitoring.coreos.com/v1"]


@pytest.fixture(scope="module")
def helm() -> str:
    path = binary("helm")
    if path is None:
        pytest.skip("helm is not built: run `make k8s-tools` (scripts/k8s/install-helm.sh)")
    return str(path)


def run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, check=False)


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    out = run(helm, "template", "rel", str(CHART), "--namespace", "magnetar", *KUBE, *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_lint_clean(helm: str, values: Path | None) -> None:
    args = ["-f", str(values)] if values else []
    out = run(helm, "lint", str(CHART), "--strict", "--kube-version", "1.34.0", *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_rendered_objects_are_valid(helm: str, values: Path) -> None:
    docs = render(helm, "-f", str(values), "--include-crds")
    kinds = [d["kind"] for d in docs]
    assert kinds.count("CustomResourceDefinition") == 4
    assert "Deployment" in kinds
    for doc in docs:
        validate(doc)


def test_defaults_cluster_wide_rbac(helm: str) -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(helm)}
    dep = docs[("Deployment", "rel-magnetar-operator")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    # the name `make images` builds and loads into local clusters; no registry by default
    assert c["image"] == "magnetar/operator:0.1.0"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MAGNETAR_OPERATOR_IMAGE_REGISTRY"] == ""
    assert "--all-namespaces" in c["args"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    role = docs[("ClusterRole", "rel-magnetar-operator")]
    assert not any(k == "Role" for k, _ in docs)
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    secrets = [r for r in role["rules"] if "secrets" in r["resources"]]
    # get (offload credentials, certificates, tokens) and write (what spec.tls/spec.auth
    # issue); never list or watch: the operator reads only the Secrets it names
    assert secrets == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "update"]}
    ]
    assert ("PulsarCluster", "rel") not in docs and ("ServiceMonitor", "rel-magnetar") not in docs


def test_global_image_registry_moves_every_image(helm: str) -> None:
    """global.imageRegistry: one value puts every image the release runs under a private
    registry -- the operator, its hook Jobs, MinIO -- and tells the operator, whose default
    broker, bookie and etcd images of every PulsarCluster follow it."""
    docs = render(
        helm,
        "-f", str(CHART / "ci/values-cluster-proxy.yaml"),
        "--set", "global.imageRegistry=registry.example.com:5000/",
    )  # fmt: skip
    images = {
        (d["kind"], d["metadata"]["name"]): [
            c["image"] for c in d["spec"]["template"]["spec"]["containers"]
        ]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }
    reg = "registry.example.com:5000/magnetar"
    assert images == {
        ("Deployment", "rel-magnetar-operator"): [f"{reg}/operator:0.1.0"],
        ("Deployment", "rel-magnetar-minio"): [f"{reg}/minio:0.1.0"],
        ("Job", "rel-magnetar-minio-bucket"): [f"{reg}/operator:0.1.0"],
        ("Job", "rel-magnetar-uninstall"): [f"{reg}/operator:0.1.0"],
    }
    operator = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("operator")
    )
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MAGNETAR_OPERATOR_IMAGE_REGISTRY"] == "registry.example.com:5000"
    # the chart's PulsarCluster names no image: the operator's default applies
    pc = next(d for d in docs if d["kind"] == "PulsarCluster")
    assert "image" not in pc["spec"]
    out = run(helm, "template", "rel", str(CHART), "--set", "global.imageRegistry=not a host")
    assert out.returncode != 0 and "imageRegistry" in out.stderr, out.stderr


def test_production_values(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci/values-production.yaml"))
    by = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs}
    assert ("Role", "rel-magnetar-operator", "pulsar") in by
    assert ("RoleBinding", "rel-magnetar-operator", "pulsar") in by
    cluster_role = by[("ClusterRole", "rel-magnetar-operator", None)]
    assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == {
        "customresourcedefinitions",
        "namespaces",
        "nodes",
        "persistentvolumes",
    }
    dep = by[("Deployment", "rel-magnetar-operator", "magnetar")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("registry.example.com/magnetar/operator@sha256:")
    assert c["args"][0] == "--namespace=pulsar" and "--verbose" in c["args"]
    pc = by[("PulsarCluster", "prod", "magnetar")]
    assert pc["spec"]["bookies"]["journal"]["storageClassName"] == "local-nvme"
    sm = by[("ServiceMonitor", "rel-magnetar", "magnetar")]
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    http = next(e for e in sm["spec"]["endpoints"] if e["port"] == "http")
    assert http["honorLabels"] is True, "Pulsar's namespace label kept (not exported_namespace)"
    pm = by[("PodMonitor", "rel-magnetar-operator", "magnetar")]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pm["spec"]["selector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    ), "it selects the operator's pod"
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == 8081
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MAGNETAR_OPERATOR_METRICS_PORT"] == "8081"
    dashboards = [
        d for d in docs if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]
    ]
    shipped = sorted((CHART / "files/dashboards").glob("*.json"))
    assert len(shipped) == 10 and len(dashboards) == len(shipped)
    assert all(d["metadata"]["namespace"] == "monitoring" for d in dashboards)
    assert all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in dashboards)
    rules = by[("PrometheusRule", "rel-magnetar-magnetar-rules", "magnetar")]
    assert rules["metadata"]["labels"]["release"] == "prometheus"
    source = yaml.safe_load((CHART / "files/alerts/magnetar.rules.yaml").read_text())
    assert rules["spec"]["groups"] == source["groups"], "the PrometheusRule is the rule file"


BAD = [
    (["--set", "operator.replicas=2"], "operator.replicas must be 1"),
    (
        ["--set", "cluster.enabled=true", "--set", "cluster.spec.bookies.ackQuorum=3"],
        "ackQuorum (3) <= writeQuorum (1) <= ensembleSize (1) is required",
    ),
    (
        [
            "--set",
            "cluster.enabled=true",
            "--set",
            "cluster.spec.bookies.ensembleSize=2",
            "--set",
            "cluster.spec.bookies.writeQuorum=2",
        ],
        "ensembleSize (2) must not exceed replicas (1)",
    ),
    (
        ["--set", "cluster.enabled=true", "--set", "cluster.spec.offload.enabled=true"],
        "bucket and credentialsSecret are required",
    ),
    (["--set", "operator.watchNamespaces={team-*}"], "is not a valid namespace name"),
    (["--set", "operator.logLevel=loud"], "value must be one of"),
    (["--set", "operator.serviceAccount.create=false"], "operator.serviceAccount.name is required"),
    (["--set", "unknownKey=1"], "additional properties 'unknownKey' not allowed"),
    (["--set", "minio.enabled=true", "--set", "minio.bucket=Bad_Bucket"], "/minio/bucket"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_bad_values_fail_at_render_with_a_clear_message(
    helm: str, args: list[str], message: str
) -> None:
    out = run(helm, "template", "rel", str(CHART), "--kube-version", "1.34.0", *args)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_service_monitor_needs_the_prometheus_operator(helm: str) -> None:
    out = run(
        helm, "template", "rel", str(CHART), "--set", "monitoring.serviceMonitor.enabled=true"
    )
    assert out.returncode != 0 and "ServiceMonitor CRD (monitoring.coreos.com/v1" in out.stderr
    out = run(
        helm, "template", "rel", str(CHART), "--set", "monitoring.prometheusRules.enabled=true"
    )
    assert out.returncode != 0 and "PrometheusRule CRD (monitoring.coreos.com/v1" in out.stderr


def test_dashboards_are_json(helm: str) -> None:
    import json

    for path in (CHART / "files/dashboards").glob("*.json"):
        dash = json.loads(path.read_text())
        assert dash["uid"].startswith("magnetar-") and dash["panels"]


def test_minio_for_local_clusters(helm: str) -> None:
    """minio.enabled: a non-root MinIO on a PVC with generated credentials (the keys a
    PulsarCluster's offload.credentialsSecret names), a Service, and a post-install Job that
    creates the bucket with those credentials."""
    docs = render(helm, "-f", str(CHART / "ci/values-minio.yaml"))
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    secret = by["Secret", "rel-magnetar-minio"]
    assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert by["PersistentVolumeClaim", "rel-magnetar-minio"]["spec"]["resources"] == {
        "requests": {"storage": "2Gi"}
    }
    pod = by["Deployment", "rel-magnetar-minio"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"].startswith("magnetar/minio:")
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env["MINIO_ROOT_USER"] == {"name": "rel-magnetar-minio", "key": "AWS_ACCESS_KEY_ID"}
    assert by["Service", "rel-magnetar-minio"]["spec"]["ports"][0]["port"] == 9000
    job = by["Job", "rel-magnetar-minio-bucket"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    jenv = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert jenv["BUCKET"] == "offload"
    assert jenv["S3_ENDPOINT"] == "http://rel-magnetar-minio.magnetar.svc:9000"


def test_minio_existing_secret_and_no_persistence(helm: str) -> None:
    docs = render(
        helm,
        "--set", "minio.enabled=true", "--set", "minio.existingSecret=my-s3",
        "--set", "minio.persistence.size=",
    )  # fmt: skip
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Secret", "rel-magnetar-minio") not in kinds
    assert ("PersistentVolumeClaim", "rel-magnetar-minio") not in kinds
    pod = next(d for d in docs if d["kind"] == "Deployment" and "minio" in d["metadata"]["name"])
    spec = pod["spec"]["template"]["spec"]
    assert {"name": "data", "emptyDir": {}} in spec["volumes"]
    refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in spec["containers"][0]["env"]
        if "valueFrom" in e
    }
    assert refs == {"my-s3"}


def test_minio_is_the_chart_clusters_offload_target(helm: str) -> None:
    """With minio.enabled, a PulsarCluster the chart creates offloads to that MinIO (its
    Service, bucket and Secret) unless cluster.spec.offload names another target."""
    values = ["-f", str(CHART / "ci/values-minio.yaml"), "--set", "cluster.enabled=true"]
    (cluster,) = [d for d in render(helm, *values) if d["kind"] == "PulsarCluster"]
    assert cluster["spec"]["offload"] == {
        "enabled": True,
        "endpoint": "http://rel-magnetar-minio.magnetar.svc:9000",
        "bucket": "offload",
        "credentialsSecret": "rel-magnetar-minio",
    }
    own = render(helm, *values, "--set", "cluster.spec.offload.enabled=false")
    (cluster,) = [d for d in own if d["kind"] == "PulsarCluster"]
    assert cluster["spec"]["offload"] == {"enabled": False}
    (plain,) = [
        d for d in render(helm, "--set", "cluster.enabled=true") if d["kind"] == "PulsarCluster"
    ]
    assert "offload" not in plain["spec"]


def test_minio_target_keeps_the_specs_thresholds_and_lag(helm: str) -> None:
    """cluster.spec.offload without a target of its own (only thresholds, deletion lag,
    region) still offloads to the chart's MinIO, with those keys kept; one that names its
    own endpoint/bucket/credentialsSecret is left as written."""
    values = ["-f", str(CHART / "ci/values-minio.yaml"), "--set", "cluster.enabled=true"]
    tuned = render(
        helm, *values,
        "--set", "cluster.spec.offload.deletionLagSeconds=5",
        "--set", "cluster.spec.offload.thresholdBytes=0",
        "--set", "cluster.spec.offload.enabled=true",
    )  # fmt: skip
    (cluster,) = [d for d in tuned if d["kind"] == "PulsarCluster"]
    assert cluster["spec"]["offload"] == {
        "enabled": True,
        "endpoint": "http://rel-magnetar-minio.magnetar.svc:9000",
        "bucket": "offload",
        "credentialsSecret": "rel-magnetar-minio",
        "deletionLagSeconds": 5,
        "thresholdBytes": 0,
    }
    own = render(
        helm, *values,
        "--set", "cluster.spec.offload.enabled=true",
        "--set", "cluster.spec.offload.bucket=elsewhere",
        "--set", "cluster.spec.offload.credentialsSecret=aws-keys",
    )  # fmt: skip
    (cluster,) = [d for d in own if d["kind"] == "PulsarCluster"]
    assert cluster["spec"]["offload"] == {
        "enabled": True,
        "bucket": "elsewhere",
        "credentialsSecret": "aws-keys",
    }


def test_uninstall_hook_deletes_the_cluster_before_the_operator_goes(helm: str) -> None:
    """With a PulsarCluster in the release, a pre-delete Job (operator image, its own
    ServiceAccount and a Role limited to the release's namespace) deletes it first."""
    docs = render(helm, "-f", str(CHART / "ci/values-cluster-minimal.yaml"))
    hooks = {
        d["kind"]: d
        for d in docs
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"
    }
    assert set(hooks) == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    for kind, doc in hooks.items():
        meta = doc["metadata"]
        assert meta["name"] == "rel-magnetar-uninstall" and meta["namespace"] == "magnetar", kind
        policy = meta["annotations"]["helm.sh/hook-delete-policy"]
        assert policy == "before-hook-creation,hook-succeeded", kind
    # the ServiceAccount and its rights exist before the Job runs
    weight = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in hooks.items()}
    assert weight["ServiceAccount"] < weight["RoleBinding"] < weight["Job"]
    assert weight["Role"] < weight["RoleBinding"]
    rules = hooks["Role"]["rules"]
    assert rules == [
        {
            "apiGroups": ["magnetar.dev"],
            "resources": ["pulsarclusters", "tenants", "topics"],
            "verbs": ["get", "list", "delete"],
        },
        {
            "apiGroups": ["compute.functionmesh.io"],
            "resources": ["functions"],
            "verbs": ["list", "delete"],
        },
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "pods"], "verbs": ["list"]},
    ]
    binding = hooks["RoleBinding"]
    assert binding["roleRef"]["name"] == "rel-magnetar-uninstall"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-magnetar-uninstall", "namespace": "magnetar"}
    ]
    job = hooks["Job"]["spec"]
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-magnetar-uninstall"
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    operator = next(d for d in docs if d["kind"] == "Deployment")
    assert c["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert c["command"] == ["python3", "-m", "magnetar_operator.uninstall"]
    assert c["args"] == ["--namespace=magnetar", "--cluster=dev", "--timeout=240"]
    assert job["activeDeadlineSeconds"] == 300  # bounded: the timeout plus the pod's start
    # the command the Job runs exists in the operator package and takes these arguments
    from magnetar_operator import uninstall

    with pytest.raises(SystemExit) as exc:
        uninstall.main(["--help"])
    assert exc.value.code == 0

    longer = render(
        helm,
        "-f",
        str(CHART / "ci/values-cluster-minimal.yaml"),
        "--set",
        "uninstallHook.timeoutSeconds=600",
    )
    job2 = next(d for d in longer if d["kind"] == "Job")
    assert job2["spec"]["activeDeadlineSeconds"] == 660
    assert "--timeout=600" in job2["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(
    "args",
    [
        [],
        [
            "-f",
            str(CHART / "ci/values-cluster-minimal.yaml"),
            "--set",
            "uninstallHook.enabled=false",
        ],
    ],
    ids=["no cluster in the release", "disabled"],
)
def test_no_uninstall_hook_without_a_cluster_or_when_disabled(helm: str, args: list[str]) -> None:
    assert not [d for d in render(helm, *args) if d["kind"] == "Job"]
