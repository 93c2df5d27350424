"""``magnetar proxy`` in front of a two-broker etcd cluster (one bookie): the official Python
client produces and consumes through it with the topic's partitions owned by both brokers,
survives the loss of a broker, and ``magnetar admin`` works through the proxy's HTTP port
(redirects to the owning broker followed by the proxy). Bad input: a CONNECT naming an
address that is not a broker, a producer on a lookup connection, an unknown listener."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.wire import commands, pb
from tests.integration.admin.test_cluster import owner as cluster_owner
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.proxy import ProxyProc
from tests.support.raw_client import RawClient
from tests.support.standalone import BrokerProc, holders
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

NS = "public/proxied"


class Cluster:
    def __init__(self, etcd: EtcdServer, bookie: BookieProc, a: BrokerProc, b: BrokerProc) -> None:
        self.etcd, self.bookie, self.a, self.b = etcd, bookie, a, b


@pytest.fixture
def cluster(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[Cluster]:
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    a = b = None
    try:
        a = BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0).start()
        b = BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0).start()
        yield Cluster(own_etcd, bookie, a, b)
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.stop()
        bookie.stop()


@pytest.fixture
def proxy(cluster: Cluster, tmp_path: Path) -> Iterator[ProxyProc]:
    proc = ProxyProc(tmp_path, args=["--metadata-url", cluster.etcd.url]).start()
    try:
        yield proc
    finally:
        proc.stop()


def owner(proc: BrokerProc, topic: str, *, take: bool = False) -> str:
    return cluster_owner(proc, topic, take=take, ns=NS)


def admin(proxy: ProxyProc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin",
         "--admin-url", proxy.http_url, "-o", "json", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_client_and_admin_through_the_proxy(cluster: Cluster, proxy: ProxyProc) -> None:
    a, b = cluster.a, cluster.b
    created = admin(proxy, "namespaces", "create", NS, "--bundles", "16")
    assert created.returncode == 0, created.stderr
    created = admin(
        proxy, "topics", "create-partitioned-topic", f"persistent://{NS}/spread", "-p", "4"
    )
    assert created.returncode == 0, created.stderr
    for i in range(4):  # the partitions' bundles on both brokers, alternately
        owner((a, b)[i % 2], f"spread-partition-{i}", take=True)
    owners = {owner(a, f"spread-partition-{i}") for i in range(4)}
    assert holders((a, b), owners) == {a, b}

    client = pulsar.Client(proxy.service_url, operation_timeout_seconds=30)
    try:
        topic = f"persistent://{NS}/spread"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        sent = {f"m{i}" for i in range(200)}
        for text in sorted(sent):
            producer.send(text.encode())
        got = set()
        for _ in range(200):
            msg = consumer.receive(timeout_millis=20_000)
            got.add(msg.data().decode())
            consumer.acknowledge(msg)
        assert got == sent
        # every partition got messages: the proxy forwarded to both brokers
        stats = admin(proxy, "topics", "partitioned-stats", topic, "--per-partition")
        assert stats.returncode == 0, stats.stderr
        per_partition = json.loads(stats.stdout)["partitions"]
        assert all(p["msgInCounter"] == 50 for p in per_partition.values()), per_partition

        # a single-topic operation on a partition b owns: b's redirect is followed inside
        on_b = next(i for i in range(4) if b.serves(owner(a, f"spread-partition-{i}")))
        one = admin(proxy, "topics", "stats", f"{topic}-partition-{on_b}")
        assert one.returncode == 0, one.stderr
        assert json.loads(one.stdout)["msgInCounter"] == 50
        listed = admin(proxy, "topics", "list", NS)
        assert listed.returncode == 0 and "spread-partition-0" in listed.stdout, listed

        # broker b goes away: the client reconnects through the proxy to a (the new owner)
        b.kill()
        for i in range(40):
            producer.send(f"after-{i}".encode())
        # b was SIGKILLed: acks it had not persisted yet (at most its last second) come back
        # from a, as in Pulsar (at-least-once); every new message must arrive, nothing unknown
        expected = {f"after-{i}" for i in range(40)}
        after: set[str] = set()
        while after != expected:
            msg = consumer.receive(timeout_millis=30_000)
            text = msg.data().decode()
            assert text in expected or text in sent, text
            if text in expected:
                after.add(text)
            consumer.acknowledge(msg)
        producer.close()
        consumer.close()
    finally:
        client.close()


def test_fixed_broker_address(cluster: Cluster, tmp_path: Path) -> None:
    """``--broker-service-url`` (a Kubernetes Service in front of the brokers): a lookup
    asks that broker, which names the owner; the proxy then forwards to the owner."""
    a, b = cluster.a, cluster.b
    proc = ProxyProc(
        tmp_path,
        args=["--broker-service-url", a.service_url, "--broker-web-service-url", a.http_url],
    ).start()
    try:
        created = admin(proc, "namespaces", "create", NS, "--bundles", "4")
        assert created.returncode == 0, created.stderr
        assert b.serves(owner(b, "fixed", take=True))  # b owns it, not a
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
        try:
            topic = f"persistent://{NS}/fixed"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            producer.send(b"through a fixed address")
            assert consumer.receive(timeout_millis=10_000).data() == b"through a fixed address"
            stats = admin(proc, "topics", "stats", topic)
            assert stats.returncode == 0 and json.loads(stats.stdout)["msgInCounter"] == 1
        finally:
            client.close()
    finally:
        proc.stop()


def test_bad_input(cluster: Cluster, proxy: ProxyProc) -> None:
    # a CONNECT that names an address which is not a broker: ERROR, then closed
    raw = RawClient(proxy.port)
    try:
        cmd = commands.connect(client_version="raw-test", protocol_version=20)
        cmd.connect.proxy_to_broker_url = (
            f"pulsar://127.0.0.1:{cluster.etcd.endpoint.rsplit(':', 1)[1]}"
        )
        raw.command(cmd)
        frame = raw.read()
        assert frame.type == pb.BaseCommand.ERROR
        assert "not a broker" in frame.command.error.message
        assert raw.closed_by_peer()
    finally:
        raw.close()
    # a PRODUCER on a lookup connection: ERROR naming the problem, the connection stays
    raw = RawClient(proxy.port)
    try:
        raw.handshake()
        frame = raw.request(
            commands.producer(topic="persistent://public/default/x", producer_id=1, request_id=7)
        )
        assert frame.type == pb.BaseCommand.ERROR and frame.command.error.request_id == 7
        assert frame.command.error.error == pb.NotAllowedError
        answer = raw.request(
            commands.partitioned_metadata(topic="persistent://public/default/x", request_id=8)
        )
        assert answer.type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE
        assert answer.command.partitionMetadataResponse.request_id == 8
        assert answer.command.partitionMetadataResponse.partitions == 0
    finally:
        raw.close()
    # admin paths outside the API are refused with a reason
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{proxy.http_url}/bogus", timeout=10)
    assert err.value.code == 404
    wait_until(proxy.ready, timeout=5)


def proxy_metric(proxy: ProxyProc, sample: str) -> float:
    for family in text_string_to_metric_families(proxy.metrics()):
        for s in family.samples:
            if s.name == sample:
                return float(s.value)
    raise AssertionError(f"{sample} is not on the proxy's /metrics")


def test_relayed_traffic_is_counted(cluster: Cluster, proxy: ProxyProc) -> None:
    """pulsar_proxy_binary_ops / _bytes: what the pipes relayed, both ways (Pulsar's
    ProxyService counters)."""
    ops, relayed = (
        proxy_metric(proxy, "pulsar_proxy_binary_ops_total"),
        proxy_metric(proxy, "pulsar_proxy_binary_bytes_total"),
    )
    payload = b"x" * 1000
    client = pulsar.Client(proxy.service_url, operation_timeout_seconds=30)
    try:
        topic = "persistent://public/default/relayed"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(10):
            producer.send(payload)
        for _ in range(10):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    finally:
        client.close()
    assert proxy_metric(proxy, "pulsar_proxy_binary_ops_total") > ops
    # each payload went in (SEND) and out (MESSAGE) through a pipe
    assert proxy_metric(proxy, "pulsar_proxy_binary_bytes_total") - relayed >= 2 * 10 * 1000
    assert proxy_metric(proxy, "process_resident_memory_bytes") > 0


def test_connection_limit(cluster: Cluster, tmp_path: Path) -> None:
    """maxConcurrentInboundConnections: one connection more is answered NotAllowedError and
    closed, counted in pulsar_proxy_rejected_connections; a freed slot admits again."""
    proc = ProxyProc(
        tmp_path,
        args=["--metadata-url", cluster.etcd.url, "--max-concurrent-inbound-connections", "2"],
    ).start()
    held: list[RawClient] = []
    try:
        # (the readiness probe's connections were accepted and are closed)
        wait_until(
            lambda: proxy_metric(proc, "pulsar_proxy_active_connections") == 0,
            timeout=10,
            what="the readiness probe's connections closed",
        )
        accepted = proxy_metric(proc, "pulsar_proxy_new_connections_total")
        for _ in range(2):
            raw = RawClient(proc.port)
            held.append(raw)
            raw.handshake()
        refused = RawClient(proc.port)
        try:
            frame = refused.read()
            assert frame.type == pb.BaseCommand.ERROR
            assert frame.command.error.error == pb.NotAllowedError
            assert frame.command.error.message == "Reached the maximum number of connections"
            assert refused.closed_by_peer()
        finally:
            refused.close()
        assert proxy_metric(proc, "pulsar_proxy_rejected_connections_total") == 1
        assert proxy_metric(proc, "pulsar_proxy_active_connections") == 2
        assert proxy_metric(proc, "pulsar_proxy_new_connections_total") == accepted + 2
        held.pop().close()
        wait_until(
            lambda: proxy_metric(proc, "pulsar_proxy_active_connections") == 1,
            timeout=10,
            what="the closed connection's slot freed",
        )
        again = RawClient(proc.port)
        held.append(again)
        again.handshake()
        assert proxy_metric(proc, "pulsar_proxy_rejected_connections_total") == 1
    finally:
        for raw in held:
            raw.close()
        proc.stop()


def test_connection_limit_is_checked(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "proxy", "--broker-service-url",
         "pulsar://127.0.0.1:1", "--broker-web-service-url", "http://127.0.0.1:1",
         "--max-concurrent-inbound-connections", "-1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "maxConcurrentInboundConnections must be >= 0" in out.stderr
