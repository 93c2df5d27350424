"""images/*: Dockerfiles that follow the house rules (local Debian base, non-root, health
check, exec-form entrypoint), checked as text (tests/images builds and runs them), and the
bookie entrypoint's rack handling, run for real with a stand-in `magnetar`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.operator.schemas import ROOT

IMAGES = ["broker", "bookie", "operator", "spark"]


@pytest.mark.parametrize("name", IMAGES)
def test_dockerfile_rules(name: str) -> None:
    text = (ROOT / "images" / name / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and base.group(1) == "magnetar/debian-base:bookworm", (
        "the base built locally from Debian packages (scripts/images/base.sh)"
    )
    assert ":latest" not in text
    # nothing that needs a registry or BuildKit: no frontend image, no COPY --chmod
    assert not re.search(r"^# *syntax=", text, re.M)
    assert "--chmod" not in text
    assert "_gen" not in (ROOT / "images" / name / "Dockerfile.dockerignore").read_text(), (
        "the generated protobuf modules are part of the package"
    )
    final = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^USER 10001:10001$", final, re.M), "non-root in the final stage"
    if name != "spark":  # Spark's driver and executor pods are jobs, not servers to probe
        assert "HEALTHCHECK" in final
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", final, re.M)
    assert entry and entry.group(1).startswith('["'), "exec-form entrypoint"
    assert not re.search(r"^ADD ", text, re.M), "COPY, never ADD"
    assert (ROOT / "images" / name / "Dockerfile.dockerignore").is_file()


def test_bookie_entrypoint_adds_the_rack(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "magnetar"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    rack = tmp_path / "racks" / "c-bookie-0"
    rack.parent.mkdir()
    rack.write_text("/rack-b")
    script = str(ROOT / "images/bookie/entrypoint.sh")
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["sh", script, "bookie", "--port=3181"],
        env={**env, "MAGNETAR_RACK_FILE": str(rack)},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert out.stdout.split() == ["bookie", "--port=3181", "--rack=/rack-b"]
    missing = subprocess.run(
        ["sh", script, "bookie"],
        env={**env, "MAGNETAR_RACK_FILE": str(tmp_path / "nope"), "MAGNETAR_RACK_WAIT": "0"},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert missing.stdout.split() == ["bookie"] and "default rack" in missing.stderr
    plain = subprocess.run(
        ["sh", script, "bookie"], env=env, capture_output=True, text=True, check=True, timeout=10
    )
    assert plain.stdout.split() == ["bookie"]


def test_operator_entrypoint_runs_kopf() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar_operator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "--standalone" in out.stdout and "--namespace" in out.stdout


def _fake(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    path.chmod(0o755)


def test_spark_entrypoint_runs_executors_and_drivers(tmp_path: Path) -> None:
    """What Spark on Kubernetes starts the image with: ``executor`` (the JVM built from the
    SPARK_* variables, SPARK_JAVA_OPT_<n> in numeric order) and ``driver ARGS`` (spark-submit
    in client mode bound to the pod address)."""
    java_home, spark_home = tmp_path / "jvm", tmp_path / "spark"
    _fake(java_home / "bin/java")
    _fake(spark_home / "bin/spark-submit")
    script = str(ROOT / "images/spark/entrypoint.sh")
    base = {"PATH": os.environ["PATH"], "JAVA_HOME": str(java_home), "SPARK_HOME": str(spark_home)}
    executor_env = {
        **base,
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_2": "-Dspark.b=two words",
        "SPARK_JAVA_OPT_10": "-Dspark.c=10",
        "SPARK_JAVA_OPT_1": "-Dspark.a=1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.244.0.9",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "exec-3",
    }
    out = subprocess.run(
        ["bash", script, "executor"], env=executor_env, capture_output=True, text=True,
        check=True, timeout=10,
    )  # fmt: skip
    args = out.stdout.splitlines()
    assert args[:6] == [
        "-Dspark.driver.port=7078", "-Dspark.a=1", "-Dspark.b=two words", "-Dspark.c=10",
        "-Xms512m", "-Xmx512m",
    ]  # fmt: skip
    assert args[6:8] == ["-cp", f"{spark_home}/jars/*"]
    assert args[8] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    flags = dict(zip(args[9::2], args[10::2], strict=True))
    assert flags == {
        "--driver-url": "spark://CoarseGrainedScheduler@driver-svc:7078",
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-app-1",
        "--hostname": "10.244.0.9",
        "--resourceProfileId": "0",
        "--podName": "exec-3",
    }
    missing = {k: v for k, v in executor_env.items() if k != "SPARK_DRIVER_URL"}
    bad = subprocess.run(
        ["bash", script, "executor"], env=missing, capture_output=True, text=True, timeout=10
    )
    assert bad.returncode != 0 and "SPARK_DRIVER_URL" in bad.stderr

    driver = subprocess.run(
        ["bash", script, "driver", "--properties-file", "/opt/spark/conf/spark.properties",
         "local:///opt/spark-apps/payments.py", "--checkpoint", "/ckpt"],
        env={**base, "SPARK_DRIVER_BIND_ADDRESS": "10.244.0.7"},
        capture_output=True, text=True, check=True, timeout=10,
    )  # fmt: skip
    assert driver.stdout.splitlines() == [
        "--deploy-mode", "client",
        "--conf", "spark.driver.bindAddress=10.244.0.7",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.244.0.7",
        "--properties-file", "/opt/spark/conf/spark.properties",
        "local:///opt/spark-apps/payments.py", "--checkpoint", "/ckpt",
    ]  # fmt: skip
