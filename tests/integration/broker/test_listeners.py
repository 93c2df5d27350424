"""Pulsar's advertisedListeners / internalListenerName on a two-broker etcd cluster: a lookup
naming a listener answers that listener's URL -- also for a topic the other broker owns --
the official client with ``listener_name`` produces and consumes through it, a client naming
no listener gets the internal one, and an unknown listener name is an error (as in Pulsar)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.wire import commands, pb
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.pki import CertificateAuthority
from tests.support.procs import free_ports
from tests.support.raw_client import RawClient
from tests.support.standalone import BrokerProc

pytestmark = pytest.mark.etcd

NS = "public/listeners"

ONE_PROCESS = ["--workers", "1"]
"""advertisedListeners name one address per listener, which the worker processes of
``--workers N`` cannot share (refused at startup, docs/architecture.md): these brokers stay
one process each, also under ``MAGNETAR_TEST_BROKER_WORKERS``."""


def _broker(etcd: EtcdServer, tmp_path: Path) -> BrokerProc:
    proc = BrokerProc(
        etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0, extra_args=ONE_PROCESS
    )
    proc.proc.argv += [
        # the same socket under two names: "external" is what a client outside would reach
        "--advertised-listeners",
        f"internal:pulsar://127.0.0.1:{proc.port},external:pulsar://localhost:{proc.port}",
        "--internal-listener-name", "internal",
    ]  # fmt: skip
    return proc.start()


@pytest.fixture
def brokers(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    a = b = None
    try:
        a = _broker(own_etcd, tmp_path)
        b = _broker(own_etcd, tmp_path)
        yield a, b
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.stop()
        bookie.stop()


def lookup(
    proc: BrokerProc, topic: str, *, listener: str | None = None
) -> pb.CommandLookupTopicResponse:
    raw = RawClient(proc.port)
    try:
        raw.handshake()
        cmd = commands.lookup(topic=topic, request_id=1, authoritative=True)
        if listener is not None:
            cmd.lookupTopic.advertised_listener_name = listener
        frame = raw.request(cmd)
        assert frame.type == pb.BaseCommand.LOOKUP_RESPONSE
        return frame.command.lookupTopicResponse
    finally:
        raw.close()


def test_lookups_answer_the_named_listener(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = brokers
    topic = f"persistent://{NS}/on-b"
    with urllib.request.urlopen(
        urllib.request.Request(f"{a.http_url}/admin/v2/namespaces/{NS}", method="PUT"), timeout=10
    ):
        pass
    # b takes the topic's bundle; a answers for it with b's URL of the named listener
    assert lookup(b, topic).brokerServiceUrl == f"pulsar://127.0.0.1:{b.port}"
    answer = lookup(a, topic, listener="external")
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == f"pulsar://localhost:{b.port}"
    assert lookup(a, topic).brokerServiceUrl == f"pulsar://127.0.0.1:{b.port}", "internal"
    url = f"{a.http_url}/lookup/v2/topic/persistent/{NS}/on-b?listenerName=external"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read())["brokerUrl"] == f"pulsar://localhost:{b.port}"

    unknown = lookup(a, topic, listener="nope")
    assert unknown.response == pb.CommandLookupTopicResponse.Failed
    assert unknown.error == pb.ServiceNotReady and "nope" in unknown.message

    client = pulsar.Client(a.service_url, listener_name="external", operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(f"m{i}".encode())
        got = [consumer.receive(timeout_millis=10_000).data().decode() for _ in range(50)]
        assert got == [f"m{i}" for i in range(50)]
    finally:
        client.close()

    # the official client naming a listener no broker has: the producer is refused
    client = pulsar.Client(a.service_url, listener_name="nope", operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()


def test_bad_listener_configuration_fails_startup(tmp_path: Path) -> None:
    import subprocess
    import sys

    for args, needle in (
        (["--advertised-listeners", "external:http://h:1"], "pulsar://"),
        (["--advertised-listeners", "a:pulsar://h:1", "--internal-listener-name", "b"], "'b'"),
        (["--advertised-listeners", "a:pulsar://h:1,a:pulsar://h:2"], "a second pulsar://"),
        (["--advertised-listeners", "a:pulsar://h:1,b:pulsar://h:1"], "both name h:1"),
        (["--advertised-listeners", "a:pulsar+ssl://h:1"], "no pulsar:// URL"),
        (["--advertised-listeners", "a:pulsar://h:1,a:pulsar+ssl://h:2"], "no TLS port"),
        (["--advertised-listeners", "a:https://h:1"], "pulsar+ssl://"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "broker", "--metadata-url",
             "etcd://127.0.0.1:1", *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, result
        assert needle in result.stderr, result.stderr


def _tls_broker(etcd: EtcdServer, tmp_path: Path, ca: CertificateAuthority) -> BrokerProc:
    pair = ca.issue("localhost", server=True, file_stem="broker")
    proc = BrokerProc(
        etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0, extra_args=ONE_PROCESS
    )
    (tls_port,) = free_ports(1)
    proc.tls_port = tls_port  # type: ignore[attr-defined]
    proc.proc.argv += [
        "--broker-service-port-tls", str(tls_port),
        "--tls-certificate-file", str(pair.cert),
        "--tls-key-file", str(pair.key),
        # both listeners on the same sockets: "external" names the host the certificate is for
        "--advertised-listeners",
        f"internal:pulsar://127.0.0.1:{proc.port},internal:pulsar+ssl://127.0.0.1:{tls_port},"
        f"external:pulsar://localhost:{proc.port},external:pulsar+ssl://localhost:{tls_port}",
        "--internal-listener-name", "internal",
    ]  # fmt: skip
    return proc.start()


def test_tls_listeners_answer_their_pulsar_ssl_urls(own_etcd: EtcdServer, tmp_path: Path) -> None:
    """A listener with a pulsar+ssl:// URL: lookups naming it answer both of its URLs, and
    the official client over TLS with hostname verification, naming it, is sent to the
    owner's ``pulsar+ssl://localhost`` (the certificate's name) and produces and consumes."""
    ca = CertificateAuthority(tmp_path / "pki")
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    brokers: list[BrokerProc] = []
    try:
        brokers = [_tls_broker(own_etcd, tmp_path, ca) for _ in range(2)]
        a, b = brokers
        with urllib.request.urlopen(
            urllib.request.Request(f"{a.http_url}/admin/v2/namespaces/{NS}", method="PUT"),
            timeout=10,
        ):
            pass
        topic = f"persistent://{NS}/tls-on-b"
        assert lookup(b, topic).brokerServiceUrlTls == f"pulsar+ssl://127.0.0.1:{b.tls_port}"
        answer = lookup(a, topic, listener="external")
        assert answer.brokerServiceUrl == f"pulsar://localhost:{b.port}"
        assert answer.brokerServiceUrlTls == f"pulsar+ssl://localhost:{b.tls_port}"
        url = f"{a.http_url}/lookup/v2/topic/persistent/{NS}/tls-on-b?listenerName=external"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert json.loads(r.read())["brokerUrlTls"] == f"pulsar+ssl://localhost:{b.tls_port}"

        client = pulsar.Client(
            f"pulsar+ssl://localhost:{a.tls_port}",
            listener_name="external",
            tls_trust_certs_file_path=str(ca.ca_file),
            tls_validate_hostname=True,
            operation_timeout_seconds=30,
        )
        try:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(f"m{i}".encode())
            got = [consumer.receive(timeout_millis=10_000).data().decode() for _ in range(20)]
            assert got == [f"m{i}" for i in range(20)]
        finally:
            client.close()
    finally:
        for proc in reversed(brokers):
            proc.stop()
        bookie.stop()
