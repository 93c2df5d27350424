"""The operator's own certificate authority: a CA, leaf certificates signed by it, and the
checks that decide when a certificate must be issued again.

Why: a PulsarCluster with ``spec.tls`` and no cert-manager issuer gets its certificates from
the operator (docs/kubernetes.md, "TLS and authentication"). Pure functions over PEM bytes
with the clock passed in, so issuance and renewal are unit-tested without a cluster; the
reconcile step (``security``) stores the results in Secrets.

Keys are ECDSA P-256 (fast to generate; read by OpenSSL, BoringSSL and Go alike); leaf
certificates carry both serverAuth and clientAuth, as each component is a server to some
peers and a client of others (a broker serves clients and is a client of bookies and etcd).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = dt.timedelta(days=3650)
BACKDATE = dt.timedelta(minutes=5)
"""notBefore is set this far back, so a node whose clock is a little behind accepts a
certificate issued a moment ago."""


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate (or chain) and its PEM private key (PKCS#8, unencrypted)."""

    cert: bytes
    key: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Magnetar"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def create_ca(
    common_name: str, *, now: dt.datetime, lifetime: dt.timedelta = CA_LIFETIME
) -> KeyPair:
    """A self-signed CA certificate and its key."""
    key = _new_key()
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue(
    ca: KeyPair, *, common_name: str, names: Sequence[str], now: dt.datetime, lifetime: dt.timedelta
) -> KeyPair:
    """A leaf certificate for ``names`` (DNS names or IP addresses), signed by ``ca``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey), "the operator's CA keys are EC"
    key = _new_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(_san(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def names_of(cert_pem: bytes) -> set[str]:
    """The DNS names and IP addresses a certificate is for (its subjectAltName)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def not_after(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    return cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def why_reissue(
    current: KeyPair | None,
    *,
    ca_cert: bytes,
    names: Sequence[str],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> str | None:
    """Why ``current`` must be replaced by a new certificate, or None when it is good:
    missing or unreadable, its key not its certificate's, not signed by the current CA
    (after a CA renewal), for other names (a bookie added), or within ``renew_before`` of
    its expiry."""
    if current is None or not current.cert or not current.key:
        return "missing"
    try:
        if not key_matches(current.cert, current.key):
            return "the key does not belong to the certificate"
        if not signed_by(current.cert, ca_cert):
            return "not signed by the current CA"
        have = names_of(current.cert)
        if have != set(names):
            return f"names changed ({', '.join(sorted(set(names) ^ have))})"
        left = not_after(current.cert) - now
    except ValueError as err:
        return f"unreadable ({err})"
    if left <= renew_before:
        margin = int(renew_before.total_seconds())
        return f"expires in {int(left.total_seconds())}s (renewal margin {margin}s)"
    return None


def ca_bundle(current_ca: bytes, previous: bytes | None, *, now: dt.datetime) -> bytes:
    """The trust bundle: the current CA, plus the previous one while it is still valid (so
    certificates it signed keep verifying until they are reissued)."""
    if not previous or previous == current_ca:
        return current_ca
    try:
        if x509.load_pem_x509_certificate(previous).not_valid_after_utc <= now:
            return current_ca
    except ValueError:
        return current_ca
    return current_ca + previous
