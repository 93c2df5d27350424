"""Magnetar on kind: `helm install` (operator + CRDs + a minimal PulsarCluster), the cluster
becomes Ready, and a message produced through the broker Service is consumed back."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from tests.support.procs import free_port, port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e
NS = "magnetar"


def kubectl(*args: str) -> str:
    from tests.k8s.controlplane import _versions, bin_dir

    exe = bin_dir() / f"kubectl-{_versions()['KUBERNETES_VERSION']}" / "kubectl"
    out = subprocess.run(
        [str(exe), "-n", NS, *args], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout


@pytest.fixture
def broker_port(kind_cluster: str) -> Iterator[int]:
    from tests.k8s.controlplane import _versions, bin_dir

    port = free_port()
    exe = bin_dir() / f"kubectl-{_versions()['KUBERNETES_VERSION']}" / "kubectl"
    pf = subprocess.Popen(
        [str(exe), "-n", NS, "port-forward", "svc/dev-broker", f"{port}:6650"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: port_open(port), timeout=30, what="port-forward to dev-broker")
        yield port
    finally:
        pf.terminate()
        pf.wait(10)


def test_cluster_ready(kind_cluster: str) -> None:
    assert "True" in kubectl(
        "get",
        "pulsarcluster",
        "dev",
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
    )


def test_produce_and_consume_through_the_service(broker_port: int) -> None:
    pulsar = pytest.importorskip("pulsar")
    client = pulsar.Client(f"pulsar://127.0.0.1:{broker_port}")
    try:
        topic = f"persistent://public/default/e2e-{int(time.time())}"
        consumer = client.subscribe(topic, "e2e")
        producer = client.create_producer(topic)
        producer.send(b"hello magnetar")
        msg = consumer.receive(timeout_millis=30000)
        assert msg.data() == b"hello magnetar"
        consumer.acknowledge(msg)
    finally:
        client.close()
