"""Offline validation of rendered objects: Kubernetes kinds against the published OpenAPI
(JSON) schemas of our pinned Kubernetes minor (kubernetes-validate, strict: unknown fields
fail), our custom resources against the CRDs' own openAPIV3Schema, and Prometheus
Operator kinds against the few fields we rely on."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S_VERSION = "1.34"  # matches KUBERNETES_VERSION in scripts/k8s/versions.env


@cache
def crd_schemas() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        out[kind] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def validate(obj: dict[str, Any]) -> None:
    """Raise (jsonschema/kubernetes-validate ValidationError, AssertionError) when invalid."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    if api_version.startswith(("magnetar.dev/", "compute.functionmesh.io/")):
        jsonschema.validate(obj, crd_schemas()[kind])
        return
    if api_version.startswith("monitoring.coreos.com/"):
        assert kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"), kind
        spec = obj["spec"]
        if kind == "PrometheusRule":
            rules = [r for g in spec["groups"] for r in g["rules"]]
            assert rules and all(r["alert"] and r["expr"] and r["labels"] for r in rules), obj
            return
        assert spec["selector"]["matchLabels"], obj
        endpoints = spec.get("endpoints") or spec.get("podMetricsEndpoints")
        assert endpoints and all(e["port"] and e["path"] == "/metrics" for e in endpoints)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
