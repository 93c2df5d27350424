"""Prometheus Operator objects: one ServiceMonitor (or PodMonitor) per component."""

from __future__ import annotations

from magnetar_operator.builders import autorecovery, common
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec, Json

API_VERSION = "monitoring.coreos.com/v1"

# component -> (Service name suffix, metrics port name)
ENDPOINTS = {
    "broker": ("broker", "http"),
    "bookie": ("bookie", "http"),
    "etcd": ("etcd", "metrics"),
    "autorecovery": ("autorecovery", "http"),
}


def _endpoint(spec: ClusterSpec, component: str) -> Json:
    """The scrape endpoint; a broker's with honorLabels, so that Pulsar's ``namespace``
    label (``tenant/ns``) on its topic series is kept rather than renamed
    ``exported_namespace`` under the target's Kubernetes namespace (the chart's dashboards
    and Pulsar's community ones read it as Pulsar's)."""
    _svc, port = ENDPOINTS[component]
    endpoint: Json = {"port": port, "path": "/metrics", "interval": spec.monitoring.interval}
    if component == "broker":
        endpoint["honorLabels"] = True
    return endpoint


def service_monitor(owner: Owner, spec: ClusterSpec, component: str) -> Json:
    meta = common.metadata(owner, component)
    meta["labels"].update(spec.monitoring.labels)
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": common.selector_labels(owner, component)},
            "namespaceSelector": {"matchNames": [owner.namespace]},
            "endpoints": [_endpoint(spec, component)],
        },
    }


def pod_monitor(owner: Owner, spec: ClusterSpec, component: str) -> Json:
    meta = common.metadata(owner, component)
    meta["labels"].update(spec.monitoring.labels)
    return {
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": common.selector_labels(owner, component)},
            "namespaceSelector": {"matchNames": [owner.namespace]},
            "podMetricsEndpoints": [_endpoint(spec, component)],
        },
    }


def build(owner: Owner, spec: ClusterSpec) -> list[Json]:
    if not spec.monitoring.enabled:
        return []
    components = ["broker", "bookie"] + (["etcd"] if spec.metadata.managed else [])
    if autorecovery.enabled(spec):  # without it the bookies' /metrics carry autorecovery's
        components.append("autorecovery")
    make = service_monitor if spec.monitoring.kind == "ServiceMonitor" else pod_monitor
    return [make(owner, spec, c) for c in components]
