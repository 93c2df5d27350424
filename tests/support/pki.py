"""A certificate authority whose certificates are files, for the security tests: a CA file,
server certificates for loopback names and client certificates whose CN is a role, written as
PEM (the certificates themselves are :mod:`tests.support.certs`'), so TLS and TLS
authentication run for real with no certificate shipped in the repository."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support import certs

serial_of = certs.serial_of


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "magnetar-test-ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = certs.CA(name)
        self.cert = self.ca.cert
        self.ca_file = self.dir / f"{name}.pem"
        self.ca_file.write_bytes(self.ca.cert_pem)

    def issue(self, cn: str, *, server: bool = False, file_stem: str | None = None) -> Pair:
        """A certificate for ``cn`` signed by this CA (valid for localhost and 127.0.0.1, for
        a server and a client: ``server`` is kept for the callers' reading), written to
        ``<stem>.cert.pem`` / ``<stem>.key.pem`` (replacing them): the key first, so a reader
        that sees the new certificate finds its key."""
        del server
        leaf = self.ca.issue(cn)
        stem = file_stem or cn
        pair = Pair(self.dir / f"{stem}.cert.pem", self.dir / f"{stem}.key.pem")
        pair.key.write_bytes(leaf.key_pem)
        pair.cert.write_bytes(leaf.cert_pem)
        return pair
