"""Acceptance 2 of the security issue: a cluster with mutual TLS on every hop and a
certificate rotated on disk while a producer runs -- no reconnect storm, nothing receipted
lost.

etcd (client certificates required), three bookies (gRPC, client certificates required),
two brokers (pulsar+ssl and HTTPS requiring trusted client certificates, token and TLS
authentication, authorization, ``proxyRoles``), one proxy (pulsar+ssl and HTTPS only,
client certificates required, token authentication; its own client certificate and token
towards the brokers and etcd). The official client connects through the proxy over
pulsar+ssl with a token (role ``app``, granted on the namespace) and a client certificate.

While it produces to a partitioned topic whose partitions both brokers own, the brokers' and
the proxy's server certificates (and the bookies') are re-issued by the same CA on disk. The
test shows the new certificates are served to new handshakes, the client's connections to
the proxy and the proxy's to the brokers are the same sockets afterwards (the proxy accepted
no new client connection and opened no new broker connection), and every message whose
send was receipted is consumed.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pulsar
import pytest

from magnetar.security import tokens
from tests.integration.internal_tls.conftest import TLS_REFRESH_S, Pki, bookie_args
from tests.support import roundtrip
from tests.support.bookies import BookieProc
from tests.support.certs import MountedSecret, serial_of
from tests.support.cluster import load_reports
from tests.support.etcd import EtcdServer
from tests.support.procs import LOOPBACK, free_ports
from tests.support.proxy import ProxyProc
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
NAMESPACE = "public/rotation"
TOPIC = f"persistent://{NAMESPACE}/payments"
PARTITIONS = 4


@dataclass
class SecuredCluster:
    pki: Pki
    etcd: EtcdServer
    bookies: list[BookieProc]
    brokers: list[BrokerProc]
    broker_tls_ports: list[int]
    proxy: ProxyProc
    proxy_secret: MountedSecret
    super_token: str
    app_token: str

    def https(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """A super-user admin call through the proxy's HTTPS port (client certificate)."""
        request = urllib.request.Request(self.proxy.https_url + path, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.super_token}")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30, context=client_tls(self.pki)) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


def client_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.client.ca_file))
    context.load_cert_chain(pki.client.cert_file, pki.client.key_file)
    return context


