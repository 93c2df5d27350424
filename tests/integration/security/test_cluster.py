"""Two brokers with TLS, token authentication and authorization: a call one broker answers
by asking the other (partitioned stats over partitions both own, a forced namespace delete)
goes out as the broker itself -- brokerClientAuthenticationPlugin / Parameters over the
other broker's HTTPS URL (brokerClientTlsEnabled) -- and is refused by the other broker when
the broker has no credentials of its own. An HTTPS client sent to the owner of a topic is
sent to its HTTPS URL."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client import admin
from magnetar.security import tokens
from tests.integration.security.conftest import magnetar_only
from tests.support.bookies import BookieProc
from tests.support.cluster import load_reports
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.pki import CertificateAuthority
from tests.support.procs import free_ports
from tests.support.standalone import BrokerProc, holders
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.skipif(not etcd_available(), reason="etcd is not installed"),
    magnetar_only("a cluster of Magnetar brokers"),
]


class Cluster:
    def __init__(self, base: Path, *, broker_credentials: bool) -> None:
        self.base = base
        self.ca = CertificateAuthority(base / "pki")
        self.pair = self.ca.issue("localhost", server=True, file_stem="broker")
        self.secret = tokens.create_secret_key()
        (base / "secret.key").write_bytes(self.secret)
        self.super_token = tokens.create(subject="superUser", key=self.secret)
        self.broker_token = tokens.create(subject="broker", key=self.secret)
        self.broker_credentials = broker_credentials
        self.https_ports: list[int] = []

    def broker_args(self) -> list[str]:
        tls_port, https_port = free_ports(2)
        self.https_ports.append(https_port)
        args = [
            "--broker-service-port-tls", str(tls_port),
            "--web-service-port-tls", str(https_port),
            "--tls-certificate-file", str(self.pair.cert),
            "--tls-key-file", str(self.pair.key),
            "--tls-trust-certs-file", str(self.ca.ca_file),
            "--authentication-enabled", "true",
            "--authentication-providers", "token",
            "--token-secret-key", f"file://{self.base / 'secret.key'}",
            "--authorization-enabled", "true",
            "--super-user-roles", "superUser,broker",
            "--broker-client-tls-enabled", "true",
            "--tls-hostname-verification-enabled", "true",
        ]  # fmt: skip
        if self.broker_credentials:
            args += [
                "--broker-client-authentication-plugin",
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                "--broker-client-authentication-parameters",
                f"token:{self.broker_token}",
            ]
        return args

    def https(
        self, port: int, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, bytes, str]:
        """(status, body, final URL) of a super-user request; redirects followed."""
        ctx = ssl.create_default_context(cafile=str(self.ca.ca_file))
        url = f"https://localhost:{port}/admin/v2{path}"
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.super_token}")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30, context=ctx) as answer:
                return answer.status, answer.read(), answer.geturl()
        except urllib.error.HTTPError as err:
            return err.code, err.read(), err.geturl()


def _cluster(base: Path, *, broker_credentials: bool) -> Iterator[tuple[Cluster, list[BrokerProc]]]:
    etcd = EtcdServer(base / "etcd").start()
    cluster = Cluster(base, broker_credentials=broker_credentials)
    bookie = BookieProc(etcd.url, base).start()
    brokers: list[BrokerProc] = []
    try:
        for _ in range(2):
            broker = BrokerProc(
                etcd.url,
                base,
                ensemble=(1, 1, 1),
                session_ttl=2.0,
                extra_args=cluster.broker_args(),
                auth_token=cluster.super_token,
            )
            brokers.append(broker)
            broker.start()
        wait_until(lambda: load_reports(etcd.url) >= 2, timeout=30, what="both load reports")
        yield cluster, brokers
    finally:
        for b in brokers:
            b.stop()
        bookie.stop()
        etcd.stop()


@pytest.fixture(scope="module")
def with_credentials(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, list[BrokerProc]]]:
    yield from _cluster(tmp_path_factory.mktemp("brokers-creds"), broker_credentials=True)


def _produce_to_every_partition(
    cluster: Cluster, brokers: list[BrokerProc], topic: str, *, spread: bool = False
) -> None:
    port = cluster.https_ports[0]
    bundles = json.dumps({"bundles": {"numBundles": 16}}).encode()
    status, body, _ = cluster.https(port, "PUT", f"/namespaces/public/{topic}", bundles)
    assert status == 204, body
    path = f"/persistent/public/{topic}/{topic}/partitions"
    status, body, _ = cluster.https(port, "PUT", path, b"8")
    assert status == 204, body
    # one lookup after the other assigns the bundles (concurrent first lookups all tie)
    owners = _owners(cluster, brokers, topic)
    if spread:  # the first namespace of a fresh cluster spreads over both brokers
        assert len(holders(brokers, owners)) == 2, "the partitions did not spread"
    client = pulsar.Client(
        brokers[0].service_url,
        authentication=pulsar.AuthenticationToken(cluster.super_token),
        operation_timeout_seconds=20,
    )
    try:
        producer = client.create_producer(
            f"persistent://public/{topic}/{topic}",
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            batching_enabled=False,
        )
        for i in range(16):
            producer.send(f"m-{i}".encode())
    finally:
        client.close()


def _owners(cluster: Cluster, brokers: list[BrokerProc], topic: str) -> set[str]:
    owners = set()
    for i in range(8):
        request = urllib.request.Request(
            f"{brokers[0].http_url}/lookup/v2/topic/persistent/public/{topic}/{topic}-partition-{i}"
        )
        request.add_header("Authorization", f"Bearer {cluster.super_token}")
        with urllib.request.urlopen(request, timeout=30) as answer:
            owners.add(json.loads(answer.read())["brokerUrl"])
    return owners


def test_partitioned_stats_across_brokers_go_out_as_the_broker(
    with_credentials: tuple[Cluster, list[BrokerProc]],
) -> None:
    cluster, brokers = with_credentials
    _produce_to_every_partition(cluster, brokers, "stats", spread=True)
    status, body, _ = cluster.https(
        cluster.https_ports[0], "GET", "/persistent/public/stats/stats/partitioned-stats"
    )
    assert status == 200, body
    stats = json.loads(body)
    assert stats["metadata"] == {"partitions": 8}
    assert stats["msgInCounter"] == 16, stats  # the other broker's partitions counted too


def test_an_https_client_is_redirected_to_the_owners_https_url(
    with_credentials: tuple[Cluster, list[BrokerProc]],
) -> None:
    cluster, brokers = with_credentials
    _produce_to_every_partition(cluster, brokers, "redirect")
    for i in range(8):
        for port in cluster.https_ports:
            status, body, url = cluster.https(
                port, "GET", f"/persistent/public/redirect/redirect-partition-{i}/stats"
            )
            assert status == 200, body
            assert url.startswith("https://"), url  # never the plaintext URL
            # the owner's HTTPS URL: a broker's (with workers, the owning worker's own port)
            assert holders(brokers, [url]), url


def test_the_admin_client_follows_a_redirect_to_the_owner_with_method_body_and_token(
    with_credentials: tuple[Cluster, list[BrokerProc]],
) -> None:
    """magnetar.client.admin over HTTPS, hostname verified: a PUT with a body on a partition
    the other broker owns is answered 307 and sent on to the owner with the same method,
    body and token (the owner creates the subscription); without a token, 401 with
    Pulsar's reason."""
    cluster, brokers = with_credentials
    _produce_to_every_partition(cluster, brokers, "moved")
    # each partition is called through both brokers: one of them does not own it
    for port in cluster.https_ports:
        client = admin.AdminClient.of(
            f"https://localhost:{port}",
            auth_plugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
            auth_params=f"token:{cluster.super_token}",
            tls_trust_certs_file=str(cluster.ca.ca_file),
            tls_verify_hostname=True,
        )
        for i in range(8):
            base = f"/admin/v2/persistent/public/moved/moved-partition-{i}"
            client.put(f"{base}/subscription/via-{port}", {"ledgerId": -1, "entryId": -1})
            assert f"via-{port}" in client.get(f"{base}/subscriptions")
    anonymous = admin.AdminClient(
        f"https://localhost:{cluster.https_ports[0]}", tls_trust_certs_file=str(cluster.ca.ca_file)
    )
    with pytest.raises(admin.AdminError) as refused:
        anonymous.get("/admin/v2/persistent/public/moved/moved-partition-0/subscriptions")
    assert refused.value.status == 401 and "Authentication required" in refused.value.reason


def test_without_broker_credentials_the_other_broker_refuses(
    tmp_path: Path,
) -> None:
    for cluster, brokers in _cluster(tmp_path, broker_credentials=False):
        _produce_to_every_partition(cluster, brokers, "refused", spread=True)
        status, body, _ = cluster.https(
            cluster.https_ports[0], "GET", "/persistent/public/refused/refused/partitioned-stats"
        )
        assert status == 401, body
