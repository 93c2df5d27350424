"""Certificates for TLS tests: a CA and leaf certificates made with ``cryptography``, written
as PEM files the way Kubernetes mounts a Secret (so a rotation can be done the same way).

Why this module exists: the TLS tests need a trusted CA, server certificates valid for
127.0.0.1, client certificates, a second CA nobody trusts, and a rotation that replaces the
files atomically. Kubernetes mounts a Secret as ``dir/..data -> ..<timestamp>/`` with
``dir/tls.crt -> ..data/tls.crt``; :meth:`MountedSecret.write` swaps ``..data`` with one
``rename``, so a reader sees the old pair or the new pair, never a mix.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

# cryptography imports its OpenSSL backend lazily, at the first EC signature. Imported here, at
# collection: on Python 3.11 an import under way when the garbage collector runs a finalizer
# that imports too fails with KeyError(<thread id>) (CPython gh-91351, fixed in 3.12), which
# a full `tests/unit` run hit at the first CA() of tests/unit/common/test_tlsfiles.py.
import cryptography.hazmat.backends.openssl.backend  # noqa: F401
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class Leaf:
    """A certificate and its key, as PEM."""

    cert_pem: bytes
    key_pem: bytes
    serial: int


class CA:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str = "magnetar-test-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str) -> Leaf:
        """A certificate for ``common_name``, valid for 127.0.0.1 and localhost, usable by a
        server and by a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        return Leaf(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key), serial)


def serial_of(cert_pem_or_der: bytes) -> int:
    """The serial number of a PEM or DER certificate."""
    if cert_pem_or_der.startswith(b"-----"):
        return int(x509.load_pem_x509_certificate(cert_pem_or_der).serial_number)
    return int(x509.load_der_x509_certificate(cert_pem_or_der).serial_number)


class MountedSecret:
    """A directory laid out as Kubernetes mounts a TLS Secret: ``tls.crt``, ``tls.key`` and
    ``ca.crt`` are symlinks through ``..data`` to a versioned directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._version = 0

    @property
    def cert_file(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.dir / "tls.key"

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    def write(self, leaf: Leaf, ca_pem: bytes) -> None:
        """Publish ``leaf`` and the CA atomically (one rename of ``..data``)."""
        self._version += 1
        version_dir = self.dir / f"..v{self._version}"
        version_dir.mkdir()
        (version_dir / "tls.crt").write_bytes(leaf.cert_pem)
        (version_dir / "tls.key").write_bytes(leaf.key_pem)
        (version_dir / "ca.crt").write_bytes(ca_pem)
        tmp_link = self.dir / "..data_tmp"
        tmp_link.symlink_to(version_dir.name)
        os.replace(tmp_link, self.dir / "..data")
        for name in ("tls.crt", "tls.key", "ca.crt"):
            link = self.dir / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
