"""The proxy's own counters, in Pulsar's proxy metric names (``ProxyService``'s).

Why: how many client connections a proxy has and how many it accepted tell an operator
(and the cluster test of docs/security.md) whether clients reconnect in a storm, e.g. after
a certificate rotation. Rendered on the proxy's ``/metrics`` beside the security counters.
"""

from __future__ import annotations

import prometheus_client

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)
# process_*, python_info, python_gc_*: the proxy process's runtime, as a broker shows its own
for _collector in (
    prometheus_client.PROCESS_COLLECTOR,
    prometheus_client.PLATFORM_COLLECTOR,
    prometheus_client.GC_COLLECTOR,
):
    REGISTRY.register(_collector)

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

REJECTED_CONNECTIONS = prometheus_client.Counter(
    "pulsar_proxy_rejected_connections",
    "Client connections refused by maxConcurrentInboundConnections(PerIp)",
    registry=REGISTRY,
)
BINARY_OPS = prometheus_client.Counter(
    "pulsar_proxy_binary_ops",
    "Reads relayed between clients and brokers on piped connections, both ways",
    registry=REGISTRY,
)
BINARY_BYTES = prometheus_client.Counter(
    "pulsar_proxy_binary_bytes",
    "Bytes relayed between clients and brokers on piped connections, both ways",
    registry=REGISTRY,
)


def render() -> str:
    return prometheus_client.generate_latest(REGISTRY).decode()