def _served_serial(port: int, pki: Pki) -> int:
    """The serial of the certificate a new TLS handshake on ``port`` sees."""
    with (
        socket.create_connection((LOOPBACK, port), timeout=5) as sock,
        client_tls(pki).wrap_socket(sock, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of(der)


def _tls_flags(secret: MountedSecret) -> list[str]:
    return [
        f"--tls-certificate-file={secret.cert_file}",
        f"--tls-key-file={secret.key_file}",
        f"--tls-trust-certs-file={secret.ca_file}",
        "--tls-require-trusted-client-cert-on-connect=true",
        f"--tls-cert-refresh-check={TLS_REFRESH_S}",
    ]


def _metadata_flags(secret: MountedSecret) -> list[str]:
    return [
        f"--metadata-tls-trust-certs-file={secret.ca_file}",
        f"--metadata-tls-certificate-file={secret.cert_file}",
        f"--metadata-tls-key-file={secret.key_file}",
    ]


@pytest.fixture(scope="module")
def cluster(
    pki: Pki, tls_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredCluster]:
    base = tmp_path_factory.mktemp("secured-cluster")
    secret_key = base / "secret.key"
    secret_key.write_bytes(tokens.create_secret_key())
    key = secret_key.read_bytes()
    super_token = tokens.create(subject="superUser", key=key)
    broker_token = tokens.create(subject="broker", key=key)
    proxy_token = tokens.create(subject="proxy", key=key)
    app_token = tokens.create(subject="app", key=key)
    broker_secret = pki.broker_secret
    proxy_secret = MountedSecret(base / "proxy-secret")
    proxy_secret.write(pki.ca.issue("proxy"), pki.ca.cert_pem)
    auth = [
        "--authentication-enabled=true",
        "--authentication-providers=token,tls",
        f"--token-secret-key=file://{secret_key}",
    ]
    bookies = [BookieProc(tls_etcd.url, base, extra_args=bookie_args(pki)) for _ in range(3)]
    brokers: list[BrokerProc] = []
    tls_ports: list[int] = []
    proxy: ProxyProc | None = None
    try:
        for bookie in bookies:
            bookie.start()
        for _ in range(2):
            tls_port, https_port = free_ports(2)
            tls_ports.append(tls_port)
            broker = BrokerProc(
                f"etcd:https://{tls_etcd.endpoint}",
                base,
                ensemble=(3, 2, 2),
                session_ttl=5.0,
                auth_token=super_token,
                extra_args=[
                    f"--broker-service-port-tls={tls_port}",
                    f"--web-service-port-tls={https_port}",
                    *_tls_flags(broker_secret),
                    *auth,
                    "--authorization-enabled=true",
                    "--super-user-roles=superUser,broker,proxy",
                    "--proxy-roles=proxy",
                    f"--broker-client-authentication-plugin={TOKEN_PLUGIN}",
                    f"--broker-client-authentication-parameters=token:{broker_token}",
                    "--broker-client-tls-enabled=true",
                    f"--broker-client-certificate-file={broker_secret.cert_file}",
                    f"--broker-client-key-file={broker_secret.key_file}",
                    "--tls-hostname-verification-enabled=true",
                    *_metadata_flags(broker_secret),
                    "--bookkeeper-tls-client-authentication=true",
                    f"--bookkeeper-tls-certificate-file={broker_secret.cert_file}",
                    f"--bookkeeper-tls-key-file={broker_secret.key_file}",
                    f"--bookkeeper-tls-trust-certs-file={broker_secret.ca_file}",
                    f"--bookkeeper-tls-cert-refresh-check={TLS_REFRESH_S}",
                ],
            )
            brokers.append(broker)
            broker.start()
        proxy = ProxyProc(
            base,
            tls=client_tls(pki),
            plaintext=False,
            args=[
                "--metadata-url", f"etcd:https://{tls_etcd.endpoint}",
                *_metadata_flags(proxy_secret),
                *_tls_flags(proxy_secret),
                *auth,
                "--tls-enabled-with-broker=true",
                "--tls-hostname-verification-enabled=true",
                f"--broker-client-trust-certs-file={proxy_secret.ca_file}",
                f"--broker-client-certificate-file={proxy_secret.cert_file}",
                f"--broker-client-key-file={proxy_secret.key_file}",
                f"--broker-client-authentication-plugin={TOKEN_PLUGIN}",
                f"--broker-client-authentication-parameters=token:{proxy_token}",
            ],
        )  # fmt: skip
        proxy.start()
        wait_until(lambda: load_reports(tls_etcd.url, tls=pki.metadata_tls()) >= 2, timeout=30)
        yield SecuredCluster(
            pki, tls_etcd, bookies, brokers, tls_ports, proxy, proxy_secret, super_token, app_token
        )
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in brokers:
            broker.stop()
        for bookie in bookies:
            bookie.stop()


def _counter(metrics: str, name: str) -> float:
    found = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", metrics, flags=re.M)
    return sum(float(v) for v in found)


def _proxy_to_brokers(cluster: SecuredCluster) -> set[tuple[int, int]]:
    """(local port, broker port) of the proxy's established connections to the brokers'
    pulsar+ssl ports."""
    assert cluster.proxy.proc.pid is not None
    return {
        (c.laddr.port, c.raddr.port)
        for c in psutil.Process(cluster.proxy.proc.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED
        and c.raddr
        and c.raddr.port in cluster.broker_tls_ports
    }


def _set_up(cluster: SecuredCluster) -> None:
    """The namespace (4 bundles, so the partitions spread), the app's grant and the
    partitioned topic, made through the proxy's HTTPS port as the super-user."""
    bundles = json.dumps({"bundles": {"numBundles": 4}}).encode()
    status, body = cluster.https("PUT", f"/admin/v2/namespaces/{NAMESPACE}", bundles)
    assert status == 204, body
    grant = json.dumps(["produce", "consume"]).encode()
    path = f"/admin/v2/namespaces/{NAMESPACE}/permissions/app"
    status, body = cluster.https("POST", path, grant)
    assert status == 204, body
    path = f"/admin/v2/persistent/{NAMESPACE}/payments/partitions"
    status, body = cluster.https("PUT", path, str(PARTITIONS).encode())
    assert status == 204, body


def _owners(cluster: SecuredCluster) -> set[str]:
    """Look the partitions up one after the other (through the proxy's HTTPS port), which
    assigns their bundles to the least loaded broker in turn."""
    owners = set()
    for i in range(PARTITIONS):
        path = f"/lookup/v2/topic/persistent/{NAMESPACE}/payments-partition-{i}"
        status, body = cluster.https("GET", path)
        assert status == 200, body
        owners.add(json.loads(body)["brokerUrlTls"])
    return owners


def test_rotating_certificates_under_load_through_the_proxy(cluster: SecuredCluster) -> None:
    pki = cluster.pki
    _set_up(cluster)
    owners = _owners(cluster)
    client = pulsar.Client(
        cluster.proxy.tls_service_url,
        authentication=pulsar.AuthenticationToken(cluster.app_token),
        tls_trust_certs_file_path=str(pki.client.ca_file),
        tls_certificate_file_path=str(pki.client.cert_file),
        tls_private_key_file_path=str(pki.client.key_file),
        tls_validate_hostname=True,
        operation_timeout_seconds=30,
    )
    try:
        consumer = client.subscribe(
            TOPIC, "audit", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(
            TOPIC,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            max_pending_messages=500,
            block_if_queue_full=True,
            send_timeout_millis=0,  # the client resends until receipted
        )
        load = roundtrip.KeepProducing(producer, prefix=b"pay").start()
        wait_until(lambda: load.count() >= 300, timeout=60, what="receipts before the rotation")

        links_before = _proxy_to_brokers(cluster)
        accepted_before = _counter(cluster.proxy.metrics(), "pulsar_proxy_new_connections_total")
        reloads_before = [
            _counter(b.metrics(), "pulsar_tls_certificate_reloads_total") for b in cluster.brokers
        ]
        old_serials = {
            "proxy": _served_serial(cluster.proxy.tls_port, pki),
            **{p: _served_serial(p, pki) for p in cluster.broker_tls_ports},
        }
        probes = 1  # the handshake above on the proxy's port is a new client connection

        new_broker = pki.rotate(pki.broker_secret, "broker")
        new_proxy = pki.rotate(cluster.proxy_secret, "proxy")
        pki.rotate(pki.bookie_secret, "bookie")
        at_rotation = load.count()

        def serves(port: int, serial: int) -> bool:
            return _served_serial(port, pki) == serial

        for port in cluster.broker_tls_ports:
            wait_until(
                lambda port=port: serves(port, new_broker.serial),
                timeout=20,
                what=f"a new handshake with broker :{port} sees the new certificate",
            )
            assert old_serials[port] != new_broker.serial
        attempts = [0]

        def proxy_serves_new() -> bool:
            attempts[0] += 1
            return serves(cluster.proxy.tls_port, new_proxy.serial)

        wait_until(proxy_serves_new, timeout=20, what="the proxy serves its new certificate")
        probes += attempts[0]
        assert old_serials["proxy"] != new_proxy.serial
        wait_until(
            lambda: load.count() >= at_rotation + 500,
            timeout=60,
            what="publishing continued after the rotation",
        )
        links_after = _proxy_to_brokers(cluster)
        accepted = (
            _counter(cluster.proxy.metrics(), "pulsar_proxy_new_connections_total")
            - accepted_before
            - probes
        )
        reloads = [
            _counter(b.metrics(), "pulsar_tls_certificate_reloads_total") - before
            for b, before in zip(cluster.brokers, reloads_before, strict=True)
        ]
        load.stop()
        receipts = set(load.receipts)

        print(
            f"receipts {len(receipts)} (at rotation {at_rotation}); proxy->broker links "
            f"{len(links_before)} before, {len(links_before - links_after)} replaced; "
            f"client connections accepted by the proxy during the rotation: {accepted}; "
            f"broker certificate reloads {reloads}; partitions' owners {owners}"
        )
        assert all(r >= 1 for r in reloads), reloads
        # no reconnect storm: the same sockets, no client reconnected through the proxy
        assert links_before <= links_after, f"links dropped: {links_before - links_after}"
        assert accepted == 0, f"{accepted} client connections re-opened during the rotation"
        assert not load.failures, load.failures

        got: set[bytes] = set()
        while not receipts <= got:
            msg = consumer.receive(timeout_millis=30_000)
            got.add(msg.data())
            consumer.acknowledge(msg)
        missing = receipts - got
        assert not missing, f"{len(missing)} receipted messages lost"
    finally:
        client.close()


def test_no_credentials_or_untrusted_certificate_is_refused_at_the_proxy(
    cluster: SecuredCluster, tmp_path: Path
) -> None:
    pki = cluster.pki
    # no client certificate: the handshake is refused (and counted)
    context = ssl.create_default_context(cafile=str(pki.client.ca_file))
    before = _counter(cluster.proxy.metrics(), "pulsar_tls_handshake_failures_total")
    answer = b"?"
    try:  # (with TLS 1.3 the client learns of the refusal after its handshake)
        with (
            socket.create_connection((LOOPBACK, cluster.proxy.tls_port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"x")
            answer = tls.recv(1)
    except (ssl.SSLError, OSError):
        answer = b""
    assert answer == b"", "the proxy served a client without a certificate"
    wait_until(
        lambda: _counter(cluster.proxy.metrics(), "pulsar_tls_handshake_failures_total") > before,
        timeout=10,
    )
    # a certificate but no token: refused at CONNECT
    client = pulsar.Client(
        cluster.proxy.tls_service_url,
        tls_trust_certs_file_path=str(pki.client.ca_file),
        tls_certificate_file_path=str(pki.client.cert_file),
        tls_private_key_file_path=str(pki.client.key_file),
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError, pulsar.AuthenticationError)):
            client.create_producer(TOPIC)
    finally:
        client.close()
