"""``ClusterSpec.parse`` fills exactly the defaults the CRD declares (so builders behave the
same on partial specs as on API-server-defaulted ones)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from magnetar import __version__
from magnetar_operator.spec import ETCD_VERSION, IMAGE_REGISTRY_ENV, ClusterSpec, image_prefix
from tests.unit.operator.schemas import ROOT, crd_schemas


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
    assert spec.images.etcd == "reg.example/m/etcd:v3.5.21"


def test_default_images_are_the_ones_make_images_builds() -> None:
    """No registry: the names scripts/images/build.sh tags (magnetar/<name>:<version>) and
    the etcd it builds at the version pinned for the local cluster."""
    spec = ClusterSpec.parse({})
    assert (spec.images.broker, spec.images.bookie, spec.images.etcd) == (
        f"magnetar/broker:{__version__}",
        f"magnetar/bookie:{__version__}",
        f"magnetar/etcd:{ETCD_VERSION}",
    )
    pinned = (ROOT / "scripts/k8s/versions.env").read_text()
    assert f"\nETCD_VERSION={ETCD_VERSION} " in pinned
    assert image_prefix("") == "magnetar"
    assert image_prefix(" registry.example.com:5000/ ") == "registry.example.com:5000/magnetar"


def test_operator_registry_setting_moves_the_default_images() -> None:
    """MAGNETAR_OPERATOR_IMAGE_REGISTRY (the chart's global.imageRegistry), read at import;
    a spec's own registry or images still win."""
    code = (
        "from magnetar_operator.spec import ClusterSpec as S\n"
        "i = S.parse({}).images\n"
        "print(i.broker, i.bookie, i.etcd)\n"
        "print(S.parse({'image': {'registry': 'own/m'}}).images.etcd)\n"
    )
    env = {**os.environ, IMAGE_REGISTRY_ENV: "registry.example.com"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == (
        f"registry.example.com/magnetar/broker:{__version__} "
        f"registry.example.com/magnetar/bookie:{__version__} "
        f"registry.example.com/magnetar/etcd:{ETCD_VERSION}"
    )
    assert out[1] == f"own/m/etcd:{ETCD_VERSION}"
