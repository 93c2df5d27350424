"""Prometheus scraping the PulsarCluster on the local cluster through the chart's own
scrape definitions, and every panel of every shipped dashboard returning data (issue 23,
acceptance 4).

No Prometheus Operator runs in the local cluster, so the chart's ServiceMonitor and
PodMonitor (``helm template`` with the suite's values and the ServiceMonitor switched on,
plus any the operator builds for the cluster's spec.monitoring) are translated to a
Prometheus scrape config the way the Prometheus Operator writes one
(tests/support/monitors.py): the monitors' selectors, ports, paths, honorLabels and the
target labels (namespace, service, pod, container, endpoint, job) are Prometheus' own
relabelling. Debian's Prometheus (the one the tests run, tests/support/prometheus.py) is
built without Kubernetes discovery: this module reads the Services, Endpoints and Pods from
the API server with the suite's kubeconfig and gives Prometheus the target groups its
Kubernetes discovery would make (``file_sd_configs``, the same ``__meta_kubernetes_*``
labels); the Kubernetes form of the config, with the kubeconfig's API server and
credentials, is written beside it (``prometheus-kubernetes.yml``) for a Prometheus that has
the discovery.

The targets are the pods' own addresses: this machine is the cluster's node, and pod IPs
are routed to the cluster's bridge (scripts/k8s/cluster.sh), so Prometheus on the host's
loopback scrapes them directly, as an in-cluster Prometheus would.

Then: the metric-parity workload (tests/support/metrics_parity.py) runs through the proxy
with its clients left connected; every broker, bookie, etcd member, the proxy and the
operator must be an ``up`` target scraped since; and every PromQL expression of every
dashboard under helm/magnetar/files/dashboards/, Grafana's variables resolved as Grafana
resolves them (tests/support/observability.py), must return data. The integration test
(tests/integration/observability/test_dashboards_and_alerts.py) leaves out the operator's
dashboard (no operator there) and the offload one without MinIO; both sources run here, so
no dashboard is left out (:data:`EXCEPTIONS` is empty); one panel is, with its reason
(:data:`PANEL_EXCEPTIONS`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support import metrics_parity as parity
from tests.support import monitors as mon
from tests.support import observability as obs
from tests.support.procs import started
from tests.support.prometheus import PrometheusServer, scrape_config
from tests.support.wait import wait_until

from e2e.localcluster import Cluster, cluster_env

INTERVAL = "5s"
"""The scrape interval here (the chart's default is 30 s): the same jobs, scraped often so
that rate() has two samples a few seconds after the workload."""

SCRAPED_COMPONENTS = ("broker", "bookie", "etcd", "proxy", "operator")
"""The ``app.kubernetes.io/component`` of every pod the chart's monitors must scrape."""

EXCEPTIONS: dict[str, str] = {}
"""Dashboard file -> why it is not evaluated on Kubernetes (none)."""

PANEL_EXCEPTIONS: dict[str, str] = {
    "Magnetar / Operator / Events posted (1h)": "magnetar_operator_events_total counts the "
    "events the operator posts on rolls, scaling, decommissions and waits (operator/"
    "magnetar_operator/handlers.py); a fresh install has posted none when this check runs "
    "(its first e2e run: the only panel without data), and a counter with labels has no "
    "series before its first increment",
}
"""Panel title -> why it may have no series at this point of the e2e."""

STATS_PERIOD_S = 6.0
"""The brokers' statistics period (5 s) and a margin: the workload is in their series then."""


def _live_objects(c: Cluster) -> list[dict[str, Any]]:
    """Services, Endpoints and Pods of every namespace (the ServiceMonitor's namespaceSelector
    may be ``any``), as Prometheus' discovery would list them."""
    out = json.loads(c.k("get", "services,endpoints,pods", "-A", "-o", "json", timeout=60))
    items: list[dict[str, Any]] = out["items"]
    return items


def _expected_pods(c: Cluster, namespace: str) -> dict[str, str]:
    """Running pod -> component, for every component the monitors must scrape."""
    selector = f"app.kubernetes.io/component in ({','.join(SCRAPED_COMPONENTS)})"
    pods = json.loads(c.k("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"]
    return {
        p["metadata"]["name"]: p["metadata"]["labels"]["app.kubernetes.io/component"]
        for p in pods
        if p["status"].get("phase") == "Running"
    }


def _jobs(
    c: Cluster, base: Path, *, values: Sequence[Path], namespace: str, helm: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The translated jobs (Kubernetes form) and the same jobs with file-based discovery,
    their target files written from the live objects."""
    rendered = mon.render_chart(
        helm,
        values=values,
        namespace=namespace,
        kube_version=cluster_env()["KUBERNETES_VERSION"].removeprefix("v"),
    )
    objects = rendered + mon.operator_objects(rendered)
    api = mon.api_access(c.kubeconfig, base / "api")
    jobs = mon.scrape_configs(objects, api=api, interval=INTERVAL)
    assert jobs, "the chart rendered no ServiceMonitor or PodMonitor"
    live = _live_objects(c)
    sd_dir = base / "sd"
    sd_dir.mkdir(parents=True, exist_ok=True)
    file_jobs = []
    for i, job in enumerate(jobs):
        path = sd_dir / f"job-{i}.json"
        mon.write_file_sd(path, mon.role_targets(job, live))
        file_jobs.append(mon.with_file_sd(job, path))
    (base / "prometheus-kubernetes.yml").write_text(scrape_config([], interval_s=5.0, jobs=jobs))
    return jobs, file_jobs


def _wait_up_and_scraped(
    prom: PrometheusServer, expected: set[str], *, since: float, timeout: float = 120.0
) -> dict[str, list[str]]:
    """Until every pod in ``expected`` is an ``up`` target scraped twice after ``since``
    (rate() then has two samples of the workload); job -> its pods."""
    first: dict[str, float] = {}

    def done() -> bool:
        up = {
            t["labels"].get("pod", ""): prom.scraped_at(t)
            for t in prom.active_targets()
            if t["health"] == "up"
        }
        for pod, stamp in up.items():
            if stamp > since:
                first.setdefault(pod, stamp)
        return all(p in first and up.get(p, 0.0) > first[p] for p in expected)

    try:
        wait_until(done, timeout=timeout, interval=1.0, what="the pods' targets up and scraped")
    except AssertionError:
        state = {
            t["labels"].get("pod", t["scrapeUrl"]): f"{t['health']} {t.get('lastError', '')}"
            for t in prom.active_targets()
        }
        missing = sorted(p for p in expected if not state.get(p, "").startswith("up"))
        raise AssertionError(
            f"targets not up and scraped twice in {timeout}s; not up: {missing}; "
            f"every target: {state}"
        ) from None
    jobs: dict[str, list[str]] = {}
    for t in prom.active_targets():
        jobs.setdefault(t["labels"]["job"], []).append(t["labels"].get("pod", ""))
    return {j: sorted(p) for j, p in jobs.items()}


def empty_panels(prom: PrometheusServer) -> list[str]:
    """Every dashboard query (:data:`EXCEPTIONS` aside) that returns no series, named."""
    empty: list[str] = []
    for path in obs.dashboard_files():
        if path.name in EXCEPTIONS:
            continue
        dashboard = obs.load(path)
        try:
            values = obs.resolve_variables(dashboard, prom)
        except AssertionError as err:
            empty.append(f"{path.name}: {err}")
            continue
        queries = obs.queries(dashboard)
        assert queries, f"{path.name} has no queries"
        empty += [
            f"{q.name()}: {obs.substitute(q.expr, values)}"
            for q in queries
            if q.name().rsplit(" [", 1)[0] not in PANEL_EXCEPTIONS
            and not obs.has_data(prom, obs.substitute(q.expr, values))
        ]
    return empty


def check(
    c: Cluster,
    timings: dict[str, float],
    *,
    base: Path,
    helm: Path,
    values: Sequence[Path],
    namespace: str,
    service_url: str,
    admin_url: str,
) -> None:
    """Prometheus on the host scraping the release in ``namespace`` through the chart's
    monitors (rendered with ``values``); the workload through the proxy at ``service_url`` /
    ``admin_url``; every target up and every dashboard panel with data."""
    t0 = time.monotonic()
    _kube_jobs, jobs = _jobs(c, base, values=values, namespace=namespace, helm=helm)
    expected = _expected_pods(c, namespace)
    absent = set(SCRAPED_COMPONENTS) - set(expected.values())
    assert not absent, f"no running pod of {sorted(absent)} in {namespace}"
    with started(PrometheusServer(base / "prometheus", [], interval_s=5.0, jobs=jobs)) as prom:
        work = parity.run_workload(service_url, admin_url)
        try:
            time.sleep(STATS_PERIOD_S)
            by_job = _wait_up_and_scraped(prom, set(expected), since=time.time())
            print(f"prometheus targets by job: {by_job}")
            empty = empty_panels(prom)
            assert not empty, "dashboard panels with no series on Kubernetes:\n" + "\n".join(empty)
        finally:
            work.close()
    timings["observability"] = time.monotonic() - t0
    print(f"every dashboard panel has data on the cluster ({timings['observability']:.1f}s)")
