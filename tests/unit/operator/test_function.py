"""The Function resource's objects (builders.function): valid Kubernetes objects owned by the
Function, the FunctionConfig the instances get (accepted by the admin API's own check), the
cluster's TLS and token settings, the HPA, and the status read back from pods."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from magnetar.functions import config as fconfig
from magnetar.functions.config import FunctionName
from magnetar_operator.builders import function as fn
from tests.unit.operator.schemas import ROOT, validate

BODY: dict[str, Any] = {
    **yaml.safe_load((ROOT / "crds/examples/function.yaml").read_text()),
}
BODY["metadata"] = {**BODY["metadata"], "namespace": "pulsar", "uid": "f-0001"}
PLAIN = fn.Target(
    service_url="pulsar://dev-broker.pulsar.svc:6650",
    web_service_url="http://dev-broker.pulsar.svc:8080",
    image="magnetar/broker:0.1.0",
)
SECURED = fn.Target(
    service_url="pulsar+ssl://dev-broker.pulsar.svc:6651",
    web_service_url="https://dev-broker.pulsar.svc:8443",
    image="magnetar/broker:0.1.0",
    ca_secret=("dev-broker-tls", "ca.crt"),
    token_secret=("dev-tokens", "broker.token"),
)


def env_of(sts: dict[str, Any]) -> dict[str, Any]:
    container = sts["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_example_is_valid_and_its_objects_too() -> None:
    validate(BODY)
    objects = fn.build(BODY, PLAIN)
    assert [o["kind"] for o in objects] == ["Service", "StatefulSet", "HorizontalPodAutoscaler"]
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "compute.functionmesh.io/v1alpha1",
                "kind": "Function",
                "name": "exclamation",
                "uid": "f-0001",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_statefulset_runs_the_pod_entry_with_the_config() -> None:
    sts = fn.statefulset(BODY, PLAIN)
    assert sts["metadata"]["name"] == sts["spec"]["serviceName"] == "exclamation-function"
    assert sts["spec"]["replicas"] == 2
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["python3", "-m", "magnetar.functions.pod"]
    # Ready when the instance has written its first report (the pod entry's work dir)
    assert container["readinessProbe"]["exec"]["command"] == [
        "test", "-f", "/tmp/function/metrics.json",
    ]  # fmt: skip
    assert container["image"] == "magnetar/broker:0.1.0"
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }
    env = env_of(sts)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["MAGNETAR_FUNCTION_PACKAGE"] == "public/default/exclamation"
    assert env["MAGNETAR_SERVICE_URL"] == PLAIN.service_url
    assert env["MAGNETAR_WEB_SERVICE_URL"] == PLAIN.web_service_url
    assert "MAGNETAR_TLS_TRUST_CERTS" not in env and "MAGNETAR_AUTH_TOKEN_FILE" not in env
    secret_var = json.loads(env["MAGNETAR_FUNCTION_SECRETS"])["apiKey"]
    assert env[secret_var] == {"secretKeyRef": {"name": "exclamation-secrets", "key": "api-key"}}
    config = json.loads(env["MAGNETAR_FUNCTION_CONFIG"])
    assert config == fn.function_config(BODY)


def test_function_config_is_pulsars_and_passes_the_admin_check() -> None:
    config = fn.function_config(BODY)
    assert config == {
        "tenant": "public",
        "namespace": "default",
        "name": "exclamation",
        "className": "exclamation_function.ExclamationFunction",
        "inputs": ["persistent://public/default/in"],
        "output": "persistent://public/default/out",
        "processingGuarantees": "ATLEAST_ONCE",
        "subName": "exclamation",
        "deadLetterTopic": "persistent://public/default/exclamation-dlq",
        "maxMessageRetries": 3,
        "userConfig": {"suffix": "!"},
        "parallelism": 2,
        "runtime": "PYTHON",
        "py": "exclamation_function.py",
    }
    checked = fconfig.check(
        config, name=FunctionName("public", "default", "exclamation"), package_file=config["py"]
    )
    assert checked["subName"] == "exclamation" and checked["parallelism"] == 2


def test_function_mesh_names_map_to_pulsars() -> None:
    body = copy.deepcopy(BODY)
    body["spec"].update(
        tenant="acme",
        namespace="jobs",
        name="shout",
        processingGuarantee="effectively_once",
        subscriptionPosition="earliest",
        input={"topicPattern": "persistent://acme/jobs/in-.*"},
        python={"py": "shout.zip", "pyLocation": "function://acme/jobs/shout-v2"},
    )
    del body["spec"]["deadLetterTopic"], body["spec"]["maxMessageRetry"]
    config = fn.function_config(body)
    assert config["processingGuarantees"] == "EFFECTIVELY_ONCE"
    assert config["subscriptionPosition"] == "Earliest"
    assert config["topicsPattern"] == "persistent://acme/jobs/in-.*"
    assert (config["tenant"], config["namespace"], config["name"]) == ("acme", "jobs", "shout")
    assert fn.package_source(body) == "acme/jobs/shout-v2"
    assert fn.Name.of(body).fqfn == "acme/jobs/shout"
    # a dead-letter topic alone implies Function Mesh's default retries
    body["spec"]["processingGuarantee"] = "atleast_once"
    body["spec"]["deadLetterTopic"] = "dlq"
    assert fn.function_config(body)["maxMessageRetries"] == 3
    body["spec"]["processingGuarantee"] = "exactly"
    with pytest.raises(fn.FunctionSpecError, match="processingGuarantee"):
        fn.function_config(body)


def test_secured_cluster_mounts_the_ca_and_token_items_only() -> None:
    sts = fn.statefulset(BODY, SECURED)
    validate(sts)
    env = env_of(sts)
    assert env["MAGNETAR_TLS_TRUST_CERTS"] == "/etc/magnetar/tls/ca.crt"
    assert env["MAGNETAR_AUTH_TOKEN_FILE"] == "/etc/magnetar/auth/broker.token"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    # never the brokers' private key, which shares the CA's Secret
    assert volumes["tls"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert volumes["auth"]["secret"] == {
        "secretName": "dev-tokens",
        "items": [{"key": "broker.token", "path": "broker.token"}],
        "defaultMode": 0o440,
    }


def test_hpa_scales_the_function_only_with_max_replicas() -> None:
    autoscaler = fn.hpa(BODY)
    assert autoscaler is not None
    assert autoscaler["spec"]["scaleTargetRef"] == {
        "apiVersion": "compute.functionmesh.io/v1alpha1",
        "kind": "Function",
        "name": "exclamation",
    }
    assert (autoscaler["spec"]["minReplicas"], autoscaler["spec"]["maxReplicas"]) == (1, 4)
    body = copy.deepcopy(BODY)
    body["spec"]["minReplicas"] = 2
    assert fn.hpa(body)["spec"]["minReplicas"] == 2  # type: ignore[index]
    body = copy.deepcopy(BODY)
    del body["spec"]["maxReplicas"]
    assert fn.hpa(body) is None
    assert [o["kind"] for o in fn.build(body, PLAIN)] == ["Service", "StatefulSet"]


def pod(ordinal: int, state: dict[str, Any], *, ready: bool, restarts: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": f"exclamation-function-{ordinal}"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [
                {"name": "instance", "state": state, "ready": ready, "restartCount": restarts}
            ],
        },
    }


def test_status_from_statefulset_and_pods() -> None:
    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    crashing = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    sts = {"status": {"replicas": 2, "readyReplicas": 1}}
    fields, reason, message = fn.status(
        BODY, sts, [pod(1, crashing, ready=False, restarts=4), pod(0, running, ready=True)]
    )
    assert (fields["phase"], reason) == ("Degraded", "Degraded")
    assert message == "1/2 instances ready (instance 1: CrashLoopBackOff: back-off 10s)"
    assert fields["instances"] == [
        {"instanceId": 0, "pod": "exclamation-function-0", "running": True, "restarts": 0,
         "error": ""},
        {"instanceId": 1, "pod": "exclamation-function-1", "running": False, "restarts": 4,
         "error": "CrashLoopBackOff: back-off 10s"},
    ]  # fmt: skip
    assert fields["fqfn"] == "public/default/exclamation"
    assert fields["selector"] == (
        "app.kubernetes.io/component=function,app.kubernetes.io/instance=exclamation,"
        "app.kubernetes.io/name=magnetar"
    )
    fields, reason, _ = fn.status(BODY, {"status": {"replicas": 2, "readyReplicas": 2}}, [])
    assert (fields["phase"], reason) == ("Running", "Running")
    fields, reason, _ = fn.status(BODY, None, [])
    assert (fields["phase"], fields["readyReplicas"]) == ("Pending", 0)


def test_brokers_may_write_functions_and_nothing_more() -> None:
    """The brokers run ``functions create`` as a Function resource
    (``magnetarFunctionsRuntime=kubernetes``) under a service account of their own."""
    from magnetar_operator.builders import broker
    from magnetar_operator.builders.common import Owner
    from magnetar_operator.spec import ClusterSpec

    owner = Owner(name="dev", namespace="pulsar", uid="u")
    spec = ClusterSpec.parse({})
    objects = {o["kind"]: o for o in broker.build_workload(owner, spec)}
    for obj in objects.values():
        validate(obj)
    assert objects["Role"]["rules"] == [
        {
            "apiGroups": ["compute.functionmesh.io"],
            "resources": ["functions"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        }
    ]
    assert objects["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "dev-broker", "namespace": "pulsar"}
    ]
    assert objects["RoleBinding"]["roleRef"]["name"] == objects["Role"]["metadata"]["name"]
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert broker.config_data(owner, spec)["magnetarFunctionsRuntime"] == "kubernetes"
