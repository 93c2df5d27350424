"""The operator's own /metrics (``magnetar_operator.metrics``), scraped from the operator
the suite runs against the real API server: reconcile passes by kind and result, their
duration, the resources by phase (a cluster Ready, a Tenant waiting for a cluster that
does not exist), the events it posted, and prometheus-client's process collector. The
chart's operator dashboard is evaluated on a real Prometheus scraping that operator (the
other dashboards: tests/integration/observability)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.k8s.helpers import CR, FakeKubelet, eventually
from tests.k8s.test_cluster import SPEC, make_cluster
from tests.support import observability as obs
from tests.support.procs import LOOPBACK, Proc, started
from tests.support.prometheus import (
    INSTALL_HINT,
    PrometheusServer,
    ScrapeTarget,
    prometheus_available,
)

pytestmark = pytest.mark.k8s


def scrape(operator: Proc) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert operator.env is not None
    url = f"http://{LOOPBACK}:{operator.env['MAGNETAR_OPERATOR_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_reconciles_phases_and_events_are_counted(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    cr = CR(api, namespace)
    before = scrape(operator)
    make_cluster(cr, "metrics", SPEC)
    cr.create(
        "tenants",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "orphan"},
            "spec": {"clusterRef": {"name": "no-such-cluster"}, "name": "orphan"},
        },
    )

    def settled() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        s = scrape(operator)
        ready = value(s, "magnetar_operator_resources", kind="PulsarCluster", phase="Ready")
        waiting = value(s, "magnetar_operator_resources", kind="Tenant", phase="ClusterNotFound")
        return s if ready >= 1 and waiting >= 1 else None

    after = eventually(settled, timeout=90, what="a Ready cluster and a waiting Tenant in /metrics")
    name = "magnetar_operator_reconciles_total"
    assert value(after, name, kind="PulsarCluster", result="ok") > value(
        before, name, kind="PulsarCluster", result="ok"
    )
    assert value(after, name, kind="Tenant", result="retry") > value(
        before, name, kind="Tenant", result="retry"
    ), "a Tenant waiting for its cluster is retried, not failed"
    count = "magnetar_operator_reconcile_duration_seconds_count"
    assert value(after, count, kind="PulsarCluster") >= value(
        after, name, kind="PulsarCluster", result="ok"
    )
    assert value(after, "process_resident_memory_bytes") > 0, "process collector registered"

    # deleted: it leaves the phase gauge (the row stays, at 0 when nothing else is in it)
    cr.delete("tenants", "orphan")
    eventually(
        lambda: (
            value(
                scrape(operator),
                "magnetar_operator_resources",
                kind="Tenant",
                phase="ClusterNotFound",
            )
            == 0
        ),
        timeout=60,
        what="the deleted Tenant gone from magnetar_operator_resources",
    )
    # reclaimPolicy Delete: deleting the cluster posts DeletedVolumes, counted by reason
    deleted = value(
        after, "magnetar_operator_events_total", kind="PulsarCluster", type="Normal",
        reason="DeletedVolumes",
    )  # fmt: skip
    cr.delete("pulsarclusters", "metrics")
    eventually(
        lambda: value(
            scrape(operator), "magnetar_operator_events_total", kind="PulsarCluster",
            type="Normal", reason="DeletedVolumes",
        ) > deleted,
        timeout=60,
        what="the DeletedVolumes event counted",
    )  # fmt: skip


def test_operator_dashboard_returns_data(
    api: client.ApiClient,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    tmp_path: Path,
) -> None:
    """Every query of helm/magnetar/files/dashboards/magnetar-operator.json, its variables
    resolved as Grafana does, returns series from a Prometheus scraping the operator while
    it brings a cluster to Ready (and posts its events)."""
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    assert operator.env is not None
    address = f"{LOOPBACK}:{operator.env['MAGNETAR_OPERATOR_METRICS_PORT']}"
    with started(
        PrometheusServer(tmp_path / "prometheus", [ScrapeTarget("operator", address)])
    ) as prom:
        cr = CR(api, namespace)
        make_cluster(cr, "dashboard", SPEC)
        eventually(
            lambda: (
                value(scrape(operator), "magnetar_operator_resources", kind="PulsarCluster",
                      phase="Ready") >= 1
            ),
            timeout=90,
            what="a Ready cluster in /metrics",
        )  # fmt: skip
        prom.wait_scraped()
        prom.wait_scraped()  # two samples of every series since: rate() has a value
        dashboard = obs.load(obs.DASHBOARDS / "magnetar-operator.json")
        values = obs.resolve_variables(dashboard, prom)
        empty = [
            f"{q.name()}: {obs.substitute(q.expr, values)}"
            for q in obs.queries(dashboard)
            if not obs.has_data(prom, obs.substitute(q.expr, values))
        ]
        assert not empty, "panels with no series:\n" + "\n".join(empty)
        cr.delete("pulsarclusters", "dashboard")
