"""``ClusterSpec.parse`` fills exactly the defaults the CRD declares (so builders behave the
same on partial specs as on API-server-defaulted ones)."""

from __future__ import annotations

from typing import Any

from magnetar_operator.spec import ClusterSpec
from tests.unit.operator.schemas import crd_schemas


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as the API server does it (objects only; enough for our CRDs)."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        return value
    out = dict(value)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = sub["default"]
        if key in out:
            out[key] = apply_defaults(out[key], sub)
    return out


def test_parse_defaults_match_crd_defaults() -> None:
    spec_schema = crd_schemas()["PulsarCluster"]["properties"]["spec"]
    defaulted = apply_defaults({}, spec_schema)
    assert ClusterSpec.parse(defaulted) == ClusterSpec.parse({})
    assert defaulted["bookies"]["journal"]["size"] == "10Gi"


def test_image_defaults_follow_version() -> None:
    spec = ClusterSpec.parse({"version": "1.2.3", "image": {"registry": "reg.example/m/"}})
    assert spec.images.broker == "reg.example/m/broker:1.2.3"
    assert spec.images.bookie == "reg.example/m/bookie:1.2.3"
    override = ClusterSpec.parse({"image": {"broker": "x/broker@sha256:abc"}})
    assert override.images.broker == "x/broker@sha256:abc"
