"""Metric parity with Apache Pulsar: one fixed workload, the series a real Prometheus
scraped from a standalone under it, and the comparison of two such captures.

The workload (:func:`run_workload`) uses the official Python client on the standalone's
``public/default``: three topics (one partitioned in two), a batching producer on each, a
shared subscription that consumes and acknowledges part of what was sent, a second one
that only accumulates a backlog, and a non-persistent topic. Producers and consumers stay
connected while Prometheus scrapes (:class:`Workload` closes them), so producer- and
consumer-level series exist then.

A capture (:func:`capture`) is the set of (sample name, label names) Prometheus holds for
one scrape job, ``job``/``instance`` left out, with each family's type from the target's
metadata. The stored expectation is Pulsar's capture, written by ``make metrics-pulsar``
(``scripts/capture_pulsar_metrics.py``) in the text form of :func:`dump`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from tests.support.procs import started
from tests.support.prometheus import PrometheusServer, ScrapeTarget
from tests.support.standalone import StandaloneProc, admin_call

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "integration" / "metrics" / "pulsar-4.0.7.metrics"
EXCEPTIONS = ROOT / "tests" / "integration" / "metrics" / "exceptions.txt"

NAMESPACE = "public/default"
TOPICS = ("parity-a", "parity-b")
PARTITIONED = "parity-p"
PARTITIONS = 2
NON_PERSISTENT = "parity-np"
NON_PERSISTENT_MESSAGES = 20
"""Sent one by one (no batching) to the non-persistent topic."""
MESSAGES_PER_TOPIC = 200
CONSUMED_PER_TOPIC = 120
SUBSCRIPTION = "parity-sub"
IDLE_SUBSCRIPTION = "parity-idle"

BROKER_CONF = {
    "exposeTopicLevelMetricsInPrometheus": "true",
    "exposeConsumerLevelMetricsInPrometheus": "true",
    "transactionCoordinatorEnabled": "true",
}
"""The metric switches both standalones run with in the comparison."""

PULSAR_CONF = {
    **BROKER_CONF,
    # Pulsar computes topic rates and pulsar_ml_* from statistics refreshed every 60 s by
    # default; refreshed every 2 s here, so the capture sees the workload a few seconds later
    "statsUpdateFrequencyInSecs": "2",
    "statsUpdateInitialDelayInSecs": "2",
    "managedLedgerStatsPeriodSeconds": "2",
}
PULSAR_SETTLE_S = 10.0
"""How long after the workload Pulsar's capture waits (a few statistics periods)."""

_IGNORED_LABELS = frozenset({"job", "instance"})
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gcount", "_gsum")


@dataclass
class Workload:
    """The clients of a finished workload, still connected (close with :meth:`close`)."""

    client: pulsar.Client
    handles: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for h in self.handles:
            h.close()
        self.client.close()


def _topic(name: str, domain: str = "persistent") -> str:
    return f"{domain}://{NAMESPACE}/{name}"


def run_workload(service_url: str, http_url: str) -> Workload:
    """The fixed workload (module docstring) against a standalone; its clients stay open."""
    admin_call(http_url, "PUT", f"/persistent/{NAMESPACE}/{PARTITIONED}/partitions", PARTITIONS)
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    work = Workload(client)
    topics = [_topic(t) for t in (*TOPICS, PARTITIONED)]
    for topic in topics:
        # the idle subscription exists before anything is sent, so all of it is its backlog
        client.subscribe(topic, IDLE_SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared).close()
        consumer = client.subscribe(topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared)
        work.handles.append(consumer)
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=5,
        )
        work.handles.append(producer)
        for i in range(MESSAGES_PER_TOPIC):
            producer.send_async(f"{topic} {i}".encode() + b"x" * (i % 50), None)
        producer.flush()
        for _ in range(CONSUMED_PER_TOPIC):
            msg = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(msg)
    np_topic = _topic(NON_PERSISTENT, "non-persistent")
    np_consumer = client.subscribe(np_topic, SUBSCRIPTION)
    work.handles.append(np_consumer)
    np_producer = client.create_producer(np_topic, batching_enabled=False)
    work.handles.append(np_producer)
    for i in range(NON_PERSISTENT_MESSAGES):
        np_producer.send(f"np {i}".encode())
    for _ in range(NON_PERSISTENT_MESSAGES):
        np_consumer.acknowledge(np_consumer.receive(timeout_millis=30_000))
    return work


