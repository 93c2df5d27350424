"""Metric parity with Apache Pulsar 4.0.7, through a real Prometheus (issue 23).

A Magnetar standalone runs the parity workload (tests/support/metrics_parity.py) while a
Prometheus scrapes it; every series of Pulsar's capture (``pulsar-4.0.7.metrics``, written
by ``make metrics-pulsar`` from a real Pulsar standalone under the same workload) must be
there with the same name, label names and type, unless ``exceptions.txt`` says why not. The
differences are printed (``-s`` or ``-rA`` shows them).

With ``MAGNETAR_METRICS_AGAINST=pulsar`` (``make test-metrics-pulsar``) Pulsar's side is
captured again from a Pulsar standalone started here, and what differs from the stored
capture is printed too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import metrics_parity as parity
from tests.support.prometheus import INSTALL_HINT, prometheus_available

ROOT = Path(__file__).resolve().parents[3]
AGAINST = os.environ.get("MAGNETAR_METRICS_AGAINST", "magnetar")


@pytest.fixture(scope="module")
def magnetar_side(tmp_path_factory: pytest.TempPathFactory) -> set[parity.Series]:
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    return parity.magnetar_capture(tmp_path_factory.mktemp("metrics-magnetar"))


@pytest.fixture(scope="module")
def pulsar_side(tmp_path_factory: pytest.TempPathFactory) -> set[parity.Series]:
    stored = parity.load()
    if AGAINST != "pulsar":
        return stored
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    fresh = parity.pulsar_capture(tmp_path_factory.mktemp("metrics-pulsar"))
    print("\n--- Pulsar now, against the stored capture ---")
    print("only now:\n" + "".join(f"  + {s.text()}\n" for s in sorted(fresh - stored)))
    print("only stored:\n" + "".join(f"  - {s.text()}\n" for s in sorted(stored - fresh)))
    return fresh


def test_magnetar_has_pulsars_series(
    pulsar_side: set[parity.Series], magnetar_side: set[parity.Series]
) -> None:
    result = parity.compare(pulsar_side, magnetar_side, parity.load_exceptions())
    print("\n--- Magnetar against Pulsar 4.0.7 ---\n" + result.report())
    assert not result.missing, f"{len(result.missing)} of Pulsar's series missing (see output)"
    assert not result.wrong_type, "series typed differently from Pulsar (see output)"
    assert not result.closed_gaps, "gaps now closed: remove them from exceptions.txt"


def test_the_workload_produced_what_it_should(magnetar_side: set[parity.Series]) -> None:
    """The capture saw the workload: per-topic, per-subscription and per-consumer series."""
    names = {s.name for s in magnetar_side}
    for name in (
        "pulsar_in_messages_total",
        "pulsar_subscription_back_log",
        "pulsar_consumer_unacked_messages",
        "pulsar_storage_write_latency_le_1",
        "process_cpu_seconds_total",
    ):
        assert name in names, name


def test_every_exception_is_documented() -> None:
    """docs/metrics.md names each excepted pattern (with what to use instead)."""
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for e in parity.load_exceptions():
        if e.kind == "gap":
            continue
        quoted = e.pattern.pattern.replace("|", "\\|")  # as a Markdown table cell spells it
        assert f"`{quoted}`" in doc, f"docs/metrics.md lacks `{quoted}`"


def test_every_exception_matches_something_pulsar_has() -> None:
    """No stale line: each pattern covers at least one series of Pulsar's capture."""
    names = {s.name for s in parity.load()}
    for e in parity.load_exceptions():
        assert any(e.pattern.fullmatch(n) for n in names), f"{e.pattern.pattern} matches nothing"
