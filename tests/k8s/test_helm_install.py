"""`helm install` of the chart on the real control plane: CRDs kept, operator Deployment and
RBAC created, the PulsarCluster from values reconciled (by the suite's operator), and
`helm uninstall` removing the release with the cluster's objects."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from tests.k8s.controlplane import ROOT, ControlPlane, binary
from tests.k8s.helpers import CR, FakeKubelet, condition, eventually
from tests.support.procs import Proc

pytestmark = pytest.mark.k8s


def helm(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    exe = binary("helm")
    if exe is None:
        pytest.skip("helm is not built: run `make k8s-tools`")
    return subprocess.run(
        [str(exe), "--kubeconfig", str(cp.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_helm_install_and_uninstall(
    api: client.ApiClient,
    control_plane: ControlPlane,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
) -> None:
    release = f"mg{namespace[2:]}"
    out = helm(
        control_plane,
        "install",
        release,
        str(ROOT / "helm/magnetar"),
        "--namespace",
        namespace,
        "-f",
        str(ROOT / "helm/magnetar/ci/values-cluster-minimal.yaml"),
    )
    assert out.returncode == 0, out.stderr
    apps = client.AppsV1Api(api)
    dep = apps.read_namespaced_deployment(f"{release}-magnetar-operator", namespace)
    assert dep.spec.template.spec.service_account_name == f"{release}-magnetar-operator"
    rbac = client.RbacAuthorizationV1Api(api)
    assert rbac.read_cluster_role(f"{release}-magnetar-operator").rules
    # The PulsarCluster from values is reconciled (by the suite's operator: the chart's own
    # operator pod cannot run here — no kubelet, no image).
    cr = CR(api, namespace)

    def ready() -> bool:
        cond = condition(cr.get("pulsarclusters", "dev"), "Ready")
        assert cond and cond["status"] == "True", cond
        return True

    eventually(ready, timeout=60, what="PulsarCluster from the chart Ready")
    assert apps.read_namespaced_stateful_set("dev-bookie", namespace).spec.replicas == 1

    out = helm(control_plane, "uninstall", release, "--namespace", namespace, "--wait")
    assert out.returncode == 0, out.stderr
    eventually(
        lambda: (
            not cr.exists("pulsarclusters", "dev")
            and not apps.list_namespaced_stateful_set(namespace).items
        ),
        timeout=60,
        what="cluster gone with the release",
    )
    # CRDs stay (Helm never deletes CRDs).
    ext = client.ApiextensionsV1Api(api)
    assert ext.read_custom_resource_definition("pulsarclusters.magnetar.dev")
