"""The CRD files: structural, the examples valid against them, the chart's copy identical."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.operator.schemas import ROOT, validate


def crd_files() -> list[Path]:
    return sorted((ROOT / "crds").glob("*.yaml"))


def test_four_crds_with_status_printer_columns_and_short_names() -> None:
    kinds = {}
    for path in crd_files():
        crd = yaml.safe_load(path.read_text())
        validate(crd)
        v = crd["spec"]["versions"][0]
        kind = crd["spec"]["names"]["kind"]
        # Function keeps Function Mesh's group (its manifests apply unchanged) and is scalable
        group = "compute.functionmesh.io" if kind == "Function" else "magnetar.dev"
        assert crd["spec"]["group"] == group and v["name"] == "v1alpha1"
        assert v["subresources"]["status"] == {}
        assert set(v["subresources"]) == ({"status", "scale"} if kind == "Function" else {"status"})
        assert v["additionalPrinterColumns"] and crd["spec"]["names"]["shortNames"]
        kinds[kind] = v
    assert set(kinds) == {"PulsarCluster", "Tenant", "Topic", "Function"}
    rules = [
        r["rule"]
        for r in kinds["Topic"]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "x-kubernetes-validations"
        ]
    ]
    assert any("oldSelf.name" in r for r in rules) and any("oldSelf.persistent" in r for r in rules)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "crds/examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_examples_are_valid(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        validate(doc)


def test_chart_crds_are_the_same_files() -> None:
    chart = ROOT / "helm/magnetar/crds"
    for path in crd_files():
        assert (chart / path.name).read_bytes() == path.read_bytes(), (
            f"helm/magnetar/crds/{path.name} differs from crds/: run scripts/k8s/sync-crds.sh"
        )
