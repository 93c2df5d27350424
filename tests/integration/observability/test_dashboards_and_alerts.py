"""The chart's dashboards and alert rules on a real Prometheus (issue 23, acceptance 1 and 3).

One Prometheus (Debian's package) scrapes, every second, a standalone and a small cluster:
etcd, three bookies (autorecovery in-process), two brokers and a proxy. The standalone runs
the metric-parity workload (tests/support/metrics_parity.py: topics, a partitioned topic,
batching producers, shared subscriptions, a backlog, consumer-level series, transactions
on), has a TLS listener, and offloads a topic to a real MinIO and reads it back; the cluster
runs the same workload through the proxy. Then:

* every PromQL expression of every panel of every shipped dashboard, with Grafana's
  variables resolved as Grafana resolves them (tests/support/observability.py), returns
  data: a target with no series fails the test and names the dashboard, panel and query
  (the operator's dashboard is evaluated the same way against the operator in
  tests/k8s/test_operator_metrics.py);
* every side of every alert rule's comparisons returns data, and the rule engine evaluates
  every rule without error; ``promtool check rules`` passes on the rule files;
* with the rules loaded (their ``for:`` compressed 60 times, expressions unchanged), a
  subscription whose backlog keeps growing fires MagnetarBacklogGrowing, and a stopped
  bookie fires MagnetarBookieDown, as /api/v1/alerts shows.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from tests.support import metrics_parity as parity
from tests.support import observability as obs
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available
from tests.support.pki import CertificateAuthority
from tests.support.procs import LOOPBACK, free_port, started
from tests.support.prometheus import (
    INSTALL_HINT,
    PrometheusServer,
    ScrapeTarget,
    prometheus_available,
)
from tests.support.proxy import ProxyProc
from tests.support.standalone import BrokerProc, StandaloneProc, admin_call
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

CLUSTER_NAME = "obs"
OFFLOAD_TOPIC = "obs-offload"
PER_LEDGER = 20
OFFLOAD_MESSAGES = 3 * PER_LEDGER + 5
BACKLOG_TOPIC = f"persistent://{parity.NAMESPACE}/obs-backlog"
BACKLOG_SUBSCRIPTION = "obs-lagging"

EVALUATED_ELSEWHERE = {
    "magnetar-operator.json": "tests/k8s/test_operator_metrics.py (it needs the operator)",
}
"""Dashboards whose sources are not in this stack, and the test that evaluates them."""


@dataclass
class Stack:
    prom: PrometheusServer
    standalone: StandaloneProc
    bookies: list[BookieProc]
    brokers: list[BrokerProc]
    proxy: ProxyProc
    offload: bool
    """A topic was offloaded (MinIO is installed)."""


def _offload_args(base: Path, minio: MinioServer) -> list[str]:
    bucket = minio.create_bucket("obs-offload")
    creds = base / "aws-credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = {minio.access_key}\n"
        f"aws_secret_access_key = {minio.secret_key}\n"
    )
    return [
        "--offload-driver", "S3",
        "--offload-bucket", bucket,
        "--offload-region", minio.region,
        "--offload-endpoint", minio.endpoint,
        "--offload-path-style", "true",
        "--offload-credentials-file", str(creds),
        "--offload-deletion-lag-ms", "0",
    ]  # fmt: skip


def _produce(client: pulsar.Client, topic: str, n: int, prefix: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"{prefix} {i}".encode())
    producer.close()


def _offload(standalone: StandaloneProc, path: str) -> None:
    """Offload everything closed of the topic at ``path`` (admin API), waited for."""
    admin_call(standalone.http_url, "PUT", f"{path}/offload", {"ledgerId": 2**63 - 1, "entryId": 0})

    def offloaded() -> bool:
        status = admin_call(standalone.http_url, "GET", f"{path}/offload")
        assert status["status"] != "ERROR", status
        return bool(status["status"] == "SUCCESS")

    wait_until(offloaded, timeout=120, what=f"the offload of {path}")


def _offload_and_read_back(standalone: StandaloneProc) -> None:
    """OFFLOAD_MESSAGES over several ledgers, offloaded by the admin API; once the bookie
    copies are gone, the standalone restarted (its entry cache empty) and a consumer from
    the earliest message reads them from the object store."""
    topic = f"persistent://{parity.NAMESPACE}/{OFFLOAD_TOPIC}"
    path = f"/persistent/{parity.NAMESPACE}/{OFFLOAD_TOPIC}"
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(topic, "keep").close()
        _produce(client, topic, OFFLOAD_MESSAGES, "offload")
        _offload(standalone, path)

        def bookie_copies_deleted() -> bool:
            stats = admin_call(standalone.http_url, "GET", f"{path}/internalStats")
            closed = stats["ledgers"][:-1]
            return bool(closed) and all(
                lg["offloaded"] and lg["offloadLocation"]["bookieDeleted"] for lg in closed
            )

        wait_until(bookie_copies_deleted, timeout=60, what="the offloaded ledgers' bookie copies")
    finally:
        client.close()
    standalone.restart()
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic, "from-s3", initial_position=pulsar.InitialPosition.Earliest
        )
        for i in range(OFFLOAD_MESSAGES):
            msg = consumer.receive(timeout_millis=30_000)
            assert msg.data() == f"offload {i}".encode()
            consumer.acknowledge(msg)
        consumer.close()
        # and one more offload by this incarnation of the broker: the offload series
        # (counters included, created at 0 by an attempt) are this process's
        _produce(client, topic, PER_LEDGER + 5, "more")
        _offload(standalone, path)
    finally:
        client.close()


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped rule files, their ``for:`` compressed 60 times (test-only copies)."""
    out = tmp_path_factory.mktemp("rules")
    for path in obs.rule_files():
        obs.compressed(path, out)
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, rules_dir: Path) -> Iterator[Stack]:
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (run `make setup`)")
    base = tmp_path_factory.mktemp("observability")
    with ExitStack() as stack:
        offload_args: list[str] = []
        if minio_available():
            minio = stack.enter_context(started(MinioServer(base / "minio")))
            offload_args = _offload_args(base, minio)
        ca = CertificateAuthority(base / "pki")
        cert = ca.issue("localhost", server=True)
        conf = base / "standalone.conf"
        conf.write_text(
            "".join(f"{k}={v}\n" for k, v in parity.BROKER_CONF.items())
            + f"brokerServicePortTls={free_port()}\n"
            f"tlsCertificateFilePath={cert.cert}\ntlsKeyFilePath={cert.key}\n"
        )
        standalone = stack.enter_context(
            started(
                StandaloneProc(
                    base / "standalone",
                    extra_args=[
                        "--config", str(conf),
                        "--max-entries-per-ledger", str(PER_LEDGER),
                        *offload_args,
                    ],
                )
            )
        )  # fmt: skip
        etcd = stack.enter_context(started(EtcdServer(base / "etcd")))
        bookies = []
        for _ in range(3):
            bookie = BookieProc(
                etcd.url,
                base,
                extra_args=["--autorecovery", "true", "--lost-bookie-recovery-delay", "3600"],
            )
            bookies.append(stack.enter_context(started(bookie)))
        broker_conf = base / "broker.conf"
        broker_conf.write_text(f"clusterName={CLUSTER_NAME}\n")
        brokers = [
            stack.enter_context(
                started(BrokerProc(etcd.url, base, extra_args=["--config", str(broker_conf)]))
            )
            for _ in range(2)
        ]
        proxy = stack.enter_context(started(ProxyProc(base, args=["--metadata-url", etcd.url])))
        targets = [
            ScrapeTarget("standalone", f"{LOOPBACK}:{standalone.http_port}"),
            ScrapeTarget("etcd", etcd.endpoint),
            *(
                ScrapeTarget(f"bookie-{i}", f"{LOOPBACK}:{b.http_port}")
                for i, b in enumerate(bookies)
            ),
            *(
                ScrapeTarget(f"broker-{i}", f"{LOOPBACK}:{b.http_port}")
                for i, b in enumerate(brokers)
            ),
            ScrapeTarget("proxy", f"{LOOPBACK}:{proxy.http_port}"),
        ]
        prom = stack.enter_context(
            started(
                PrometheusServer(
                    base / "prometheus", targets, rule_files=sorted(rules_dir.glob("*.yaml"))
                )
            )
        )
        if offload_args:
            _offload_and_read_back(standalone)
        work = parity.run_workload(standalone.service_url, standalone.http_url)
        stack.callback(work.close)
        cluster_work = parity.run_workload(proxy.service_url, proxy.http_url)
        stack.callback(cluster_work.close)
        # the brokers' statistics period (5 s) has passed since the workload, and two
        # scrapes since, so that rate() has two samples of every series
        time.sleep(6)
        prom.wait_scraped()
        prom.wait_scraped()
        yield Stack(prom, standalone, bookies, brokers, proxy, offload=bool(offload_args))


