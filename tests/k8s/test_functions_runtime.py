"""The brokers' Kubernetes runtime of functions (magnetar.functions.kubernetes) against a real
kube-apiserver, as a broker's service account allowed to write Functions only: each function
record of the metadata store becomes a Function resource (Pulsar's FunctionConfig in
Function Mesh's names), which the real operator turns into a StatefulSet; the status the
operator writes back is the instances' state the admin API answers; stopping every instance
scales to 0; a deleted function's resource goes, a Function applied by hand stays."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from magnetar.functions import config as fconfig
from magnetar.functions import registry
from magnetar.functions.config import FunctionName
from magnetar.functions.kubernetes import ApiServer, KubernetesRuntime, resource_name
from magnetar.metadata import api as mapi
from magnetar.metadata import open_store
from tests.k8s.controlplane import ControlPlane
from tests.k8s.helpers import CR, FakeKubelet, eventually
from tests.support.etcd import EtcdServer
from tests.support.procs import Proc, started
from tests.support.standalone import BrokerProc

pytestmark = pytest.mark.k8s

FM_GROUP = "compute.functionmesh.io"
EXAMPLE = Path(__file__).resolve().parents[1] / "integration/functions/examples"


def broker_token(api: client.ApiClient, namespace: str) -> str:
    """A ServiceAccount allowed to manage Functions in ``namespace`` and nothing else."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="broker"))
    )
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "broker-functions"},
            "rules": [
                {
                    "apiGroups": [FM_GROUP],
                    "resources": ["functions"],
                    "verbs": ["get", "list", "create", "patch", "delete"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "broker-functions"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "broker-functions",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "broker", "namespace": namespace}],
        },
    )
    token: str = core.create_namespaced_service_account_token(
        "broker",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=3600
            )
        ),
    ).status.token
    return token


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def test_function_records_become_function_resources(
    api: client.ApiClient,
    control_plane: ControlPlane,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    loop: asyncio.AbstractEventLoop,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(broker_token(api, namespace))
    store = loop.run_until_complete(open_store(f"embedded:{tmp_path / 'store'}"))
    runtime = KubernetesRuntime(
        store,
        ApiServer(
            control_plane.server,
            token_file=token_file,
            ca_file=control_plane.workdir / "certs" / "apiserver.crt",
        ),
        namespace=namespace,
        cluster_ref="dev",
    )
    cr = CR(api, namespace, group=FM_GROUP)
    name = FunctionName("public", "default", "Excl_1")
    raw = {
        "tenant": "public",
        "namespace": "default",
        "name": "Excl_1",
        "className": "exclamation_function.ExclamationFunction",
        "inputs": ["persistent://public/default/in"],
        "output": "persistent://public/default/out",
        "parallelism": 2,
        "processingGuarantees": "EFFECTIVELY_ONCE",
        "userConfig": {"suffix": "!"},
        "secrets": {"apiKey": {"path": "excl-secrets", "key": "api-key"}},
    }
    config = fconfig.check(raw, name=name, package_file="exclamation_function.py")
    data = (EXAMPLE / "exclamation_function.py").read_bytes()
    # a Function applied by hand, which the runtime must leave alone
    cr.create(
        "functions",
        {
            "apiVersion": f"{FM_GROUP}/v1alpha1",
            "kind": "Function",
            "metadata": {"name": "by-hand"},
            "spec": {
                "pulsar": {"pulsarConfig": "absent"},
                "className": "m.C",
                "input": {"topics": ["x"]},
                "python": {"py": "m.py"},
            },
        },
    )

    async def go() -> None:
        await registry.create(store, name, config, file_name="exclamation_function.py", data=data)
        await runtime.reconcile()

    try:
        loop.run_until_complete(go())
        resource = resource_name(name)
        assert resource.startswith("public-default-excl-1-")  # lowercased, with a digest
        body: dict[str, Any] = cr.get("functions", resource)
        spec = body["spec"]
        assert spec["clusterRef"] == {"name": "dev"}
        assert (spec["tenant"], spec["namespace"], spec["name"]) == ("public", "default", "Excl_1")
        assert spec["replicas"] == 2
        assert spec["input"] == {"topics": ["persistent://public/default/in"]}
        assert spec["output"] == {"topic": "persistent://public/default/out"}
        assert spec["processingGuarantee"] == "effectively_once"
        assert spec["subscriptionName"] == "public/default/Excl_1"
        assert spec["funcConfig"] == {"suffix": "!"}
        assert spec["secretsMap"] == {"apiKey": {"path": "excl-secrets", "key": "api-key"}}
        assert spec["python"] == {"py": "exclamation_function.py"}
        # nothing runs yet: the PulsarCluster "dev" does not exist
        states = runtime.instances(name, 2)
        assert not any(s.running for s in states.values())

        # the operator runs it once the cluster exists; the status comes back
        CR(api, namespace).create(
            "pulsarclusters",
            {"apiVersion": "magnetar.dev/v1alpha1", "kind": "PulsarCluster",
             "metadata": {"name": "dev"}, "spec": {}},
        )  # fmt: skip

        def both_running() -> bool:
            loop.run_until_complete(runtime.reconcile())
            states = runtime.instances(name, 2)
            assert all(s.running for s in states.values()), states
            return [s.worker_id for _, s in sorted(states.items())] == [
                f"{resource}-function-0",
                f"{resource}-function-1",
            ]

        eventually(both_running, timeout=90, what="both instances running")

        # Another broker whose round read the records before this function was created: its
        # listing has the resource, and it must not delete it (it did once, on a real cluster).
        other = KubernetesRuntime(store, runtime.server, namespace=namespace, cluster_ref="dev")
        real_all = registry.all_functions
        reads: list[int] = []

        async def stale_then_real(s: mapi.MetadataStore) -> list[registry.Function]:
            reads.append(1)
            return [] if len(reads) == 1 else await real_all(s)

        monkeypatch.setattr(registry, "all_functions", stale_then_real)
        try:
            loop.run_until_complete(other.reconcile())
        finally:
            monkeypatch.undo()
            loop.run_until_complete(other.stop())
        assert len(reads) == 2, "the orphan was checked against a fresh read"
        assert cr.exists("functions", resource)
        assert cr.get("functions", resource)["metadata"]["uid"] == body["metadata"]["uid"]

        # every instance stopped: 0 replicas
        async def stop_all() -> None:
            await registry.set_running(store, name, instance=None, running=False)
            await runtime.reconcile()

        loop.run_until_complete(stop_all())
        assert cr.get("functions", resource)["spec"]["replicas"] == 0

        # deleted: its resource goes (the operator's objects with it), the hand-made one stays
        async def delete() -> None:
            await registry.delete(store, name)
            await runtime.reconcile()

        loop.run_until_complete(delete())
        # gone once the operator's finalizer (kopf's, for the status timer) is done
        eventually(lambda: not cr.exists("functions", resource), timeout=30, what="deleted")
        assert cr.exists("functions", "by-hand")
        assert runtime.instances(name, 1)[0].error == "the Function resource is not created yet"
    finally:
        loop.run_until_complete(runtime.stop())
        loop.run_until_complete(store.close())


def test_broker_with_the_kubernetes_runtime_writes_function_resources(
    api: client.ApiClient,
    control_plane: ControlPlane,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`magnetar broker --functions-runtime kubernetes` in a stand-in pod (the service
    account's files where a pod has them, KUBERNETES_SERVICE_HOST/PORT): `functions create`
    writes the Function, `functions status` answers from the pods, `functions delete`
    removes it."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(broker_token(api, namespace))
    (account / "ca.crt").write_bytes((control_plane.workdir / "certs/apiserver.crt").read_bytes())
    (account / "namespace").write_text(namespace)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(control_plane.api_port))
    monkeypatch.setenv("MAGNETAR_KUBERNETES_SERVICEACCOUNT_DIR", str(account))
    CR(api, namespace).create(
        "pulsarclusters",
        {"apiVersion": "magnetar.dev/v1alpha1", "kind": "PulsarCluster",
         "metadata": {"name": "dev"}, "spec": {}},
    )  # fmt: skip
    cr = CR(api, namespace, group=FM_GROUP)
    with (
        started(EtcdServer(tmp_path / "etcd")) as etcd,
        started(
            BrokerProc(
                etcd.url,
                tmp_path,
                extra_args=["--functions-runtime", "kubernetes", "--cluster-name", "dev"],
            )
        ) as broker,
    ):

        def admin(*args: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", broker.http_url,
                 *args],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout

        admin(
            "functions", "create", "--name", "shout",
            "--py", str(EXAMPLE / "exclamation_function.py"),
            "--classname", "exclamation_function.ExclamationFunction",
            "--inputs", "in", "--output", "out", "--parallelism", "2",
        )  # fmt: skip
        resource = resource_name(FunctionName("public", "default", "shout"))
        assert resource == "public-default-shout"
        body = eventually(lambda: cr.get("functions", resource), timeout=30, what="the Function")
        assert body["spec"]["replicas"] == 2 and body["spec"]["clusterRef"] == {"name": "dev"}

        def running() -> dict[str, Any]:
            status = json.loads(admin("--output", "json", "functions", "status", "--name", "shout"))
            assert status["numRunning"] == 2, status
            return dict(status)

        status = eventually(running, timeout=90, what="both instances running")
        assert [i["status"]["workerId"] for i in status["instances"]] == [
            "public-default-shout-function-0",
            "public-default-shout-function-1",
        ]
        # their counters stay in the pods: stats say so rather than answer zeros
        done = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", broker.http_url,
             "functions", "stats", "--name", "shout"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0 and "not collected yet" in done.stderr, done
        assert "pulsar_function_received_total" not in broker.metrics()
        admin("functions", "delete", "--name", "shout")
        eventually(lambda: not cr.exists("functions", resource), timeout=30, what="deleted")
