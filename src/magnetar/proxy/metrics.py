"""The proxy's own counters, in Pulsar's proxy metric names.

Why: how many client connections a proxy has and how many it accepted tell an operator
(and the cluster test of docs/security.md) whether clients reconnect in a storm, e.g. after
a certificate rotation. Rendered on the proxy's ``/metrics`` beside the security counters.
"""

from __future__ import annotations

import prometheus_client

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

ACTIVE_CONNECTIONS = prometheus_client.Gauge(
    "pulsar_proxy_active_connections",
    "Client connections open on the proxy",
    registry=REGISTRY,
)
NEW_CONNECTIONS = prometheus_client.Counter(
    "pulsar_proxy_new_connections",
    "Client connections the proxy accepted",
    registry=REGISTRY,
)


def render() -> str:
    return prometheus_client.generate_latest(REGISTRY).decode()
