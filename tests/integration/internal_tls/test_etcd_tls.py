"""Processes -> etcd over TLS with client certificates (issue 21, "every other hop"): a real
etcd with ``--client-cert-auth``; the store works with the trusted client certificate and is
refused, with gRPC's reason in the error, without one, with a certificate from another CA,
in plaintext, and when it does not trust etcd's own certificate; a bookie etcd does not
trust exits at startup saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.common import grpctls, tlsfiles
from magnetar.metadata import api, open_store
from tests.integration.internal_tls.conftest import Pki
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.etcd

_SHORT = "timeout=2"


async def test_the_store_works_over_mutual_tls(pki: Pki, tls_etcd: EtcdServer) -> None:
    store = await open_store(f"{tls_etcd.url}&{_SHORT}", tls=pki.metadata_tls())
    try:
        version = await store.put("/tls-test/key", b"over tls")
        record = await store.get("/tls-test/key")
        assert record is not None
        assert (record.value, record.version) == (b"over tls", version)
    finally:
        await store.close()


def _no_client_certificate(pki: Pki) -> grpctls.ClientTlsConfig:
    return grpctls.ClientTlsConfig(files=tlsfiles.TlsFiles(trust_file=pki.client.ca_file))


def _untrusted_client_certificate(pki: Pki) -> grpctls.ClientTlsConfig:
    files = tlsfiles.TlsFiles(
        cert_file=pki.untrusted.cert_file,
        key_file=pki.untrusted.key_file,
        trust_file=pki.client.ca_file,  # trusts etcd; etcd does not trust it
    )
    return grpctls.ClientTlsConfig(files=files)


def _trusting_another_ca(pki: Pki) -> grpctls.ClientTlsConfig:
    files = tlsfiles.TlsFiles(
        cert_file=pki.client.cert_file,
        key_file=pki.client.key_file,
        trust_file=pki.untrusted.ca_file,  # etcd's certificate is not from this CA
    )
    return grpctls.ClientTlsConfig(files=files)


@pytest.mark.parametrize(
    "settings",
    [_no_client_certificate, _untrusted_client_certificate, _trusting_another_ca],
    ids=["no-client-certificate", "untrusted-client-certificate", "untrusted-server"],
)
async def test_a_client_etcd_and_it_do_not_trust_is_refused(
    pki: Pki, tls_etcd: EtcdServer, settings: object
) -> None:
    assert callable(settings)
    with pytest.raises(api.StoreUnavailableError) as refused:
        await open_store(f"{tls_etcd.url}&{_SHORT}", tls=settings(pki))
    message = str(refused.value)
    assert str(tls_etcd.client_port) in message
    assert "last error" in message, message  # gRPC's reason (handshake failed) is in it


async def test_a_plaintext_client_is_refused(tls_etcd: EtcdServer) -> None:
    with pytest.raises(api.StoreUnavailableError, match="last error"):
        await open_store(f"etcd://{tls_etcd.endpoint}?{_SHORT}")


async def test_tls_settings_for_an_embedded_store_are_refused(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="embedded"):
        await open_store(f"embedded://{tmp_path}/meta", tls=pki.metadata_tls())


def test_a_bookie_etcd_does_not_trust_refuses_to_start_naming_why(
    pki: Pki, tls_etcd: EtcdServer, tmp_path: Path
) -> None:
    untrusted = [
        f"--metadata-tls-trust-certs-file={pki.client.ca_file}",
        f"--metadata-tls-certificate-file={pki.untrusted.cert_file}",
        f"--metadata-tls-key-file={pki.untrusted.key_file}",
    ]
    bookie = BookieProc(f"{tls_etcd.url}&timeout=2", tmp_path, extra_args=untrusted)
    with pytest.raises(RuntimeError, match="exited with 1") as refused:
        bookie.start()
    bookie.stop()
    assert "cannot reach the metadata store" in str(refused.value)
    assert "last error" in str(refused.value)
