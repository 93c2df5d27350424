"""The chart's ServiceMonitor / PodMonitor translated to a Prometheus scrape config
(tests/support/monitors.py), checked on the real ``helm template`` output with the e2e
suite's values: every job keeps exactly the pods of the components it should scrape, on
their metrics port, with the Prometheus Operator's target labels; ``promtool check config``
accepts the result; a selector that matches nothing is caught."""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from magnetar_operator.builders import build_all
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec
from tests.k8s.controlplane import binary
from tests.support import monitors as mon
from tests.support.procs import LOOPBACK, started
from tests.support.prometheus import (
    INSTALL_HINT,
    PrometheusServer,
    prometheus_available,
    scrape_config,
)
from tests.support.wait import wait_until

E2E_VALUES = mon.CHART / "ci" / "values-cluster-proxy.yaml"
NS = "magnetar-e2e"
KUBE_VERSION = "1.34.0"


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built: run `make k8s-tools` (scripts/k8s/install-helm.sh)")
    rendered = mon.render_chart(helm, values=[E2E_VALUES], namespace=NS, kube_version=KUBE_VERSION)
    return mon.simulated(rendered + mon.operator_objects(rendered))


def _container_port(objects: list[dict[str, Any]], pod: str, address: str) -> str:
    """The name of the container port of workload pod ``pod`` that ``address`` is on."""
    port = int(address.rsplit(":", 1)[1])
    workload = next(
        o
        for o in objects
        if o["kind"] in ("StatefulSet", "Deployment") and pod.startswith(o["metadata"]["name"])
    )
    return next(
        str(p["name"])
        for c in workload["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports") or []
        if p["containerPort"] == port
    )


def test_the_charts_monitors_select_every_component(objects: list[dict[str, Any]]) -> None:
    monitors = mon.monitors(objects)
    assert sorted(m["kind"] for m in monitors) == ["PodMonitor", "ServiceMonitor"]
    jobs = mon.scrape_configs(objects)
    targets = {job["job_name"]: mon.discover(job, objects) for job in jobs}
    empty = [name for name, found in targets.items() if not found]
    assert not empty, f"jobs whose selector matches nothing: {empty}"
    # per Kubernetes job label: how many pods (the e2e values: 3 etcd, 3 bookies, 2
    # brokers, a proxy; the operator by the PodMonitor)
    by_job = Counter(t["job"] for found in targets.values() for t in found)
    assert by_job == {
        "e2e-broker": 2,
        "e2e-bookie": 3,
        "e2e-etcd": 3,
        "e2e-proxy": 1,
        f"{NS}/magnetar-operator": 1,
    }
    for found in targets.values():
        for t in found:
            assert t["namespace"] == NS
            # the endpoint is the container port of that name on that pod
            assert _container_port(objects, t["pod"], t["instance"]) == t["endpoint"], t
            if t["job"].startswith("e2e-"):
                assert t["service"] == t["job"] and t["pod"].startswith(t["service"]), t
                assert t["endpoint"] == ("metrics" if t["job"] == "e2e-etcd" else "http"), t
    # every pod is scraped once
    pods = [t["pod"] for found in targets.values() for t in found]
    assert len(pods) == len(set(pods)), pods


def test_the_endpoints_settings_are_carried_over(objects: list[dict[str, Any]]) -> None:
    jobs = {j["job_name"]: j for j in mon.scrape_configs(objects)}
    http = jobs[f"serviceMonitor/{NS}/magnetar/0"]
    metrics = jobs[f"serviceMonitor/{NS}/magnetar/1"]
    operator = jobs[f"podMonitor/{NS}/magnetar-operator/0"]
    # honorLabels on the brokers' port: Pulsar's `namespace` label stays
    assert http["honor_labels"] is True and metrics["honor_labels"] is False
    for job in (http, metrics, operator):
        assert job["metrics_path"] == "/metrics" and job["scheme"] == "http"
        assert job["scrape_interval"] == "30s" == job["scrape_timeout"]  # the chart's default
    # the ServiceMonitor's namespaceSelector is `any` (no watchNamespaces): all namespaces
    assert "namespaces" not in http["kubernetes_sd_configs"][0]
    assert operator["kubernetes_sd_configs"][0] == {"role": "pod", "namespaces": {"names": [NS]}}
    short = {j["job_name"]: j for j in mon.scrape_configs(objects, interval="5s")}
    assert short[http["job_name"]]["scrape_interval"] == "5s"
    assert short[http["job_name"]]["scrape_timeout"] == "5s"


def test_a_selector_matching_nothing_is_seen(objects: list[dict[str, Any]]) -> None:
    broken = copy.deepcopy(objects)
    sm = next(o for o in broken if o["kind"] == "ServiceMonitor")
    sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/managed-by"] = "someone-else"
    assert all(not mon.discover(j, broken) for j in mon.scrape_configs([sm]))
    pm = next(o for o in copy.deepcopy(objects) if o["kind"] == "PodMonitor")
    pm["spec"]["podMetricsEndpoints"][0]["port"] = "no-such-port"
    assert all(not mon.discover(j, objects) for j in mon.scrape_configs([pm]))


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_the_operators_own_monitors_select_their_component(kind: str) -> None:
    owner = Owner(name="dev", namespace="pulsar", uid="0b1c2d3e-aaaa-bbbb-cccc-000000000001")
    spec = ClusterSpec.parse(
        {
            "metadata": {"etcd": {"replicas": 3}},
            "bookies": {"replicas": 3},
            "brokers": {"replicas": 2},
            "monitoring": {"enabled": True, "kind": kind},
        }
    )
    objects = mon.simulated(build_all(owner, spec))
    jobs = mon.scrape_configs(objects)
    assert len(jobs) == 3
    for job in jobs:
        found = mon.discover(job, objects)
        component = job["job_name"].split("/")[2].removeprefix("dev-")
        replicas = {"broker": 2, "bookie": 3, "etcd": 3}[component]
        assert sorted(t["pod"] for t in found) == [f"dev-{component}-{i}" for i in range(replicas)]
        assert {t["endpoint"] for t in found} == {"metrics" if component == "etcd" else "http"}


