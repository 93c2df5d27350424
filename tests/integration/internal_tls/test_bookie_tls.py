"""Broker <-> bookie gRPC over mutual TLS (issue 21, "every other hop"), with real processes:
etcd, two bookies and a broker, every hop over TLS with client certificates
(``conftest.tls_cluster``), driven by the official client.

* produce and consume end to end; the bookies' registrations say they serve TLS;
* a plaintext client, a client without a certificate and one with a certificate from another
  CA are refused by the bookie (its log names the failed handshake) while the broker keeps
  producing and consuming through it;
* the bookies' and the broker's certificate files rotated on disk while a producer runs:
  nothing receipted is lost, the broker's established connections to the bookies are still
  the same sockets afterwards, no add failed, a new handshake sees the new certificate, and
  the broker's new channels (to bookies and etcd) carry its new client certificate;
* a broker configured for plaintext in front of TLS bookies places nothing on them and says
  which bookies it left out and why.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from pathlib import Path

import grpc
import psutil
import pulsar
import pytest

from magnetar.metadata import keys, open_store
from magnetar.rpc import bookie_pb2, bookie_pb2_grpc
from tests.integration.internal_tls.conftest import Pki, TlsCluster, bookie_args
from tests.support import roundtrip
from tests.support.bookies import BookieProc
from tests.support.certs import MountedSecret, serial_of
from tests.support.etcd import EtcdServer, EtcdTls
from tests.support.procs import LOOPBACK, started
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd


def _round_trip(cluster: TlsCluster, topic: str, count: int) -> None:
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        roundtrip.round_trip(client, topic, count, subscription="sub", batching=False)
    finally:
        client.close()


def test_produce_and_consume_through_bookies_over_mutual_tls(
    pki: Pki, tls_cluster: TlsCluster
) -> None:
    _round_trip(tls_cluster, "tls-hops-roundtrip", 100)

    async def registrations() -> dict[str, dict[str, object]]:
        store = await open_store(tls_cluster.etcd.url, tls=pki.metadata_tls())
        try:
            return {
                keys.unsegment(r.key.rsplit("/", 1)[-1]): json.loads(r.value)
                async for r in store.scan_all(keys.BOOKIES_AVAILABLE)
            }
        finally:
            await store.close()

    found = asyncio.run(registrations())
    for bookie in tls_cluster.bookies:
        assert found[bookie.bookie_id]["tls"] is True


def _info(port: int, credentials: grpc.ChannelCredentials | None) -> object:
    target = f"{LOOPBACK}:{port}"
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    try:
        return bookie_pb2_grpc.BookieStub(channel).Info(bookie_pb2.InfoRequest(), timeout=5)
    finally:
        channel.close()


def _credentials(secret: MountedSecret, trust: MountedSecret) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=trust.ca_file.read_bytes(),
        private_key=secret.key_file.read_bytes(),
        certificate_chain=secret.cert_file.read_bytes(),
    )


def test_clients_the_bookie_does_not_trust_are_refused_and_nothing_else_is_affected(
    pki: Pki, tls_cluster: TlsCluster
) -> None:
    bookie = tls_cluster.bookies[0]
    trust_only = grpc.ssl_channel_credentials(root_certificates=pki.client.ca_file.read_bytes())
    refused = {
        "plaintext": None,
        "no client certificate": trust_only,
        "certificate from another CA": _credentials(pki.untrusted, pki.client),
    }
    for what, credentials in refused.items():
        with pytest.raises(grpc.RpcError) as err:
            _info(bookie.port, credentials)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, what
    wait_until(
        lambda: bookie.log().count("Handshake failed") >= len(refused),
        timeout=10,
        what="the bookie's log names each refused handshake",
    )
    # a trusted client is served, and the broker still writes and reads through the bookies
    assert _info(bookie.port, _credentials(pki.client, pki.client)) is not None
    _round_trip(tls_cluster, "tls-hops-after-refusals", 20)
    assert bookie.alive()


def _served_serial(port: int, pki: Pki) -> int:
    """The serial of the certificate a new TLS handshake with the bookie sees."""
    context = ssl.create_default_context(cafile=str(pki.client.ca_file))
    context.load_cert_chain(pki.client.cert_file, pki.client.key_file)
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((LOOPBACK, port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=LOOPBACK) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of(der)


def _broker_connections(cluster: TlsCluster) -> set[tuple[int, int]]:
    """(local port, bookie port) of the broker's established connections to the bookies (its
    worker processes' with ``--workers``)."""
    assert cluster.broker.pid is not None
    bookie_ports = {b.port for b in cluster.bookies}
    parent = psutil.Process(cluster.broker.pid)
    return {
        (c.laddr.port, c.raddr.port)
        for proc in (parent, *parent.children())
        for c in proc.net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port in bookie_ports
    }


