"""The chart's dashboards are what scripts/dashboards.py writes (``make dashboards``), and the
helpers that evaluate dashboards and alert rules on Prometheus
(tests/support/observability.py) read them as Grafana and Prometheus do."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

from tests.support import observability as obs

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboards", ROOT / "scripts/dashboards.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_shipped_dashboards_are_the_generators_output() -> None:
    gen = generator()
    shipped = {p.name: p.read_text() for p in obs.dashboard_files()}
    written = {d.file: gen.text(d) for d in gen.DASHBOARDS}
    assert shipped.keys() == written.keys(), "run `make dashboards`"
    stale = [name for name in written if shipped[name] != written[name]]
    assert not stale, f"{stale} differ from scripts/dashboards.py: run `make dashboards`"


def test_every_panel_has_queries_and_unique_ids() -> None:
    for path in obs.dashboard_files():
        dash = obs.load(path)
        assert dash["uid"] == path.stem
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), path.name
        assert all(p["targets"] for p in dash["panels"]), path.name
        assert obs.queries(dash), path.name


def test_substitution_of_grafana_variables() -> None:
    expr = 'rate(x{cluster=~"$cluster", topic=~"${topic}"}[$__rate_interval])'
    values = {"cluster": "(a|b)", "topic": "t"}
    assert obs.substitute(expr, values) == 'rate(x{cluster=~"(a|b)", topic=~"t"}[1m])'


def test_operands_split_at_top_level_comparisons_and_set_operators() -> None:
    assert obs.operands("up == 0") == ["up", "0"]
    assert obs.operands('up{job=~".*bookie.*"} == 0 or pulsar_health == 0') == [
        'up{job=~".*bookie.*"}',
        "0",
        "pulsar_health",
        "0",
    ]
    assert obs.operands("delta(a[15m]) > 0 and deriv(a[5m]) > 0") == [
        "delta(a[15m])",
        "0",
        "deriv(a[5m])",
        "0",
    ]
    assert obs.operands("x - time() < 14 * 86400") == ["x - time()", "14 * 86400"]
    assert obs.operands('a > bool on(instance) b{l="x > y"}') == ["a", 'b{l="x > y"}']
    assert obs.operands("max without (instance) (sum by (or_label) (x)) > 0") == [
        "max without (instance) (sum by (or_label) (x))",
        "0",
    ]
    assert obs.operands("standalone_metric") == ["standalone_metric"]


def test_compressed_rule_files_divide_for_only(tmp_path: Path) -> None:
    src = tmp_path / "src" / "r.yaml"
    src.parent.mkdir()
    src.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"alert": "A", "expr": "x[15m] > 0", "for": "15m"},
                            {"alert": "B", "expr": "y", "for": "0m"},
                            {"alert": "C", "expr": "z", "for": "1h"},
                            {"alert": "D", "expr": "w"},
                        ],
                    }
                ]
            }
        )
    )
    out = obs.compressed(src, tmp_path / "out")
    rules = yaml.safe_load(out.read_text())["groups"][0]["rules"]
    assert [r.get("for") for r in rules] == ["15s", "0s", "60s", None]
    assert [r["expr"] for r in rules] == ["x[15m] > 0", "y", "z", "w"]
