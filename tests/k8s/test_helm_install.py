"""`helm install` of the chart on the real control plane: CRDs kept, operator Deployment and
RBAC created, the PulsarCluster from values reconciled (by the suite's operator), and
`helm uninstall` removing the release with the cluster's objects."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from kubernetes import client

from tests.k8s.controlplane import ROOT, TOKEN, ControlPlane, binary
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
    # a Function on the cluster: the hook deletes it first (its pods use the cluster)
    functions = CR(api, namespace, group="compute.functionmesh.io")
    functions.create(
        "functions",
        {
            "apiVersion": "compute.functionmesh.io/v1alpha1",
            "kind": "Function",
            "metadata": {"name": "excl"},
            "spec": {
                "clusterRef": {"name": "dev"},
                "className": "exclamation_function.ExclamationFunction",
                "input": {"topics": ["in"]},
                "python": {"py": "exclamation_function.py"},
            },
        },
    )
    # and one a broker wrote (`functions create`): the brokers would write it again while
    # they run, so the hook deletes it once the cluster and its broker pods are gone
    functions.create(
        "functions",
        {
            "apiVersion": "compute.functionmesh.io/v1alpha1",
            "kind": "Function",
            "metadata": {
                "name": "written",
                "labels": {"app.kubernetes.io/managed-by": "magnetar-broker"},
            },
            "spec": {
                "clusterRef": {"name": "dev"},
                "className": "exclamation_function.ExclamationFunction",
                "input": {"topics": ["in2"]},
                "python": {"py": "exclamation_function.py"},
            },
        },
    )
    for name in ("excl", "written"):
        eventually(
            lambda name=name: apps.read_namespaced_stateful_set(f"{name}-function", namespace),
            timeout=60,
            what=f"the StatefulSet of Function {name}",
        )

    # `helm uninstall` runs the pre-delete hook Job and waits for it. No kubelet runs Jobs
    # here, so the test plays it: it runs the Job's own command and arguments (with its
    # ServiceAccount's token) and marks the Job complete.
    uninstall = subprocess.Popen(
        [str(binary("helm")), "--kubeconfig", str(control_plane.kubeconfig), "uninstall",
         release, "--namespace", namespace, "--wait", "--timeout", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        batch = client.BatchV1Api(api)
        hook = f"{release}-magnetar-uninstall"

        def job() -> client.V1Job:
            return batch.read_namespaced_job(hook, namespace)

        pod = eventually(job, timeout=60, what="the pre-delete hook Job").spec.template.spec
        (container,) = pod.containers
        assert container.command == ["python3", "-m", "magnetar_operator.uninstall"]
        assert pod.service_account_name == hook
        # as the Job's ServiceAccount (a token the API server issues for it), so the hook's
        # Role is what allows or refuses each call
        core = client.CoreV1Api(api)
        issued = core.create_namespaced_service_account_token(
            hook,
            namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
            ),
        )
        as_hook = control_plane.workdir / f"{hook}.kubeconfig"
        as_hook.write_text(
            control_plane.kubeconfig.read_text().replace(
                f"token: {TOKEN}", f"token: {issued.status.token}"
            )
        )
        run = subprocess.run(
            [sys.executable, "-m", "magnetar_operator.uninstall", *container.args],
            env={**os.environ, "KUBECONFIG": str(as_hook)},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"deleting PulsarCluster {namespace}/dev" in run.stdout
        assert "deleting Function/excl (managed through dev)" in run.stdout
        assert not functions.exists("functions", "excl")
        order = run.stdout.splitlines()
        said = [line.removeprefix("[magnetar-uninstall] ") for line in order]
        written = said.index("deleting Function/written (written by the brokers, now gone)")
        cluster_deleted = said.index(f"deleting PulsarCluster {namespace}/dev")
        brokers_gone = said.index("broker pods: gone")
        assert cluster_deleted < brokers_gone < written, run.stdout
        assert not functions.exists("functions", "written")
        # the hook deleted the cluster while the operator ran: its finalizer is done
        assert not cr.exists("pulsarclusters", "dev")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = {"type": "Complete", "status": "True", "lastTransitionTime": now}
        met = {**done, "type": "SuccessCriteriaMet"}
        batch.patch_namespaced_job_status(
            hook,
            namespace,
            {"status": {"startTime": now, "completionTime": now, "succeeded": 1,
                        "conditions": [met, done]}},
        )  # fmt: skip
        out, err = uninstall.communicate(timeout=150)
    finally:
        if uninstall.poll() is None:
            uninstall.kill()
    assert uninstall.returncode == 0, out + err
    eventually(
        lambda: not apps.list_namespaced_stateful_set(namespace).items,
        timeout=60,
        what="cluster gone with the release",
    )
    # the hook's objects went with it (hook-succeeded), the operator with the release
    assert not batch.list_namespaced_job(namespace).items
    core = client.CoreV1Api(api)
    accounts = [a.metadata.name for a in core.list_namespaced_service_account(namespace).items]
    assert hook not in accounts and f"{release}-magnetar-operator" not in accounts
    # CRDs stay (Helm never deletes CRDs).
    ext = client.ApiextensionsV1Api(api)
    assert ext.read_custom_resource_definition("pulsarclusters.magnetar.dev")
