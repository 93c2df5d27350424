"""TLS settings into contexts (magnetar.security.tls): client-certificate modes, protocols,
clear errors for bad files, and the in-place refresh after a rotation (a half-written
rotation keeps the old certificate until the pair matches)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509

from magnetar.security import tls
from magnetar.security.metrics import REGISTRY
from tests.support.pki import CertificateAuthority


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


def test_server_context_modes(ca: CertificateAuthority) -> None:
    pair = ca.issue("localhost", server=True)
    base = tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key))
    assert tls.server_context(base).verify_mode == ssl.CERT_NONE
    trusted = tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key), trust=str(ca.ca_file))
    assert tls.server_context(trusted).verify_mode == ssl.CERT_OPTIONAL
    required = tls.TlsSettings(
        certificate=str(pair.cert),
        key=str(pair.key),
        trust=str(ca.ca_file),
        require_client_cert=True,
        protocols=tls.parse_protocols("TLSv1.3"),
    )
    ctx = tls.server_context(required)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(tls.TlsConfigError, match="needs tlsTrustCertsFilePath"):
        tls.server_context(
            tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key), require_client_cert=True)
        )
    with pytest.raises(tls.TlsConfigError, match="tlsCertificateFilePath"):
        tls.server_context(tls.TlsSettings(certificate=str(pair.cert), key=str(ca.ca_file)))
    with pytest.raises(ValueError, match="unsupported TLS protocol"):
        tls.parse_protocols("TLSv1.3,SSLv3")
    with pytest.raises(tls.TlsConfigError, match="tlsCiphers"):
        tls.server_context(
            tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key), ciphers=("NOPE",))
        )


def test_refresh_after_rotation(ca: CertificateAuthority) -> None:
    pair = ca.issue("localhost", server=True, file_stem="broker")
    server = tls.ServerTls(tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key)))
    ctx = server.context()
    assert server.refresh() is False, "nothing changed"
    old_key = pair.key.read_bytes()
    ca.issue("localhost", server=True, file_stem="broker")
    # half-written: the new certificate with the old key does not load; the old one stays
    new_key = pair.key.read_bytes()
    pair.key.write_bytes(old_key)
    assert server.refresh() is False
    pair.key.write_bytes(new_key)
    assert server.refresh() is True and server.reloads == 1
    assert ctx in server.contexts


def test_peer_common_name() -> None:
    cert = {"subject": ((("countryName", "NL"),), (("commonName", "role-a"),))}
    assert tls.peer_common_name(cert) == "role-a"
    assert tls.peer_common_name({}) is None
    assert tls.peer_common_name(None) is None


def test_serving_certificate_expiry_is_exported(ca: CertificateAuthority) -> None:
    """pulsar_tls_certificate_expiration_timestamp_seconds{certificate}: the leaf's
    notAfter, set when the listener's TLS is built and again after a rotation."""
    pair = ca.issue("localhost", server=True, file_stem="expiring")

    def exported() -> float | None:
        return REGISTRY.get_sample_value(
            "pulsar_tls_certificate_expiration_timestamp_seconds", {"certificate": str(pair.cert)}
        )

    def not_after() -> float:
        leaf = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        return leaf.not_valid_after_utc.timestamp()

    server = tls.ServerTls(tls.TlsSettings(certificate=str(pair.cert), key=str(pair.key)))
    assert exported() == not_after() > time.time()
    ca.issue("localhost", server=True, file_stem="expiring")
    assert server.refresh() is True
    assert exported() == not_after()
    with pytest.raises(tls.TlsConfigError, match="tlsCertificateFilePath"):
        tls.not_after(str(pair.key))