def test_rotating_certificates_while_producing_loses_nothing_and_keeps_connections(
    pki: Pki, tls_cluster: TlsCluster
) -> None:
    topic = "tls-hops-rotation"
    client = pulsar.Client(tls_cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            max_pending_messages=500,
            block_if_queue_full=True,
            send_timeout_millis=0,  # the client resends until receipted
        )
        receipts: dict[bytes, tuple[int, int]] = {}
        failures: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                payload = b"r-%06d" % i
                i += 1

                def done(res: pulsar.Result, mid: pulsar.MessageId, p: bytes = payload) -> None:
                    with lock:
                        if res == pulsar.Result.Ok:
                            receipts[p] = (mid.ledger_id(), mid.entry_id())
                        else:
                            failures.append(str(res))

                producer.send_async(payload, done)
                if i % 100 == 0:
                    time.sleep(0.01)  # paces the producer

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        wait_until(lambda: len(receipts) >= 300, timeout=60, what="receipts before the rotation")
        before = _broker_connections(tls_cluster)
        assert {port for _, port in before} == {b.port for b in tls_cluster.bookies}
        old_serials = {b.port: _served_serial(b.port, pki) for b in tls_cluster.bookies}
        log_before = tls_cluster.broker.log()

        new_bookie = pki.rotate(pki.bookie_secret, "bookie")
        pki.rotate(pki.broker_secret, "broker")
        at_rotation = len(receipts)
        for bookie in tls_cluster.bookies:
            wait_until(
                lambda port=bookie.port: _served_serial(port, pki) == new_bookie.serial,
                timeout=20,
                what=f"a new handshake with bookie :{bookie.port} sees the new certificate",
            )
            assert old_serials[bookie.port] != new_bookie.serial
        wait_until(
            lambda: len(receipts) >= at_rotation + 500,
            timeout=60,
            what="publishing continued after the rotation",
        )
        for line in ("TLS rotated", "etcd: TLS credentials rotated"):
            wait_until(
                lambda line=line: line in tls_cluster.broker.log()[len(log_before) :],
                timeout=20,
                what=f"the broker took its new client certificate ({line!r})",
            )
        after = _broker_connections(tls_cluster)
        stop.set()
        thread.join(timeout=30)
        producer.flush()

        assert before <= after, f"connections dropped by the rotation: {before - after}"
        assert not failures
        since = tls_cluster.broker.log()[len(log_before) :]
        assert "failed" not in since, since  # no add or ensemble change failed
        assert "ensemble change" not in since, since

        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        stored: dict[bytes, tuple[int, int]] = {}
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=15_000)
            stored[msg.data()] = (msg.message_id().ledger_id(), msg.message_id().entry_id())
        missing = set(receipts) - set(stored)
        assert not missing, f"{len(missing)} receipted messages lost"
        for payload, position in receipts.items():
            assert stored[payload] == position
    finally:
        client.close()
    # a new topic after the rotation: ownership in etcd and a new ledger on the bookies, over
    # channels opened with the new client certificate
    _round_trip(tls_cluster, "tls-hops-after-rotation", 20)


def test_a_broker_speaking_plaintext_to_tls_bookies_is_told_which_bookies_and_why(
    pki: Pki, tmp_path: Path
) -> None:
    # a cluster of its own (another etcd): the module's TLS broker must not own the topic
    etcd_tls = EtcdTls(
        cert_file=pki.etcd_secret.cert_file,
        key_file=pki.etcd_secret.key_file,
        ca_file=pki.etcd_secret.ca_file,
        client_cert_file=pki.client.cert_file,
        client_key_file=pki.client.key_file,
    )
    with started(EtcdServer(tmp_path / "etcd", tls=etcd_tls)) as etcd:
        bookies = [BookieProc(etcd.url, tmp_path, extra_args=bookie_args(pki)) for _ in range(2)]
        secret = pki.broker_secret
        broker = BrokerProc(
            etcd.url,
            tmp_path,
            ensemble=(2, 2, 2),
            extra_args=[  # TLS to etcd, plaintext to bookies
                f"--metadata-tls-trust-certs-file={secret.ca_file}",
                f"--metadata-tls-certificate-file={secret.cert_file}",
                f"--metadata-tls-key-file={secret.key_file}",
            ],
        )
        try:
            for bookie in bookies:
                bookie.start()
            broker.start()
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            try:
                with pytest.raises(pulsar.PulsarException):  # the client times out retrying
                    client.create_producer("persistent://public/default/tls-hops-plain-broker")
            finally:
                client.close()
            log = broker.log()
            for bookie in bookies:
                assert (
                    f"bookie {bookie.bookie_id} serves TLS but this client is configured for "
                    "plaintext" in log
                )
            # the producer's failure names them too
            assert "which serve TLS while this client speaks plaintext" in log
        finally:
            broker.stop()
            for bookie in bookies:
                bookie.stop()
