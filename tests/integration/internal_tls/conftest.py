"""A cluster whose internal hops all run over mutual TLS: etcd with ``--client-cert-auth``,
bookies serving gRPC with TLS and requiring client certificates, a broker reaching both with
its own client certificate. The certificates are made by a test CA (``tests.support.certs``);
the bookies' and the broker's live in directories laid out as Kubernetes mounts a Secret, so
a test rotates them the way cert-manager does."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.common import grpctls, tlsfiles
from tests.support.bookies import BookieProc
from tests.support.certs import CA, Leaf, MountedSecret
from tests.support.etcd import EtcdServer, EtcdTls, etcd_available
from tests.support.procs import started
from tests.support.standalone import BrokerProc

pytestmark = pytest.mark.etcd

TLS_REFRESH_S = 0.2
"""How often the processes look at their certificate files (a rotation shows up quickly)."""


@dataclass
class Pki:
    """The test CA, one nobody trusts, and the files each party reads."""

    ca: CA
    stranger: CA
    base: Path
    etcd_secret: MountedSecret
    bookie_secret: MountedSecret
    broker_secret: MountedSecret
    client: MountedSecret
    """A client certificate from the trusted CA, for the tests' own connections."""
    untrusted: MountedSecret
    """A client certificate from the other CA (its ca.crt is that CA too)."""

    def files(self, secret: MountedSecret) -> tlsfiles.TlsFiles:
        return tlsfiles.TlsFiles(
            cert_file=secret.cert_file, key_file=secret.key_file, trust_file=secret.ca_file
        )

    def metadata_tls(self, secret: MountedSecret | None = None) -> grpctls.ClientTlsConfig:
        return grpctls.ClientTlsConfig(files=self.files(secret or self.client))

    def rotate(self, secret: MountedSecret, common_name: str) -> Leaf:
        leaf = self.ca.issue(common_name)
        secret.write(leaf, self.ca.cert_pem)
        return leaf


def _secret(directory: Path, ca: CA, common_name: str) -> MountedSecret:
    secret = MountedSecret(directory)
    secret.write(ca.issue(common_name), ca.cert_pem)
    return secret


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    base = tmp_path_factory.mktemp("pki")
    ca, stranger = CA("magnetar-test-ca"), CA("somebody-elses-ca")
    return Pki(
        ca=ca,
        stranger=stranger,
        base=base,
        etcd_secret=_secret(base / "etcd", ca, "etcd"),
        bookie_secret=_secret(base / "bookie", ca, "bookie"),
        broker_secret=_secret(base / "broker", ca, "broker"),
        client=_secret(base / "client", ca, "test-client"),
        untrusted=_secret(base / "untrusted", stranger, "intruder"),
    )


@pytest.fixture(scope="module")
def tls_etcd(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (run `make setup`)")
    tls = EtcdTls(
        cert_file=pki.etcd_secret.cert_file,
        key_file=pki.etcd_secret.key_file,
        ca_file=pki.etcd_secret.ca_file,
        client_cert_file=pki.client.cert_file,
        client_key_file=pki.client.key_file,
    )
    with started(EtcdServer(tmp_path_factory.mktemp("tls-etcd"), tls=tls)) as server:
        yield server


def _metadata_flags(secret: MountedSecret) -> list[str]:
    return [
        f"--metadata-tls-trust-certs-file={secret.ca_file}",
        f"--metadata-tls-certificate-file={secret.cert_file}",
        f"--metadata-tls-key-file={secret.key_file}",
    ]


def bookie_args(pki: Pki) -> list[str]:
    """A bookie serving TLS (client certificates required) that reaches etcd over TLS."""
    secret = pki.bookie_secret
    return [
        f"--tls-certificate-file={secret.cert_file}",
        f"--tls-key-file={secret.key_file}",
        f"--tls-trust-certs-file={secret.ca_file}",
        "--tls-client-authentication=true",
        f"--tls-cert-refresh-check={TLS_REFRESH_S}",
        *_metadata_flags(secret),
    ]


@dataclass
class TlsCluster:
    etcd: EtcdServer
    bookies: list[BookieProc]
    broker: BrokerProc


@pytest.fixture(scope="module")
def tls_cluster(
    pki: Pki, tls_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsCluster]:
    """Two TLS bookies (client certificates required) and a broker writing to both (E=Wq=Aq=2)
    over TLS with its client certificate; every process reaches etcd over mutual TLS (the
    bookies with flags, the broker with Pulsar's https URL and etcd settings file)."""
    base = tmp_path_factory.mktemp("tls-cluster")
    bookie_flags = bookie_args(pki)
    broker_secret = pki.broker_secret
    etcd_settings = base / "etcd.yaml"
    etcd_settings.write_text(
        "useTls: true\n"
        f"tlsTrustCertsFilePath: {broker_secret.ca_file}\n"
        f"tlsCertificateFilePath: {broker_secret.cert_file}\n"
        f"tlsKeyFilePath: {broker_secret.key_file}\n"
    )
    broker_flags = [
        f"--metadata-config-path={etcd_settings}",
        "--bookkeeper-tls-client-authentication=true",
        f"--bookkeeper-tls-certificate-file={broker_secret.cert_file}",
        f"--bookkeeper-tls-key-file={broker_secret.key_file}",
        f"--bookkeeper-tls-trust-certs-file={broker_secret.ca_file}",
        f"--bookkeeper-tls-cert-refresh-check={TLS_REFRESH_S}",
    ]
    bookies = [BookieProc(tls_etcd.url, base, extra_args=bookie_flags) for _ in range(2)]
    broker: BrokerProc | None = None
    try:
        for bookie in bookies:
            bookie.start()
        broker = BrokerProc(
            f"etcd:https://{tls_etcd.endpoint}",
            base,
            ensemble=(2, 2, 2),
            extra_args=broker_flags,
        ).start()
        yield TlsCluster(tls_etcd, bookies, broker)
    finally:
        if broker is not None:
            broker.stop()
        for bookie in bookies:
            bookie.stop()