def test_expressions_and_unsupported_fields() -> None:
    monitor: dict[str, Any] = {
        "apiVersion": mon.MONITORING_API,
        "kind": "PodMonitor",
        "metadata": {"name": "m", "namespace": "a"},
        "spec": {
            "selector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["x", "y"]},
                    {"key": "skip", "operator": "DoesNotExist"},
                ]
            },
            "podMetricsEndpoints": [{"port": "web"}],
        },
    }

    def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "a"},
            "spec": {
                "replicas": 1,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {"name": "c", "ports": [{"name": "web", "containerPort": 9}]}
                        ]
                    },
                },
            },
        }

    objects = mon.simulated(
        [
            pod("one", {"tier": "x"}),
            pod("two", {"tier": "z"}),
            pod("three", {"tier": "y", "skip": "1"}),
        ]
    )
    (job,) = mon.scrape_configs([monitor])
    assert [t["pod"] for t in mon.discover(job, objects)] == ["one-0"]
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["tlsConfig"] = {"ca": {"secret": {"name": "s"}}}
    with pytest.raises(mon.UnsupportedMonitor, match="as files"):
        mon.scrape_configs([bad])
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["relabelings"] = [{"action": "drop"}]
    with pytest.raises(mon.UnsupportedMonitor, match="relabelings"):
        mon.scrape_configs([bad])


def _kubeconfig(path: Path) -> Path:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "admin@local",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": b64("CA"),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
            }
        ],
        "contexts": [{"name": "admin@local", "context": {"cluster": "local", "user": "admin"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_api_access_from_a_kubeconfig(tmp_path: Path) -> None:
    access = mon.api_access(_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "creds")
    assert access.server == "https://127.0.0.1:6443"
    assert access.ca_file and access.ca_file.read_text() == "CA"
    assert access.cert_file and access.cert_file.read_text() == "CERT"
    assert access.key_file and access.key_file.read_text() == "KEY"
    assert access.sd_fields()["tls_config"] == {
        "ca_file": str(access.ca_file),
        "cert_file": str(access.cert_file),
        "key_file": str(access.key_file),
    }
    no_user = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    no_user["users"][0]["user"] = {}
    (tmp_path / "bad").write_text(yaml.safe_dump(no_user))
    with pytest.raises(ValueError, match="no client certificate or token"):
        mon.api_access(tmp_path / "bad", tmp_path / "creds")


def test_promtool_accepts_the_translated_config(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/setup.sh installs Debian's prometheus)")
    access = mon.api_access(_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "creds")
    jobs = mon.scrape_configs(objects, api=access, interval="5s")
    # Debian's Prometheus has no Kubernetes discovery: the suite's form, file_sd_configs
    # with the relabelling unchanged
    sd = tmp_path / "targets.json"
    (job,) = [j for j in jobs if j["job_name"].endswith("/magnetar/0")]
    mon.write_file_sd(sd, mon.role_targets(job, objects))
    jobs = [mon.with_file_sd(j, sd) for j in jobs]
    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config([], interval_s=5.0, jobs=jobs))
    out = subprocess.run(
        [promtool, "check", "config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_prometheus_relabels_the_discovered_groups_as_translated(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A real Prometheus given the translated jobs with the discovery's target groups
    (``file_sd_configs``, as the Kubernetes suite runs it) keeps the same targets with the
    same labels as :func:`discover` computes. Every group's address is this Prometheus'
    own ``/metrics`` (the pods' addresses are not reachable here), so each target is up."""
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    jobs = mon.scrape_configs(objects, interval="1s")
    sd_dir = tmp_path / "sd"
    sd_dir.mkdir()
    server = PrometheusServer(
        tmp_path / "prometheus",
        [],
        interval_s=1.0,
        jobs=[mon.with_file_sd(j, sd_dir / f"{i}.json") for i, j in enumerate(jobs)],
    )
    address = f"{LOOPBACK}:{server.port}"
    for i, job in enumerate(jobs):
        groups = [{**t, "__address__": address} for t in mon.role_targets(job, objects)]
        mon.write_file_sd(sd_dir / f"{i}.json", groups)
    with started(server) as prom:

        def labels_of_up() -> list[dict[str, str]]:
            return [t["labels"] for t in prom.active_targets() if t["health"] == "up"]

        expected = sorted(
            (
                sorted({**t, "instance": address}.items())
                for j in jobs
                for t in mon.discover(j, objects)
            ),
        )
        wait_until(lambda: len(labels_of_up()) == len(expected), timeout=60, what="every target up")
        got = sorted(sorted(labels.items()) for labels in labels_of_up())
    assert got == expected
