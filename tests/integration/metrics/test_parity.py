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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import metrics_parity as parity
from tests.support.prometheus import INSTALL_HINT, PrometheusServer, prometheus_available
from tests.support.standalone import StandaloneProc, admin_call
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[3]
AGAINST = os.environ.get("MAGNETAR_METRICS_AGAINST", "magnetar")


@pytest.fixture(scope="module")
def magnetar_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneProc, PrometheusServer]]:
    """A Magnetar standalone that ran the parity workload, and the Prometheus scraping it."""
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    with parity.magnetar_under_workload(tmp_path_factory.mktemp("metrics-magnetar")) as (
        proc,
        prom,
        _,
    ):
        prom.wait_scraped()
        yield proc, prom


@pytest.fixture(scope="module")
def magnetar_side(magnetar_run: tuple[StandaloneProc, PrometheusServer]) -> set[parity.Series]:
    return parity.capture(magnetar_run[1], "magnetar")


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


PERSISTENT = [*parity.TOPICS, *(f"{parity.PARTITIONED}-partition-{i}" for i in range(2))]
SENT = parity.MESSAGES_PER_TOPIC * (len(parity.TOPICS) + 1)
"""Messages the workload published to the persistent topics (the partitioned one gets as
many as a plain one, spread over its partitions)."""


def _eventually(prom: PrometheusServer, promql: str, expected: float) -> None:
    wait_until(
        lambda: prom.value(promql) == expected,
        timeout=30,
        what=f"{promql} == {expected} (last: {prom.value(promql)})",
    )


def test_values_are_what_the_workload_did(
    magnetar_run: tuple[StandaloneProc, PrometheusServer],
) -> None:
    """The series hold real figures, read back through PromQL as a dashboard would."""
    proc, prom = magnetar_run
    ns = 'namespace="public/default"'
    persistent = f'{ns},topic=~"persistent://.*parity-(a|b|p-partition-.)"'
    _eventually(prom, f"sum(pulsar_in_messages_total{{{persistent}}})", SENT)
    # backlogs are the admin API's (Pulsar counts entries there, a batch being one)
    for name in (parity.IDLE_SUBSCRIPTION, parity.SUBSCRIPTION):
        backlog = sum(
            admin_call(proc.http_url, "GET", f"/persistent/public/default/{t}/stats")[
                "subscriptions"
            ][name]["msgBacklog"]
            for t in PERSISTENT
        )
        assert backlog > 0
        labels = f'{persistent},subscription="{name}"'
        _eventually(prom, f"sum(pulsar_subscription_back_log{{{labels}}})", backlog)
    # bytes: the idle subscription acknowledged nothing, so its backlog is everything stored
    stats = [
        admin_call(proc.http_url, "GET", f"/persistent/public/default/{t}/stats")
        for t in PERSISTENT
    ]
    backlog_bytes = sum(st["backlogSize"] for st in stats)
    assert backlog_bytes == sum(st["storageSize"] for st in stats) > 0
    _eventually(prom, f"sum(pulsar_storage_backlog_size{{{persistent}}})", backlog_bytes)
    consumed = parity.CONSUMED_PER_TOPIC * (len(parity.TOPICS) + 1)
    sub = f'{persistent},subscription="{parity.SUBSCRIPTION}"'
    out = prom.value(f"sum(pulsar_out_messages_total{{{sub}}})")
    assert out is not None and out >= consumed
    # entries (batches) were stored: every latency and size bucket family counted them, in
    # the statistics period they fell in (max over the last minute catches it)
    wait_until(
        lambda: (prom.value(f"sum(max_over_time(pulsar_entry_size_count{{{ns}}}[1m]))") or 0) > 0,
        timeout=30,
        what="entry sizes counted",
    )
    for family in ("pulsar_storage_write_latency", "pulsar_storage_ledger_write_latency"):
        wait_until(
            lambda f=family: (prom.value(f"sum(max_over_time({f}_count{{{ns}}}[1m]))") or 0) > 0,
            timeout=30,
            what=f"{family} counted",
        )
    # batching: fewer entries than messages, and the publish summary counted each entry
    publish = prom.value("pulsar_broker_publish_latency_count")
    assert publish is not None and 0 < publish < SENT
    # the standalone's bookie stored every persistent entry (and the cursors' own), and the
    # process itself
    bookie_entries = prom.value("bookie_add_entries_total")
    stored = publish - parity.NON_PERSISTENT_MESSAGES
    assert bookie_entries is not None and bookie_entries >= stored
    cpu = prom.value("process_cpu_seconds_total")
    assert cpu is not None and cpu > 0
    assert prom.value("pulsar_broker_topics_count") is not None
    assert (prom.value("pulsar_active_connections") or 0) >= 1


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
