"""A pod of the Kubernetes ``Function`` resource, without Kubernetes: the environment the
operator's StatefulSet gives its pods (``builders.function``) handed to ``python -m
magnetar.functions.pod`` against a real standalone. The package comes from the broker's
download endpoint, the instance id from the pod's ordinal, the secret from the env var the
kubelet fills from the Secret; a pod whose function does not exist, or whose name has no
ordinal, exits at once naming the problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar_operator.builders import function as fn
from tests.integration.functions.test_functions import (
    EXAMPLES,
    TIMEOUT_S,
    admin,
    as_json,
    receive_all,
)
from tests.support import standalone as standalone_procs
from tests.support.procs import Proc
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

SOURCE_ROOT = str(Path(__file__).resolve().parents[3] / "src")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("fnpod") / "data") as proc:
        yield proc


def function_resource(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "compute.functionmesh.io/v1alpha1",
        "kind": "Function",
        "metadata": {"name": name, "namespace": "pulsar", "uid": "u-1"},
        "spec": {
            "clusterRef": {"name": "dev"},
            "className": "context_probe.ContextProbe",
            "replicas": replicas,
            "input": {"topics": [f"{name}-in"]},
            "output": {"topic": f"{name}-out"},
            "python": {"py": "context_probe.py"},
            "subscriptionPosition": "earliest",
            "funcConfig": {"side": f"{name}-side"},
            "secretsMap": {"password": {"path": "probe-secrets", "key": "password"}},
            **spec,
        },
    }


def pod_env(body: dict[str, Any], standalone: StandaloneProc, ordinal: int) -> dict[str, str]:
    """The StatefulSet's env as the kubelet resolves it (the pod's name, the Secret's value)."""
    target = fn.Target(
        service_url=standalone.service_url,
        web_service_url=standalone.http_url,
        image="magnetar/broker:0.1.0",
    )
    sts = fn.statefulset(body, target)
    env: dict[str, str] = {}
    for item in sts["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "secretKeyRef" in item["valueFrom"]:
            env[item["name"]] = "hunter2"  # the value of probe-secrets/password
    env["POD_NAME"] = f"{sts['metadata']['name']}-{ordinal}"
    return env


def run_pod(env: dict[str, str], work: Path, log: Path) -> Proc:
    return Proc(
        [sys.executable, "-m", "magnetar.functions.pod"],
        log_path=log,
        env={
            **env,
            "MAGNETAR_FUNCTION_WORK_DIR": str(work),
            "PYTHONPATH": os.pathsep.join([SOURCE_ROOT, os.environ.get("PYTHONPATH", "")]),
        },
    ).start()


def test_pod_downloads_the_package_and_runs_its_ordinal(
    standalone: StandaloneProc, tmp_path: Path
) -> None:
    # the package is uploaded through the admin API; the standalone's own instance is
    # stopped so that only the pod's instance consumes
    admin(
        standalone, "functions", "create", "--name", "probe",
        "--py", str(EXAMPLES / "context_probe.py"), "--classname", "context_probe.ContextProbe",
        "--inputs", "unused-in", "--output", "unused-out",
    )  # fmt: skip
    admin(standalone, "functions", "stop", "--name", "probe")
    body = function_resource("probe", 2)
    env = pod_env(body, standalone, 1)
    pod = run_pod(env, tmp_path / "work", tmp_path / "pod.log")
    try:
        with standalone_procs.client(standalone) as client:
            out = client.subscribe(
                "probe-out", "check", initial_position=pulsar.InitialPosition.Earliest
            )
            client.create_producer("probe-in").send(b"hello", properties={"k": "v"})
            [msg] = receive_all(out, 1)
            answer = json.loads(msg.data())
            assert answer["instance_id"] == 1  # the pod's ordinal
            assert answer["secret"] == "hunter2"
            assert answer["user_config"] == {"side": "probe-side"}
            assert answer["topic"] == "persistent://public/default/probe-in"
            assert answer["properties"] == {"k": "v"}
            # state goes through the broker's state endpoints (the web service URL)
            assert answer["counter"] == 1 and answer["state"] == "hello"
            assert msg.properties()["__pfn_input_topic__"] == "persistent://public/default/probe-in"
            assert pod.alive()
        assert json.loads((tmp_path / "work/spec.json").read_text())["config"]["parallelism"] == 2
        report = tmp_path / "work/metrics.json"
        wait_until(
            lambda: json.loads(report.read_text()).get("processed") == 1,
            timeout=TIMEOUT_S,
            what="the instance's report counting the message",
        )
    finally:
        pod.stop()
    # the broker's record is untouched: the pod only downloaded the package
    assert as_json(standalone, "functions", "get", "--name", "probe")["py"] == "context_probe.py"


def pod_exit(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.functions.pod"],
        env={
            **os.environ,
            **env,
            "MAGNETAR_FUNCTION_WORK_DIR": str(tmp_path / "work"),
            "PYTHONPATH": os.pathsep.join([SOURCE_ROOT, os.environ.get("PYTHONPATH", "")]),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pod_without_a_package_or_an_ordinal_says_why(
    standalone: StandaloneProc, tmp_path: Path
) -> None:
    env = pod_env(function_resource("nowhere", 1), standalone, 0)
    done = pod_exit(env, tmp_path)
    assert done.returncode == 2
    assert "cannot download the package of public/default/nowhere" in done.stderr
    assert "404" in done.stderr or "not found" in done.stderr.lower()

    done = pod_exit({**env, "POD_NAME": "nowhere-function"}, tmp_path)
    assert done.returncode == 2 and "does not end with a StatefulSet ordinal" in done.stderr

    done = pod_exit({**env, "POD_NAME": "nowhere-function-3"}, tmp_path)
    assert done.returncode == 2 and "instance 3 is beyond parallelism 1" in done.stderr

    bad = json.loads(env["MAGNETAR_FUNCTION_CONFIG"])
    bad["processingGuarantees"] = "SOMETIMES"
    done = pod_exit({**env, "MAGNETAR_FUNCTION_CONFIG": json.dumps(bad)}, tmp_path)
    assert done.returncode == 2 and "processingGuarantees" in done.stderr
