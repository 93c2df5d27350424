"""``magnetar broker --workers 2`` (issue 24): two broker processes behind one set of ports.

etcd + one bookie + one broker started with ``--workers 2``: the official client on the
shared port is redirected to the worker that owns each topic's bundle, topics owned by both
workers carry messages end to end, a scrape of the shared HTTP port shows every worker's
series (labelled ``worker``) with the same values as each worker's own port, and a worker
SIGKILLed while a producer publishes loses nothing that got a receipt: its bundles move (lease
expiry, then a lookup assigns them and the new owner fences and recovers the open ledger) and
the parent starts a new worker.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pulsar
import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.integration.broker import test_deduplication as dedup
from tests.support.bookies import BookieProc
from tests.support.cluster import load_reports
from tests.support.etcd import EtcdServer
from tests.support.pki import CertificateAuthority
from tests.support.procs import free_ports
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

WORKERS = 2
NS = "public/default"


@pytest.fixture
def workers(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[BrokerProc]:
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    broker: BrokerProc | None = None
    try:
        broker = BrokerProc(
            own_etcd.url,
            tmp_path,
            ensemble=(1, 1, 1),
            session_ttl=2.0,
            extra_args=["--workers", str(WORKERS)],
        ).start()
        # every worker registered and reporting load (the least-loaded choice reads them)
        wait_until(
            lambda: load_reports(own_etcd.url) >= WORKERS, timeout=60, what="workers' load reports"
        )
        yield broker
    finally:
        if broker is not None:
            broker.stop()
        bookie.stop()


def _children(broker: BrokerProc) -> list[psutil.Process]:
    assert broker.pid is not None
    return [p for p in psutil.Process(broker.pid).children() if p.is_running()]


def _owner_url(broker: BrokerProc, topic: str) -> str:
    """The ``pulsar://`` URL of the worker that owns ``topic`` (a name in :data:`NS` or a
    full ``persistent://`` name; the lookup assigns one)."""
    path = topic.removeprefix("persistent://") if "://" in topic else f"{NS}/{topic}"
    with urllib.request.urlopen(
        f"{broker.http_url}/lookup/v2/topic/persistent/{path}", timeout=30
    ) as r:
        return str(json.loads(r.read())["brokerUrl"])


def _topics_on_two_workers(broker: BrokerProc) -> dict[str, str]:
    """Fresh topics until two different workers own one each: owner URL -> topic."""
    owners: dict[str, str] = {}
    for i in range(64):
        topic = f"workers-{i}"
        owners.setdefault(_owner_url(broker, topic), topic)
        if len(owners) == WORKERS:
            return {url: t for url, t in owners.items()}
    raise AssertionError(f"64 topics, all owned by {list(owners)}")


def _roundtrip(client: pulsar.Client, topic: str, n: int) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{topic}-{i}".encode() for i in range(n)]
    for payload in sent:
        producer.send(payload)
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=20_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == sent
    producer.close()
    consumer.close()


def test_topics_of_both_workers_through_the_shared_port(workers: BrokerProc) -> None:
    children = _children(workers)
    assert len(children) == WORKERS
    owners = _topics_on_two_workers(workers)
    shared = f"{workers.port}"
    for url in owners:
        # a worker's own port, not the shared one: lookups redirect to the owner
        assert urlsplit(url).port != int(shared), url
    client = pulsar.Client(workers.service_url, operation_timeout_seconds=30)
    try:
        for topic in owners.values():
            _roundtrip(client, topic, 200)
    finally:
        client.close()
    # the admin API on the shared port answers for a topic of either worker (307 to the owner)
    for topic in owners.values():
        with urllib.request.urlopen(
            f"{workers.http_url}/admin/v2/persistent/{NS}/{topic}/stats", timeout=30
        ) as r:
            stats = json.loads(r.read())
        assert stats["msgInCounter"] == 200, stats


