"""The chart's RBAC is enough, and only as much as needed: the operator runs with the
token of the ServiceAccount the chart creates (namespaced mode: a Role in the watched
namespace plus the small ClusterRole) and reconciles a PulsarCluster (with TLS and
authentication: Secrets it writes) and a Topic; it cannot read what the chart does not
grant."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from tests.k8s.admin_backends import AdminView, StandaloneBackend
from tests.k8s.conftest import start_operator
from tests.k8s.controlplane import ROOT, ControlPlane, binary
from tests.k8s.helpers import CR, FakeKubelet, condition, eventually

pytestmark = pytest.mark.k8s

OPERATOR_NS = "magnetar-system"


@pytest.fixture
def rbac_ns(api: client.ApiClient) -> Iterator[str]:
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


def chart_rbac(namespace: str) -> list[dict[str, Any]]:
    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built: run `make k8s-tools`")
    out = subprocess.run(
        [
            str(helm),
            "template",
            "rbac",
            str(ROOT / "helm/magnetar"),
            "--namespace",
            OPERATOR_NS,
            "--kube-version",
            "1.34.0",
            "--set",
            f"operator.watchNamespaces={{{namespace}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] in kinds]


def test_operator_works_with_the_charts_least_privilege_rbac(
    api: client.ApiClient,
    crds: list[str],
    control_plane: ControlPlane,
    rbac_ns: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NS)))
    except ApiException as e:
        assert e.status == 409
    objs = chart_rbac(rbac_ns)
    assert {o["kind"] for o in objs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    utils.create_from_yaml(api, yaml_objects=objs)
    sa = next(o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount")
    token = core.create_namespaced_service_account_token(
        sa,
        OPERATOR_NS,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=3600
            )
        ),
    ).status.token

    workdir = tmp_path_factory.mktemp("rbac-operator")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        control_plane.kubeconfig.read_text().replace(
            "token: magnetar-test-admin-token", f"token: {token}"
        )
    )
    # The ServiceAccount may not read Secrets outside, nor list pods cluster-wide.
    sa_cfg = client.Configuration()
    from kubernetes import config

    config.load_kube_config(config_file=str(kubeconfig), client_configuration=sa_cfg)
    sa_core = client.CoreV1Api(client.ApiClient(sa_cfg))
    with pytest.raises(ApiException) as denied:
        sa_core.list_pod_for_all_namespaces()
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        sa_core.list_namespaced_secret(rbac_ns)
    assert denied.value.status == 403, "secrets: get only, no list"

    proc = start_operator(kubeconfig, workdir / "operator.log", scope=[f"--namespace={rbac_ns}"])
    kubelet = FakeKubelet(core, rbac_ns, delay=0.5)
    kubelet.start()
    backend = StandaloneBackend(tmp_path_factory.mktemp("rbac-standalone"))
    try:
        view = AdminView(backend.url)
        view.call("PUT", "/admin/v2/tenants/acme", {"allowedClusters": ["standalone"]})
        view.call("PUT", "/admin/v2/namespaces/acme/orders")
        cr = CR(api, rbac_ns)
        cr.create(
            "pulsarclusters",
            {
                "apiVersion": "magnetar.dev/v1alpha1",
                "kind": "PulsarCluster",
                # its admin API (bookie list, under-replicated ledgers): the standalone
                "metadata": {"name": "rb", "annotations": {"magnetar.dev/admin-url": backend.url}},
                "spec": {
                    "metadata": {"etcd": {"replicas": 1}},
                    "brokers": {"replicas": 1},
                    "bookies": {"replicas": 2},
                    "monitoring": {"enabled": True},
                    # certificates and tokens: Secrets the operator writes
                    "tls": {"enabled": True},
                    "auth": {"enabled": True},
                },
            },
        )
        cr.create(
            "topics",
            {
                "apiVersion": "magnetar.dev/v1alpha1",
                "kind": "Topic",
                "metadata": {"name": "t"},
                "spec": {
                    "clusterRef": {"adminUrl": backend.url},
                    "tenant": "acme",
                    "namespace": "orders",
                    "name": "t",
                },
            },
        )

        def ready(plural: str, name: str) -> bool:
            cond = condition(cr.get(plural, name), "Ready")
            assert cond and cond["status"] == "True", cond
            return True

        eventually(
            lambda: ready("pulsarclusters", "rb") and ready("topics", "t"),
            timeout=60,
            what="reconciled with the chart's RBAC",
        )
        # A spec change rolls bookies (pod deletes) under the same RBAC.
        cr.patch("pulsarclusters", "rb", {"spec": {"bookies": {"config": {"k": "v"}}}})
        eventually(
            lambda: [
                e for e in core.list_namespaced_event(rbac_ns).items if e.reason == "RollingBookie"
            ]
        )
        cr.delete("topics", "t")
        cr.delete("pulsarclusters", "rb")
        eventually(
            lambda: not cr.exists("pulsarclusters", "rb") and not cr.exists("topics", "t"),
            timeout=60,
        )
        log = proc.tail(2000)
        assert "Forbidden" not in log and " 403" not in log, log
    finally:
        print(proc.tail(60))  # shown by pytest when the test fails
        backend.stop()
        kubelet.stop()
        proc.stop(timeout=15)