def family_of(sample: str, types: Mapping[str, str]) -> str:
    """The metric family a sample name belongs to (``x_bucket`` -> ``x`` of a histogram)."""
    if sample in types:
        return sample
    for suffix in _SUFFIXES:
        if sample.endswith(suffix) and sample[: -len(suffix)] in types:
            return sample[: -len(suffix)]
    return sample


@dataclass(frozen=True, order=True)
class Series:
    """A sample name with the names of its labels and its family's type."""

    name: str
    labels: tuple[str, ...]
    type: str

    def text(self) -> str:
        return f"{self.name}{{{','.join(self.labels)}}} {self.type}"


def capture(prometheus: PrometheusServer, job: str) -> set[Series]:
    """What Prometheus holds for ``job`` (module docstring)."""
    types = prometheus.metadata(job)
    out: set[Series] = set()
    for s in prometheus.series(job):
        name = s.pop("__name__")
        labels = tuple(sorted(k for k in s if k not in _IGNORED_LABELS))
        if name == "up" or name.startswith("scrape_"):
            continue  # Prometheus' own per-target series
        if name.endswith("_created"):
            continue  # the client library's counter creation times (not metrics of their own)
        out.add(Series(name, labels, types.get(family_of(name, types), "untyped")))
    return out


def dump(series: Iterable[Series]) -> str:
    return "".join(s.text() + "\n" for s in sorted(series))


_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<type>\w+)$")


def load(path: Path = EXPECTED) -> set[Series]:
    """A capture stored by :func:`dump` (``#`` lines are comments)."""
    out: set[Series] = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"{path}:{n}: not a series line: {line!r}")
        labels = tuple(x for x in m["labels"].split(",") if x)
        out.add(Series(m["name"], labels, m["type"]))
    return out


KINDS = ("deliberate", "absent", "gap")


@dataclass(frozen=True)
class Exception_:
    """A pattern over Pulsar's sample names and why Magnetar differs: ``deliberate`` (a
    component Magnetar does not have, such as the JVM; docs/metrics.md says what to use
    instead), ``absent`` (a Pulsar feature Magnetar does not implement, so nothing to
    measure) or ``gap`` (Magnetar has the feature, not yet the metric; the parity test
    fails once the series appears, so the list only shrinks)."""

    pattern: re.Pattern[str]
    kind: str
    reason: str


def load_exceptions(path: Path = EXCEPTIONS) -> list[Exception_]:
    """``kind<TAB>regex<TAB>reason`` lines; ``#`` lines are comments."""
    out: list[Exception_] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or parts[0] not in KINDS:
            raise ValueError(f"{path}:{n}: expected '{'|'.join(KINDS)}<TAB>regex<TAB>reason'")
        out.append(Exception_(re.compile(parts[1]), parts[0], parts[2]))
    return out


def excepted(name: str, exceptions: Iterable[Exception_]) -> Exception_ | None:
    for e in exceptions:
        if e.pattern.fullmatch(name):
            return e
    return None


@dataclass
class Comparison:
    """Pulsar's capture against Magnetar's."""

    missing: list[Series]
    """Pulsar's series (no exception covers them) that Magnetar lacks or labels differently."""
    wrong_type: list[tuple[Series, Series]]
    """(Pulsar's, Magnetar's): same name and labels, another type."""
    excepted: dict[str, list[Series]]
    """Pulsar's series an exception covers, by kind."""
    closed_gaps: list[Series]
    """Series listed as a gap that Magnetar now has (the gap entry should go)."""
    extra: list[Series]
    """Magnetar's series with names Pulsar does not export."""

    def report(self) -> str:
        lines = [
            f"missing on Magnetar: {len(self.missing)}",
            *(f"  - {s.text()}" for s in self.missing),
            f"different type: {len(self.wrong_type)}",
            *(f"  ~ {p.text()}  (Magnetar: {m.type})" for p, m in self.wrong_type),
            f"gaps now closed (remove from exceptions.txt): {len(self.closed_gaps)}",
            *(f"  + {s.text()}" for s in self.closed_gaps),
        ]
        for kind, series in sorted(self.excepted.items()):
            lines.append(f"excepted ({kind}): {len(series)}")
            lines.extend(f"  . {s.text()}" for s in series)
        lines.append(f"only on Magnetar: {len(self.extra)}")
        lines.extend(f"  * {s.text()}" for s in self.extra)
        return "\n".join(lines)


