"""Metadata store operation metrics, with the names Pulsar's MetadataStoreStats exports.

Why: dashboards and alerts written for Pulsar watch ``pulsar_metadata_store_ops_latency_ms``
(a histogram in milliseconds, labels ``name``, ``type`` = get / put / del, ``status`` =
success / fail) and ``pulsar_metadata_store_put_bytes_total``; both backends (etcd and the
embedded store) time their operations through :func:`timed`. One registry per process,
which the broker's /metrics renders (docs/metrics.md).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)
STORE_NAME = "metadata-store"
"""Pulsar's name of the (local) metadata store; Magnetar has one store for everything."""

OPS_LATENCY = Histogram(
    "pulsar_metadata_store_ops_latency_ms",
    "Metadata store operations, milliseconds",
    ["name", "type", "status"],
    buckets=(1, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
    registry=REGISTRY,
)
PUT_BYTES = Counter(
    "pulsar_metadata_store_put_bytes",
    "Bytes written to the metadata store by put",
    ["name"],
    registry=REGISTRY,
)

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def timed(
    op: str,
) -> Callable[
    [Callable[Concatenate[S, P], Coroutine[Any, Any, R]]],
    Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
]:
    """An async store method whose calls are timed as ``op`` (get, put, del)."""
    ok = OPS_LATENCY.labels(STORE_NAME, op, "success")
    failed = OPS_LATENCY.labels(STORE_NAME, op, "fail")

    def wrap(
        method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
        @functools.wraps(method)
        async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                result = await method(self, *args, **kwargs)
            except BaseException:
                failed.observe((time.perf_counter() - started) * 1000.0)
                raise
            ok.observe((time.perf_counter() - started) * 1000.0)
            return result

        return call

    return wrap


def put_bytes(n: int) -> None:
    PUT_BYTES.labels(STORE_NAME).inc(n)
