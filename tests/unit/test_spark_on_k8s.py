"""spark-on-k8s/: the manifests are valid Kubernetes objects (offline schemas), the driver's
Role holds what Spark's driver does with the API and no more, submit.sh builds the
spark-submit command it documents (run with a stand-in spark-submit), and the
SparkApplication's arguments are ones the pipeline accepts. The job itself runs on the local
cluster in e2e/test_pulsarcluster.py (``test_spark_pipeline_as_a_spark_on_k8s_job``, driven by
e2e/spark_k8s.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from magnetar import __version__
from magnetar.spark.examples.payments import parser
from tests.unit.operator.schemas import ROOT, validate

DIR = ROOT / "spark-on-k8s"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DIR / name).read_text()) if d]


@pytest.mark.parametrize("name", ["rbac.yaml", "checkpoint-pvc.yaml"])
def test_manifests_are_valid(name: str) -> None:
    for doc in docs(name):
        validate(doc)


def test_driver_role_is_what_the_driver_needs() -> None:
    by_kind = {d["kind"]: d for d in docs("rbac.yaml")}
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in by_kind["Role"]["rules"]}
    assert rules[("pods",)] >= {"create", "get", "list", "watch", "delete"}
    assert rules[("services", "configmaps")] >= {"create", "get", "delete"}
    assert not any("*" in v for v in rules.values())
    assert by_kind["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": by_kind["ServiceAccount"]["metadata"]["name"]}
    ]


def test_submit_builds_a_cluster_mode_spark_submit(tmp_path: Path) -> None:
    fake = tmp_path / "spark-submit"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.244.0.1:16443\n"
        "  name: local\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        "KUBECONFIG": str(kubeconfig),
        "SPARK_SUBMIT": str(fake),
        "MAGNETAR_SERVICE_URL": "pulsar://e2e-broker.ns.svc:6650",
        "MAGNETAR_ADMIN_URL": "http://e2e-broker.ns.svc:8080",
        "SPARK_NAMESPACE": "jobs",
        "SPARK_PULL_POLICY": "Never",
    }
    out = subprocess.run(
        ["bash", str(DIR / "submit.sh"), "--trigger", "continuous"],
        env=env, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    args = out.stdout.splitlines()
    assert args[:4] == ["--master", "k8s://https://10.244.0.1:16443", "--deploy-mode", "cluster"]
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert confs["spark.kubernetes.namespace"] == "jobs"
    assert confs["spark.kubernetes.container.image"] == f"magnetar/spark:{__version__}"
    assert confs["spark.kubernetes.container.image.pullPolicy"] == "Never"
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark"
    claim = "volumes.persistentVolumeClaim.checkpoints.options.claimName"
    assert confs[f"spark.kubernetes.driver.{claim}"] == "spark-checkpoints"
    assert confs[f"spark.kubernetes.executor.{claim}"] == "spark-checkpoints"
    main = args.index("local:///opt/spark-apps/payments.py")
    app = parser().parse_args(args[main + 1 :])
    assert app.service_url == "pulsar://e2e-broker.ns.svc:6650"
    assert app.checkpoint == "/checkpoints/merchant-totals" and app.trigger == "continuous"

    missing = {k: v for k, v in env.items() if k != "MAGNETAR_ADMIN_URL"}
    bad = subprocess.run(
        ["bash", str(DIR / "submit.sh")], env=missing, capture_output=True, text=True, timeout=30
    )
    assert bad.returncode != 0 and "MAGNETAR_ADMIN_URL" in bad.stderr


def test_spark_application_matches_the_image_and_the_pipeline() -> None:
    (app,) = docs("sparkapplication.yaml")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    spec = app["spec"]
    assert spec["image"] == f"magnetar/spark:{__version__}"
    assert spec["mainApplicationFile"] == "local:///opt/spark-apps/payments.py"
    assert (DIR / "apps/payments.py").is_file()  # copied to /opt/spark-apps by the Dockerfile
    assert spec["driver"]["serviceAccount"] == "spark"
    args = parser().parse_args(spec["arguments"])
    assert args.checkpoint.startswith("/checkpoints/")
    mounts = {m["mountPath"] for m in spec["driver"]["volumeMounts"]}
    assert mounts == {m["mountPath"] for m in spec["executor"]["volumeMounts"]} == {"/checkpoints"}
