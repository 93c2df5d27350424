"""Function resources (Function Mesh's compute.functionmesh.io/v1alpha1 subset) reconciled by
the real operator against a real kube-apiserver and kube-controller-manager (its StatefulSet
controller makes the pods, its garbage collector removes what a deleted Function owned); the
stand-in kubelet marks pods Ready.

Covers: a Function becomes a StatefulSet whose pods are its instances (status readyReplicas,
phase, per-instance state, Ready condition); replicas 2 -> 3 and the scale subresource scale
it; maxReplicas adds an HPA of the Function, removing it removes the HPA; a Function waits
for its ConfigMap; a Function on a secured PulsarCluster mounts its CA and token; deleting
the Function leaves nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.k8s.controlplane import ControlPlane
from tests.k8s.helpers import CR, FakeKubelet, condition, eventually
from tests.support.procs import Proc

pytestmark = pytest.mark.k8s

FM_GROUP = "compute.functionmesh.io"
CONFIG = "pulsar-conf"


def function(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{FM_GROUP}/v1alpha1",
        "kind": "Function",
        "metadata": {"name": name},
        "spec": {
            "pulsar": {"pulsarConfig": CONFIG},
            "className": "exclamation_function.ExclamationFunction",
            "replicas": replicas,
            "input": {"topics": ["persistent://public/default/in"]},
            "output": {"topic": "persistent://public/default/out"},
            "python": {"py": "exclamation_function.py"},
            **spec,
        },
    }


def pulsar_config(core: client.CoreV1Api, namespace: str) -> None:
    # Function Mesh's ConfigMap; no pod runs here, so nothing connects to these addresses
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=CONFIG),
            data={
                "webServiceURL": "http://127.0.0.1:8080",
                "brokerServiceURL": "pulsar://127.0.0.1:6650",
            },
        ),
    )


def sts_of(apps: client.AppsV1Api, namespace: str, name: str) -> client.V1StatefulSet:
    return apps.read_namespaced_stateful_set(f"{name}-function", namespace)


def running(cr: CR, name: str, replicas: int) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        obj = cr.get("functions", name)
        status = obj.get("status") or {}
        assert status.get("readyReplicas") == replicas, status
        assert status.get("phase") == "Running", status
        assert [i["instanceId"] for i in status["instances"]] == list(range(replicas)), status
        assert all(i["running"] for i in status["instances"]), status
        cond = condition(obj, "Ready")
        assert cond is not None and cond["status"] == "True", cond
        return obj

    return eventually(check, timeout=90, what=f"Function {name} Running with {replicas}")


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def test_function_runs_as_a_statefulset_scales_and_leaves_nothing(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    autoscaling = client.AutoscalingV2Api(api)
    cr = CR(api, namespace, group=FM_GROUP)
    pulsar_config(core, namespace)
    created = cr.create("functions", function("excl", 2, funcConfig={"suffix": "!"}))

    obj = running(cr, "excl", 2)
    assert obj["status"]["fqfn"] == "public/default/excl"
    assert obj["status"]["statefulSet"] == "excl-function"
    sts = sts_of(apps, namespace, "excl")
    assert sts.spec.replicas == 2
    [ref] = sts.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid) == ("Function", "excl", created["metadata"]["uid"])
    container = sts.spec.template.spec.containers[0]
    assert container.command == ["python3", "-m", "magnetar.functions.pod"]
    env = {e.name: e.value for e in container.env}
    assert env["MAGNETAR_SERVICE_URL"] == "pulsar://127.0.0.1:6650"
    assert env["MAGNETAR_WEB_SERVICE_URL"] == "http://127.0.0.1:8080"
    config = json.loads(env["MAGNETAR_FUNCTION_CONFIG"])
    assert config["parallelism"] == 2 and config["userConfig"] == {"suffix": "!"}
    assert config["processingGuarantees"] == "ATLEAST_ONCE"  # the CRD's default, Pulsar's name
    pods = core.list_namespaced_pod(namespace).items
    assert sorted(p.metadata.name for p in pods) == ["excl-function-0", "excl-function-1"]

    # replicas 2 -> 3: the StatefulSet follows, instance 2 appears
    cr.patch("functions", "excl", {"spec": {"replicas": 3}})
    running(cr, "excl", 3)
    assert sts_of(apps, namespace, "excl").spec.replicas == 3
    config = json.loads(
        {
            e.name: e.value
            for e in sts_of(apps, namespace, "excl").spec.template.spec.containers[0].env
        }["MAGNETAR_FUNCTION_CONFIG"]
    )
    assert config["parallelism"] == 3

    # the scale subresource (what `kubectl scale` and the HPA use)
    client.CustomObjectsApi(api).patch_namespaced_custom_object_scale(
        FM_GROUP, "v1alpha1", namespace, "functions", "excl", {"spec": {"replicas": 1}}
    )
    running(cr, "excl", 1)
    eventually(
        lambda: (
            sorted(p.metadata.name for p in core.list_namespaced_pod(namespace).items)
            == ["excl-function-0"]
        ),
        timeout=60,
        what="instances 1 and 2 gone",
    )
    scale = client.CustomObjectsApi(api).get_namespaced_custom_object_scale(
        FM_GROUP, "v1alpha1", namespace, "functions", "excl"
    )
    assert scale["status"]["replicas"] == 1
    assert "app.kubernetes.io/instance=excl" in scale["status"]["selector"]

    # maxReplicas: an HPA of the Function itself; without it, no HPA
    cr.patch("functions", "excl", {"spec": {"maxReplicas": 4}})
    hpa = eventually(
        lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler("excl-function", namespace),
        timeout=60,
        what="the HPA",
    )
    assert (hpa.spec.scale_target_ref.kind, hpa.spec.scale_target_ref.name) == ("Function", "excl")
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 4)
    cr.patch("functions", "excl", {"spec": {"maxReplicas": None}})
    eventually(
        lambda: gone(
            lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler(
                "excl-function", namespace
            )
        ),
        timeout=60,
        what="the HPA removed with maxReplicas",
    )

    # deletion: the garbage collector removes what the Function owned
    cr.patch("functions", "excl", {"spec": {"maxReplicas": 2}})
    eventually(
        lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler("excl-function", namespace),
        timeout=60,
        what="the HPA again",
    )
    cr.delete("functions", "excl")
    eventually(lambda: not cr.exists("functions", "excl"), timeout=120, what="Function gone")
    for read in (
        lambda: sts_of(apps, namespace, "excl"),
        lambda: core.read_namespaced_service("excl-function", namespace),
        lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler("excl-function", namespace),
    ):
        eventually(lambda read=read: gone(read), timeout=60, what="owned objects gone")
    eventually(lambda: not core.list_namespaced_pod(namespace).items, timeout=60, what="pods gone")


def test_function_waits_for_its_pulsar_config(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    cr = CR(api, namespace, group=FM_GROUP)
    cr.create("functions", function("early", 1))

    def waiting() -> dict[str, Any]:
        obj = cr.get("functions", "early")
        cond = condition(obj, "Ready")
        assert cond is not None and cond["reason"] == "WaitingForCluster", obj.get("status")
        assert f"ConfigMap {namespace}/{CONFIG}" in cond["message"]
        assert obj["status"]["phase"] == "Pending"
        return obj

    eventually(waiting, timeout=60, what="Ready False, waiting for the ConfigMap")
    pulsar_config(client.CoreV1Api(api), namespace)
    obj = running(cr, "early", 1)
    # kopf's finalizer (its status timer needs one): deleting a Function waits for the
    # operator, which is why the chart's uninstall hook deletes Functions while it runs
    assert obj["metadata"]["finalizers"] == ["magnetar.dev/finalizer"]


def test_function_on_a_secured_cluster_mounts_its_ca_and_token(
    api: client.ApiClient, control_plane: ControlPlane, operator: Proc, namespace: str
) -> None:
    """Only the cluster's spec is read: the Function's pods get the brokers' TLS URLs, the
    CA certificate item of the brokers' Secret (never their key) and the brokers' token."""
    CR(api, namespace).create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {"name": "sec"},
            "spec": {"tls": {"enabled": True}, "auth": {"enabled": True}},
        },
    )
    body = function("secfn", 1)
    del body["spec"]["pulsar"]
    body["spec"]["clusterRef"] = {"name": "sec"}
    CR(api, namespace, group=FM_GROUP).create("functions", body)
    apps = client.AppsV1Api(api)
    sts = eventually(lambda: sts_of(apps, namespace, "secfn"), timeout=60, what="StatefulSet")
    pod = sts.spec.template.spec
    env = {e.name: e.value for e in pod.containers[0].env}
    assert env["MAGNETAR_SERVICE_URL"] == f"pulsar+ssl://sec-broker.{namespace}.svc:6651"
    assert env["MAGNETAR_TLS_TRUST_CERTS"] == "/etc/magnetar/tls/ca.crt"
    assert env["MAGNETAR_AUTH_TOKEN_FILE"] == "/etc/magnetar/auth/broker.token"
    volumes = {v.name: v for v in pod.volumes}
    assert [(i.key, i.path) for i in volumes["tls"].secret.items] == [("ca.crt", "ca.crt")]
    assert volumes["tls"].secret.secret_name == "sec-broker-tls"
    assert [i.key for i in volumes["auth"].secret.items] == ["broker.token"]


def _refused(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


def test_the_crd_refuses_what_it_cannot_mean(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    cr = CR(api, namespace, group=FM_GROUP)
    both = function("both", 1)
    both["spec"]["clusterRef"] = {"name": "dev"}
    assert "set exactly one of spec.clusterRef and spec.pulsar" in _refused(
        lambda: cr.create("functions", both)
    )
    assert "spec.maxReplicas must not be below spec.replicas" in _refused(
        lambda: cr.create("functions", function("low", 3, maxReplicas=2))
    )
    no_input = function("noinput", 1, input={})
    assert "set exactly one of topics and topicPattern" in _refused(
        lambda: cr.create("functions", no_input)
    )
    assert "Unsupported value" in _refused(
        lambda: cr.create("functions", function("guar", 1, processingGuarantee="sometimes"))
    )
    cr.create("functions", function("fixed", 1, tenant="acme"))
    assert "spec.tenant is immutable" in _refused(
        lambda: cr.patch("functions", "fixed", {"spec": {"tenant": "other"}})
    )
    assert "spec.name is immutable" in _refused(
        lambda: cr.patch("functions", "fixed", {"spec": {"name": "renamed"}})
    )
