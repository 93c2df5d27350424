"""The operator's own Prometheus metrics: what it reconciles, how long that takes, what
fails, and the resources it manages by phase.

Why: a Magnetar cluster's health is on its brokers' and bookies' ``/metrics``; whether the
operator keeps up (reconciles that fail or slow down, clusters stuck Reconciling, Tenants
waiting for their cluster) is only here. Served by prometheus-client's own HTTP server on
``MAGNETAR_OPERATOR_METRICS_PORT`` (off when unset or 0; the chart sets 8081, port name
``metrics``), with its process and Python GC collectors (``process_*``, ``python_gc_*``).

Series (docs/metrics.md, "The operator"):

* ``magnetar_operator_reconciles_total{kind, result}`` -- passes per resource kind
  (PulsarCluster, Tenant, Topic) by result: ``ok``, ``retry`` (waiting for something that
  usually comes: the cluster, a namespace, an unreachable admin API) or ``error``;
* ``magnetar_operator_reconcile_duration_seconds{kind}`` -- a histogram of those passes;
* ``magnetar_operator_resources{kind, phase}`` -- the resources this operator last saw by
  phase (a PulsarCluster's ``status.phase``; a Tenant's or Topic's ``Ready`` or the reason
  it is not), zero rows kept so a phase that empties reads 0 rather than vanishing;
* ``magnetar_operator_events_total{kind, type, reason}`` -- the Kubernetes events it
  posted (``type`` Normal or Warning).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import kopf
from prometheus_client import Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

RECONCILES = Counter(
    "magnetar_operator_reconciles",
    "Reconcile passes by resource kind and result (ok, retry, error)",
    ["kind", "result"],
)
DURATION = Histogram(
    "magnetar_operator_reconcile_duration_seconds",
    "Duration of a reconcile pass",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
EVENTS = Counter(
    "magnetar_operator_events",
    "Kubernetes events the operator posted, by resource kind, type and reason",
    ["kind", "type", "reason"],
)


@dataclass(eq=False)  # registered by identity
class Phases(Collector):
    """The phase of every resource the operator last reconciled, as a gauge per phase."""

    seen: dict[tuple[str, str, str], str] = field(default_factory=dict)
    known: set[tuple[str, str]] = field(default_factory=set)

    def set(self, kind: str, namespace: str, name: str, phase: str) -> None:
        self.seen[(kind, namespace, name)] = phase
        self.known.add((kind, phase))

    def forget(self, kind: str, namespace: str, name: str) -> None:
        self.seen.pop((kind, namespace, name), None)

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "magnetar_operator_resources",
            "Resources the operator manages, by kind and phase",
            labels=["kind", "phase"],
        )
        counts = dict.fromkeys(self.known, 0)
        for (kind, _, _), phase in self.seen.items():
            counts[(kind, phase)] += 1
        for (kind, phase), n in sorted(counts.items()):
            family.add_metric([kind, phase], n)
        yield family


PHASES = Phases()
REGISTRY.register(PHASES)


@asynccontextmanager
async def reconcile_pass(kind: str) -> AsyncIterator[None]:
    """Time and count one pass: ``ok`` when it returns, ``retry`` when it raises kopf's
    TemporaryError (kopf runs it again after a delay), ``error`` on anything else."""
    start = time.monotonic()
    result = "ok"
    try:
        yield
    except kopf.TemporaryError:
        result = "retry"
        raise
    except Exception:
        result = "error"
        raise
    finally:
        DURATION.labels(kind).observe(time.monotonic() - start)
        RECONCILES.labels(kind, result).inc()


def serve(port: int, address: str) -> None:
    """Serve ``/metrics`` on ``address:port`` from a thread of prometheus-client."""
    start_http_server(port, addr=address)