def compare(
    pulsar_side: Iterable[Series], magnetar_side: Iterable[Series], exceptions: list[Exception_]
) -> Comparison:
    ours = {(s.name, s.labels): s for s in magnetar_side}
    theirs = sorted(set(pulsar_side))
    their_names = {s.name for s in theirs}
    missing: list[Series] = []
    wrong: list[tuple[Series, Series]] = []
    exc: dict[str, list[Series]] = {}
    closed: list[Series] = []
    for s in theirs:
        e = excepted(s.name, exceptions)
        have = ours.get((s.name, s.labels))
        if e is not None:
            exc.setdefault(e.kind, []).append(s)
            if e.kind == "gap" and have is not None and have.type == s.type:
                closed.append(s)
            continue
        if have is None:
            missing.append(s)
        elif have.type != s.type:
            wrong.append((s, have))
    extra = sorted(s for s in ours.values() if s.name not in their_names)
    return Comparison(missing, wrong, exc, closed, extra)


@contextlib.contextmanager
def _under_workload(
    prometheus_dir: Path, job: str, address: str, service_url: str, http_url: str
) -> Iterator[tuple[PrometheusServer, Workload]]:
    """Prometheus scraping a running standalone, the workload done, its clients still
    connected; Prometheus stopped and the clients closed on exit."""
    with started(PrometheusServer(prometheus_dir, [ScrapeTarget(job, address)])) as prom:
        work = run_workload(service_url, http_url)
        try:
            yield prom, work
        finally:
            work.close()


@contextlib.contextmanager
def magnetar_under_workload(
    base_dir: Path,
) -> Iterator[tuple[StandaloneProc, PrometheusServer, Workload]]:
    """A Magnetar standalone (with :data:`BROKER_CONF`) that ran the workload, scraped by a
    Prometheus (job ``magnetar``); everything stopped on exit."""
    conf = base_dir / "standalone.conf"
    base_dir.mkdir(parents=True, exist_ok=True)
    conf.write_text("".join(f"{k}={v}\n" for k, v in BROKER_CONF.items()))
    proc = StandaloneProc(base_dir / "data", extra_args=["--config", str(conf)])
    with started(proc):
        address = f"127.0.0.1:{proc.http_port}"
        with _under_workload(
            base_dir / "prometheus", "magnetar", address, proc.service_url, proc.http_url
        ) as (prom, work):
            yield proc, prom, work


def magnetar_capture(base_dir: Path) -> set[Series]:
    """A Magnetar standalone under the workload, as Prometheus scraped it."""
    with magnetar_under_workload(base_dir) as (_, prom, _):
        prom.wait_scraped()
        return capture(prom, "magnetar")


def pulsar_capture(base_dir: Path) -> set[Series]:
    """An Apache Pulsar standalone (bench/peers/systems.py installs and starts it) under the
    workload, as Prometheus scraped it."""
    spec = importlib.util.spec_from_file_location("peer_systems", ROOT / "bench/peers/systems.py")
    assert spec is not None and spec.loader is not None
    systems = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(systems)
    base_dir.mkdir(parents=True, exist_ok=True)
    peer = systems.PulsarStandalone(base_dir)
    peer.extra_conf = dict(PULSAR_CONF)
    peer.install()
    url = peer.start()
    try:
        http_url = f"http://127.0.0.1:{peer.http_port}"
        address = f"127.0.0.1:{peer.http_port}"
        with _under_workload(base_dir / "prometheus", "pulsar", address, url, http_url) as (
            prom,
            _,
        ):
            # not a wait for a state: Pulsar refreshes its statistics on its own timer (every
            # 2 s here); a few periods later every periodic series has been written
            time.sleep(PULSAR_SETTLE_S)
            prom.wait_scraped()
            return capture(prom, "pulsar")
    finally:
        peer.stop()