def _samples(url: str, accept: str | None = None) -> tuple[list[Sample], str]:
    """The samples of a ``/metrics`` answer, and its text (each family must appear once)."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as r:
        text = r.read().decode()
    declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(declared) == len(set(declared)), "a family declared twice"
    parse = (
        openmetrics_parser.text_string_to_metric_families
        if accept and "openmetrics" in accept
        else text_string_to_metric_families
    )
    return [s for f in parse(text) for s in f.samples], text


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return float(found[0])


def _owner_http(broker: BrokerProc, topic: str) -> str:
    with urllib.request.urlopen(
        f"{broker.http_url}/lookup/v2/topic/persistent/{NS}/{topic}", timeout=30
    ) as r:
        return str(json.loads(r.read())["httpUrl"])


def test_one_scrape_of_the_shared_port_shows_every_worker(workers: BrokerProc) -> None:
    owners = _topics_on_two_workers(workers)
    client = pulsar.Client(workers.service_url, operation_timeout_seconds=30)
    try:
        for topic in owners.values():
            _roundtrip(client, topic, 200)
    finally:
        client.close()
    full = {t: f"persistent://{NS}/{t}" for t in owners.values()}

    def worker_of(samples: list[Sample], topic: str) -> str:
        (s,) = [
            s
            for s in samples
            if s.name == "pulsar_in_messages_total" and s.labels.get("topic") == full[topic]
        ]
        assert s.value == 200, s
        return s.labels["worker"]

    # each scrape is a new connection: the kernel hands it to either worker, and every
    # answer is the whole pod's
    for _ in range(6):
        merged, _ = _samples(f"{workers.http_url}/metrics")
        assert {t: worker_of(merged, t) for t in owners.values()}.keys() == set(full)
        assert len({worker_of(merged, t) for t in owners.values()}) == WORKERS
        for index in range(WORKERS):
            assert _value(merged, "magnetar_broker_worker_up", worker=str(index)) == 1
            assert _value(merged, "pulsar_health", worker=str(index)) == 1
        # prometheus-client's runtime series, once per worker
        pids = {s.labels["worker"] for s in merged if s.name == "process_start_time_seconds"}
        assert pids == {str(i) for i in range(WORKERS)}

    def same_as_own_ports() -> bool:
        """Per worker, the merged figures are its own port's; summed, the pod's totals."""
        merged, _ = _samples(f"{workers.http_url}/metrics")
        in_total = 0.0
        for topic in owners.values():
            own, _ = _samples(f"{_owner_http(workers, topic)}/metrics")
            assert "worker" not in {k for s in own for k in s.labels}
            index = worker_of(merged, topic)
            for name, labels in (
                ("pulsar_in_messages_total", {"topic": full[topic]}),
                ("pulsar_broker_topics_count", {}),
                ("pulsar_broker_in_bytes_total", {"system_topic": "false"}),
                ("pulsar_connection_created_total_count", {}),
            ):
                if _value(merged, name, **labels, worker=index) != _value(own, name, **labels):
                    return False
            in_total += _value(merged, "pulsar_broker_in_bytes_total", system_topic="false",
                               worker=index)  # fmt: skip
        # the broker-level sum over both workers is the sum over every (user) topic of the pod
        topic_bytes = sum(
            s.value
            for s in merged
            if s.name == "pulsar_in_bytes_total"
            and s.labels["namespace"] != "pulsar/system"
            and not s.labels["topic"].rpartition("/")[2].startswith("__")
        )
        return topic_bytes > 0 and in_total == topic_bytes

    wait_until(same_as_own_ports, timeout=30, what="merged series equal to each worker's own")
    # OpenMetrics too, when the scraper asks for it
    om = "application/openmetrics-text; version=1.0.0"
    merged, text = _samples(f"{workers.http_url}/metrics", om)
    assert text.rstrip().endswith("# EOF")
    assert {worker_of(merged, t) for t in owners.values()} == {str(i) for i in range(WORKERS)}


def _worker_pid_on(workers: BrokerProc, port: int) -> int:
    for child in _children(workers):
        try:
            conns = child.net_connections(kind="tcp")
        except psutil.NoSuchProcess:  # a worker just killed
            continue
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
                return child.pid
    raise AssertionError(f"no worker listens on {port}")


def test_worker_sigkilled_while_producing_loses_nothing_receipted(workers: BrokerProc) -> None:
    owners = _topics_on_two_workers(workers)
    victim_url, topic = next(iter(owners.items()))
    victim = _worker_pid_on(workers, int(urlsplit(victim_url).port or 0))
    client = pulsar.Client(workers.service_url, operation_timeout_seconds=30)
    try:
        # a durable subscription keeps the data (no retention: unsubscribed data is trimmed)
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            max_pending_messages=200,
            block_if_queue_full=True,
            send_timeout_millis=0,  # never give up: the client resends until receipted
        )
        receipts: set[bytes] = set()
        lock = threading.Lock()
        n = 3000

        def done(payload: bytes) -> object:
            def callback(res: pulsar.Result, _: pulsar.MessageId) -> None:
                if res == pulsar.Result.Ok:
                    with lock:
                        receipts.add(payload)

            return callback

        for i in range(n):
            payload = b"kill-%05d" % i
            producer.send_async(payload, done(payload))
            if i == n // 3:
                wait_until(lambda: len(receipts) > 100, timeout=30, what="receipts before kill")
                os.kill(victim, signal.SIGKILL)
        producer.flush()
        wait_until(lambda: len(receipts) == n, timeout=120, what=f"{n} receipts")

        # the bundle moved to a live worker, and the parent replaced the dead one
        wait_until(lambda: _owner_url(workers, topic) != victim_url, timeout=30, what="new owner")
        wait_until(
            lambda: (
                len(_children(workers)) == WORKERS
                and victim not in {p.pid for p in _children(workers)}
            ),
            timeout=30,
            what="a new worker",
        )

        def every_worker_scraped() -> bool:
            # the new worker took its predecessor's slot (and socket): the pod's /metrics
            # has every worker again
            merged, _ = _samples(f"{workers.http_url}/metrics")
            return all(
                _value(merged, "magnetar_broker_worker_up", worker=str(i)) == 1
                for i in range(WORKERS)
            )

        wait_until(every_worker_scraped, timeout=30, what="every worker in the pod's /metrics")
        consumer = client.subscribe(topic, "keep")
        got: set[bytes] = set()
        while len(got) < n:
            msg = consumer.receive(timeout_millis=30_000)
            got.add(msg.data())
            consumer.acknowledge(msg)
        assert receipts <= got
        assert len(got) == n
    finally:
        client.close()


class _OwnerKills:
    """What ``test_deduplication._publish_through_kills`` drives, for a worker: ``kill``
    SIGKILLs the worker owning ``topic`` now, ``start`` waits for the parent's replacement."""

    def __init__(self, broker: BrokerProc, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self.service_url = broker.service_url
        self.killed: list[int] = []

    def kill(self) -> None:
        def owner_pid() -> int:  # AssertionError while the owner found is a dead worker
            url = _owner_url(self.broker, self.topic)
            return _worker_pid_on(self.broker, int(urlsplit(url).port or 0))

        pid = wait_until(
            owner_pid, timeout=60, what="the topic's live owner", retry_on=(AssertionError, OSError)
        )
        os.kill(pid, signal.SIGKILL)
        self.killed.append(pid)

    def start(self) -> None:
        wait_until(
            lambda: (
                len(_children(self.broker)) == WORKERS
                and not set(self.killed) & {p.pid for p in _children(self.broker)}
            ),
            timeout=30,
            what="the parent's new worker",
        )


def test_owner_killed_three_times_stores_each_message_once(workers: BrokerProc) -> None:
    """Deduplication through worker crashes: the worker owning the topic is SIGKILLed three
    times while a named producer resends; each new owner fences, restores and replays."""
    dedup._dedup_namespace(workers.http_url)
    topic = dedup._topic("workers-chaos")
    killer = _OwnerKills(workers, topic)
    dedup._publish_through_kills(killer, topic, 20_000, False)  # type: ignore[arg-type]
    assert len(set(killer.killed)) == 3


def test_tls_ports_are_shared_too(own_etcd: EtcdServer, tmp_path: Path) -> None:
    """The TLS listeners are shared like the plaintext ones: the official client on the shared
    ``pulsar+ssl://`` port is sent to each owning worker's own TLS port."""
    ca = CertificateAuthority(tmp_path / "pki")
    pair = ca.issue("localhost", server=True, file_stem="broker")
    tls_port, https_port = free_ports(2)
    tls_args = [
        "--workers", str(WORKERS),
        "--broker-service-port-tls", str(tls_port),
        "--web-service-port-tls", str(https_port),
        "--tls-certificate-file", str(pair.cert),
        "--tls-key-file", str(pair.key),
    ]  # fmt: skip
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    broker: BrokerProc | None = None
    try:
        broker = BrokerProc(
            own_etcd.url,
            tmp_path,
            ensemble=(1, 1, 1),
            session_ttl=2.0,
            extra_args=tls_args,
        ).start()
        wait_until(
            lambda: load_reports(own_etcd.url) >= WORKERS, timeout=60, what="workers' load reports"
        )
        owners = _topics_on_two_workers(broker)
        client = pulsar.Client(
            f"pulsar+ssl://127.0.0.1:{tls_port}",
            tls_trust_certs_file_path=str(ca.ca_file),
            operation_timeout_seconds=30,
        )
        try:
            for topic in owners.values():
                _roundtrip(client, topic, 50)
        finally:
            client.close()
    finally:
        if broker is not None:
            broker.stop()
        bookie.stop()