def test_promtool_checks_the_rule_files() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(INSTALL_HINT)
    files = obs.rule_files()
    assert files, "no rule files under helm/magnetar/files/alerts"
    out = subprocess.run(
        [promtool, "check", "rules", *map(str, files)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rules = sum(len(obs.alert_rules(p)) for p in files)
    assert f"SUCCESS: {rules} rules found" in out.stdout, out.stdout


def test_every_dashboard_is_evaluated_somewhere() -> None:
    files = {p.name for p in obs.dashboard_files()}
    assert len(files) >= 10, files
    assert set(EVALUATED_ELSEWHERE) <= files


@pytest.mark.parametrize(
    "path",
    [p for p in obs.dashboard_files() if p.name not in EVALUATED_ELSEWHERE],
    ids=lambda p: p.stem,
)
def test_every_panel_returns_data(stack: Stack, path: Path) -> None:
    if path.name == "magnetar-offload.json" and not stack.offload:
        pytest.skip(f"MinIO is not built (run {INSTALL_SCRIPT}): nothing was offloaded")
    dashboard = obs.load(path)
    values = obs.resolve_variables(dashboard, stack.prom)
    queries = obs.queries(dashboard)
    assert queries, f"{path.name} has no queries"
    empty = [
        f"{q.name()}: {obs.substitute(q.expr, values)}"
        for q in queries
        if not obs.has_data(stack.prom, obs.substitute(q.expr, values))
    ]
    assert not empty, "panels with no series:\n" + "\n".join(empty)


def test_every_alert_expression_reads_data(stack: Stack) -> None:
    # without MinIO nothing is offloaded, so the offloader's series do not exist yet (the
    # offload dashboard's test skips then too); `make test` builds MinIO and checks them
    unreadable = () if stack.offload else ("_ledgeroffloader_",)
    empty = [
        f"{rule['alert']}: {operand}"
        for path in obs.rule_files()
        for rule in obs.alert_rules(path)
        for operand in obs.operands(rule["expr"])
        if not any(part in operand for part in unreadable) and not obs.has_data(stack.prom, operand)
    ]
    assert not empty, "alert expressions reading no series:\n" + "\n".join(empty)
    # and the rule engine evaluated each of them without error
    health = stack.prom.rule_health()
    names = {r["alert"] for p in obs.rule_files() for r in obs.alert_rules(p)}
    assert set(health) == names
    bad = {name: h for name, h in health.items() if h != "ok"}
    assert not bad, bad


def test_a_growing_backlog_fires_the_backlog_alert(stack: Stack) -> None:
    """A subscription that nobody consumes while a producer keeps sending: its backlog
    grows until MagnetarBacklogGrowing fires for it. (The workload's subscriptions, whose
    backlogs grew a minute ago, may fire too: ``for:`` is compressed, the expression's
    windows are not.)"""
    stop = threading.Event()
    client = pulsar.Client(stack.standalone.service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(BACKLOG_TOPIC, BACKLOG_SUBSCRIPTION).close()
        producer = client.create_producer(BACKLOG_TOPIC, batching_enabled=False)

        def produce() -> None:
            i = 0
            while not stop.is_set():
                producer.send(f"lag {i}".encode())
                i += 1
                stop.wait(0.2)

        sender = threading.Thread(target=produce, daemon=True)
        sender.start()

        def fired() -> bool:
            return any(
                a.get("topic") == BACKLOG_TOPIC and a.get("subscription") == BACKLOG_SUBSCRIPTION
                for a in stack.prom.firing("MagnetarBacklogGrowing")
            )

        wait_until(fired, timeout=120, interval=1.0, what="MagnetarBacklogGrowing to fire")
        alert = next(
            a
            for a in stack.prom.firing("MagnetarBacklogGrowing")
            if a.get("subscription") == BACKLOG_SUBSCRIPTION
        )
        assert alert["cluster"] == "standalone" and alert["severity"] == "warning", alert
        assert alert["namespace"] == parity.NAMESPACE and alert["job"] == "standalone", alert
        stop.set()
        sender.join(timeout=30)
        producer.close()
    finally:
        stop.set()
        client.close()


def test_a_stopped_bookie_fires_the_bookie_alert(stack: Stack) -> None:
    """Runs last: it stops a bookie of the cluster for good."""
    assert not stack.prom.firing("MagnetarBookieDown")
    victim = stack.bookies[-1]
    victim.stop()

    def fired() -> list[dict[str, str]]:
        return stack.prom.firing("MagnetarBookieDown")

    wait_until(lambda: bool(fired()), timeout=60, interval=1.0, what="MagnetarBookieDown")
    alerts = fired()
    assert [a["instance"] for a in alerts] == [f"{LOOPBACK}:{victim.http_port}"], alerts
    assert alerts[0]["job"] == f"bookie-{len(stack.bookies) - 1}"
    assert alerts[0]["severity"] == "critical"
