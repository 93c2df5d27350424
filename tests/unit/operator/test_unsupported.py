"""A PulsarCluster asking for what Magnetar does not implement (the proxy in a cluster
with TLS or authentication: the operator does not configure its TLS and credentials yet)
is refused: nothing is applied, phase
``Unsupported``, an ``Unsupported`` condition naming the field and ``Ready`` False -- never
reported Ready without the feature."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from magnetar_operator import cluster
from magnetar_operator.spec import ClusterSpec


class RecordingKube:
    """Records what reconcile would do to the API server."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(obj)
        return obj

    async def get(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return []

    async def patch_status(self, *args: Any) -> None:
        self.statuses.append(args[-1])


def body(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "PulsarCluster",
        "metadata": {"name": "dev", "namespace": "pulsar", "uid": "u-1", "generation": 3},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"tls": {"enabled": True}, "proxy": {"enabled": True}}, "spec.proxy.enabled"),
        ({"auth": {"enabled": True}, "proxy": {"enabled": True}}, "spec.proxy.enabled"),
    ],
)
def test_unsupported_features_are_refused(spec: dict[str, Any], field: str) -> None:
    kube = RecordingKube()
    events: list[tuple[str, str, str]] = []
    status = asyncio.run(
        cluster.reconcile(
            kube,  # type: ignore[arg-type]
            body(spec),
            event=lambda *e: events.append(e),
            now="2026-11-24T10:00:00Z",
        )
    )
    assert kube.applied == [], "nothing is built for a refused cluster"
    assert kube.statuses == [status]
    assert status["phase"] == "Unsupported"
    assert status["observedGeneration"] == 3
    conds = {c["type"]: c for c in status["conditions"]}
    assert set(conds) == {"Ready", "Unsupported"}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "Unsupported"
    assert conds["Unsupported"]["status"] == "True"
    assert field in conds["Unsupported"]["message"]
    assert events and events[0][:2] == ("Warning", "Unsupported") and field in events[0][2]


def test_supported_spec_has_nothing_unsupported() -> None:
    assert cluster.unsupported(ClusterSpec.parse({})) == []
    both = ClusterSpec.parse({"tls": {"enabled": True}, "auth": {"enabled": True}})
    assert cluster.unsupported(both) == [], "TLS and authentication are implemented"
    proxy = ClusterSpec.parse({"proxy": {"enabled": True}})
    assert cluster.unsupported(proxy) == [], "so is the proxy of a cluster without them"
