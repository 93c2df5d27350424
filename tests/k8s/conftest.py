"""Fixtures of the k8s suite: one real control plane per session, the CRDs, the operator
(real kopf, as a subprocess), a namespace per test, and a stand-in kubelet.

Skips the whole suite with a clear message when the binaries are not built
(``make k8s-tools`` builds them from the Go module proxy into .cache/k8s-bin), and unless
``MAGNETAR_K8S_TESTS`` is set (``make test-k8s`` sets it), so ``make test`` stays fast
until the suite is wired into it.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.k8s import helpers
from tests.k8s.controlplane import ROOT, ControlPlane, missing_tools
from tests.support.procs import LOOPBACK, Proc, free_port


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not os.environ.get("MAGNETAR_K8S_TESTS"):
        pytest.skip("the k8s suite runs with `make test-k8s` (or set MAGNETAR_K8S_TESTS=1)")
    missing = missing_tools()
    if missing:
        pytest.skip(
            f"k8s control-plane binaries not built ({', '.join(missing)}): run `make k8s-tools`"
        )
    cp = ControlPlane(tmp_path_factory.mktemp("k8s")).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture(scope="session")
def crds(api: client.ApiClient, control_plane: ControlPlane) -> list[str]:
    """Every CRD of crds/ created and Established; then kube-controller-manager starts."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
        names.append(body["metadata"]["name"])
    for name in names:
        helpers.eventually(
            lambda name=name: helpers.crd_established(ext, name),
            timeout=30,
            what=f"CRD {name} Established",
        )
    control_plane.start_controller_manager()
    return names


FAST_SETTINGS = {
    "MAGNETAR_OPERATOR_CLUSTER_RESYNC": "1",
    "MAGNETAR_OPERATOR_RESOURCE_RESYNC": "2",
    "MAGNETAR_OPERATOR_RETRY_DELAY": "1",
    "MAGNETAR_OPERATOR_DELETE_RETRIES": "3",
    "MAGNETAR_OPERATOR_FUNCTION_RESYNC": "1",
}


def start_operator(
    kubeconfig: Path, log: Path, *, scope: list[str], settings: dict[str, str] | None = None
) -> Proc:
    """`kopf run` of magnetar_operator in a subprocess, with ``settings`` (default: short
    resync/retry intervals; ``{}`` for the operator's own defaults); ``scope`` is kopf's
    namespace arguments; its own /metrics on a free loopback port
    (``env["MAGNETAR_OPERATOR_METRICS_PORT"]``). Ready when kopf's liveness endpoint answers."""
    port = free_port()
    env = {
        "KUBECONFIG": str(kubeconfig),
        "MAGNETAR_OPERATOR_METRICS_PORT": str(free_port()),
        "MAGNETAR_OPERATOR_METRICS_ADDRESS": LOOPBACK,
        **(FAST_SETTINGS if settings is None else settings),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "kopf", "run", "--standalone", *scope]
    argv += [f"--liveness=http://{LOOPBACK}:{port}/healthz", "-m", "magnetar_operator.handlers"]
    return Proc(
        argv,
        log_path=log,
        env=env,
        ready=lambda: helpers.http_ok(f"http://{LOOPBACK}:{port}/healthz"),
        ready_timeout=60,
        cwd=ROOT,
    ).start()


@pytest.fixture(scope="session")
def operator(
    control_plane: ControlPlane, crds: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proc]:
    """The operator for the test namespaces (t-*), as admin."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = start_operator(control_plane.kubeconfig, log, scope=["--namespace=t-*"])
    try:
        yield proc
    finally:
        proc.stop(timeout=15)
        if os.environ.get("MAGNETAR_K8S_SHOW_OPERATOR_LOG"):
            print(proc.tail(200))


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def kubelet(api: client.ApiClient, namespace: str) -> Iterator[helpers.FakeKubelet]:
    """Marks pods of ``namespace`` Ready a moment after they appear (no real kubelet runs)."""
    k = helpers.FakeKubelet(client.CoreV1Api(api), namespace, delay=1.0)
    k.start()
    try:
        yield k
    finally:
        k.stop()
