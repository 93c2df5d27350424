"""The chart's dashboards and alert rules, read as Grafana and Prometheus read them, and
evaluated through a real Prometheus (:mod:`tests.support.prometheus`).

Dashboards: every target of every panel is a PromQL expression with Grafana's variables in
it. :func:`resolve_variables` does what Grafana does when a dashboard opens with its
defaults: each query variable's ``label_values(metric{selector}, label)`` is asked of
Prometheus (``/api/v1/label/<label>/values`` with that ``match[]``, the earlier variables
substituted) and, "All" being selected, the variable becomes the regex of all its values.
The interval variables get the values Grafana would compute for a one-hour panel.

Alert rules: :func:`rule_files` reads helm/magnetar/files/alerts/; :func:`operands` splits an
alert expression at its top-level comparisons and set operators (``> 0``, ``and``, ``or``),
so that each side can be evaluated on its own: an alert that is not firing returns nothing,
but the series it compares must exist. :func:`compressed` writes a test-only copy of a rule
file with every ``for:`` divided by 60 (15m becomes 15s), expressions untouched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "helm" / "magnetar" / "files" / "dashboards"
ALERTS = ROOT / "helm" / "magnetar" / "files" / "alerts"

INTERVALS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
"""Grafana's interval variables, as it sets them for a one-hour panel scraped often."""

_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
_REGEX_SPECIALS = re.compile(r"([\\.+*?()|\[\]{}^$])")


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    expr: str

    def name(self) -> str:
        return f"{self.dashboard} / {self.panel} [{self.ref}]"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every target of every panel (rows' nested panels too)."""
    out: list[Query] = []
    panels = list(dashboard.get("panels", []))
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels", []))
        out.extend(
            Query(dashboard["title"], panel["title"], t["refId"], t["expr"])
            for t in panel.get("targets", [])
            if t.get("expr")
        )
    return out


def substitute(text: str, values: dict[str, str]) -> str:
    for name, value in INTERVALS.items():
        text = text.replace(name, value)
    for name in sorted(values, key=len, reverse=True):
        text = text.replace(f"${{{name}}}", values[name]).replace(f"${name}", values[name])
    return text


def _as_regex(values: list[str]) -> str:
    """What Grafana substitutes for a multi-valued Prometheus variable: the values,
    regex-escaped, as one alternation."""
    escaped = [_REGEX_SPECIALS.sub(r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def resolve_variables(dashboard: dict[str, Any], prom: PrometheusServer) -> dict[str, str]:
    """Each query variable's substitution with "All" selected (module docstring); an
    AssertionError names a variable with no values."""
    values: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = _LABEL_VALUES.match(substitute(query, values))
        assert m, f"{dashboard['title']}: variable {var['name']}: unsupported query {query!r}"
        found = prom.api(f"label/{m['label']}/values", **{"match[]": m["selector"]})
        assert found, (
            f"{dashboard['title']}: variable ${var['name']} has no values "
            f"({m['selector']} has no {m['label']} label in Prometheus)"
        )
        values[var["name"]] = _as_regex(sorted(found))
    return values


def has_data(prom: PrometheusServer, expr: str) -> bool:
    kind, result = prom.query_result(expr)
    return kind == "scalar" or bool(result)


def rule_files() -> list[Path]:
    return sorted(ALERTS.glob("*.yaml"))


def alert_rules(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text())
    return [r for g in data["groups"] for r in g["rules"] if "alert" in r]


_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def compressed(path: Path, out_dir: Path, factor: int = 60) -> Path:
    """A copy of the rule file ``path`` in ``out_dir`` whose ``for:`` durations are divided by
    ``factor`` (at least 1 s unless 0): the rules' expressions and meaning unchanged, time
    compressed for a test."""
    data = yaml.safe_load(path.read_text())
    for group in data["groups"]:
        for rule in group["rules"]:
            if "for" not in rule:
                continue
            m = _DURATION.match(str(rule["for"]))
            assert m, f"{path.name}: {rule.get('alert')}: for: {rule['for']!r}"
            seconds = int(m[1]) * _SECONDS[m[2]]
            rule["for"] = "0s" if seconds == 0 else f"{max(1, round(seconds / factor))}s"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_SET_OPERATORS = ("and", "or", "unless")
_MODIFIER = re.compile(
    r"^\s*(bool\s+)?((on|ignoring)\s*\([^)]*\)\s*)?((group_left|group_right)\s*(\([^)]*\))?\s*)?"
)


def operands(expr: str) -> list[str]:
    """The sides of ``expr``'s top-level comparisons and set operators (``a > 0 and b`` ->
    ``a``, ``0``, ``b``); ``expr`` itself when it has none. Brackets, braces and quoted
    strings are skipped over."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(expr)
    while i < n:
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            op = next((c for c in _COMPARISONS if expr.startswith(c, i)), None)
            if op is None:
                for word in _SET_OPERATORS:
                    end = i + len(word)
                    if (
                        expr.startswith(word, i)
                        and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] == "_"))
                        and (end >= n or not (expr[end].isalnum() or expr[end] == "_"))
                    ):
                        op = word
                        break
            if op is not None:
                parts.append(expr[start:i])
                i += len(op)
                start = i
                continue
        i += 1
    parts.append(expr[start:])
    out = []
    for part in parts:
        part = _MODIFIER.sub("", part, count=1).strip()
        if part:
            out.append(part)
    return out
