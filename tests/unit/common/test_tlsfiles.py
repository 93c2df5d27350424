"""``common.tlsfiles``: reading PEM files, refusing unusable ones by name, and noticing a
rotation (an atomic swap, as Kubernetes does for a Secret) at most every check interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.common import tlsfiles
from tests.support.certs import CA, MountedSecret


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _files(secret: MountedSecret) -> tlsfiles.TlsFiles:
    return tlsfiles.TlsFiles(
        cert_file=secret.cert_file, key_file=secret.key_file, trust_file=secret.ca_file
    )


def test_a_rotation_is_seen_once_and_only_after_the_check_interval(tmp_path: Path) -> None:
    ca = CA()
    secret = MountedSecret(tmp_path / "secret")
    first = ca.issue("bookie")
    secret.write(first, ca.cert_pem)
    clock = Clock()
    watched = tlsfiles.Watched(_files(secret), check_interval=5.0, clock=clock)
    assert watched.current.cert == first.cert_pem
    assert watched.poll() is None

    second = ca.issue("bookie")
    secret.write(second, ca.cert_pem)
    clock.now += 4.0
    assert watched.poll() is None  # not looked at yet
    clock.now += 1.0
    bundle = watched.poll()
    assert bundle is not None
    assert (bundle.cert, bundle.key) == (second.cert_pem, second.key_pem)
    assert watched.generation == 1
    clock.now += 5.0
    assert watched.poll() is None  # reported once


def test_the_same_content_written_again_is_not_a_rotation(tmp_path: Path) -> None:
    ca = CA()
    secret = MountedSecret(tmp_path / "secret")
    leaf = ca.issue("bookie")
    secret.write(leaf, ca.cert_pem)
    clock = Clock()
    watched = tlsfiles.Watched(_files(secret), check_interval=0.0, clock=clock)
    secret.write(leaf, ca.cert_pem)  # new inode, same bytes
    assert watched.poll() is None
    assert watched.generation == 0


def test_a_half_written_file_keeps_the_previous_bundle_until_it_is_whole(tmp_path: Path) -> None:
    ca = CA()
    leaf = ca.issue("bookie")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    clock = Clock()
    watched = tlsfiles.Watched(
        tlsfiles.TlsFiles(cert_file=cert, key_file=key), check_interval=1.0, clock=clock
    )
    other = ca.issue("bookie")
    cert.write_bytes(other.cert_pem[:20])  # caught mid-write: no whole PEM block
    clock.now += 1.0
    assert watched.poll() is None
    assert watched.current.cert == leaf.cert_pem
    cert.write_bytes(other.cert_pem)
    key.write_bytes(other.key_pem)
    clock.now += 1.0
    bundle = watched.poll()
    assert bundle is not None and bundle.cert == other.cert_pem


def test_unusable_files_are_refused_by_name(tmp_path: Path) -> None:
    ca = CA()
    leaf = ca.issue("bookie")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    with pytest.raises(tlsfiles.TlsFileError, match="no private key file"):
        tlsfiles.TlsFiles(cert_file=cert)
    with pytest.raises(tlsfiles.TlsFileError, match=r"missing\.pem"):
        tlsfiles.read(tlsfiles.TlsFiles(trust_file=tmp_path / "missing.pem"))
    with pytest.raises(tlsfiles.TlsFileError, match="no PEM certificate"):
        tlsfiles.read(tlsfiles.TlsFiles(cert_file=key, key_file=key))
    with pytest.raises(tlsfiles.TlsFileError, match="no PEM private key"):
        tlsfiles.read(tlsfiles.TlsFiles(cert_file=cert, key_file=cert))
    encrypted = tmp_path / "enc.key"
    encrypted.write_bytes(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n")
    with pytest.raises(tlsfiles.TlsFileError, match="encrypted"):
        tlsfiles.read(tlsfiles.TlsFiles(cert_file=cert, key_file=encrypted))


def test_a_key_that_does_not_belong_to_the_certificate_is_refused_and_not_rotated_to(
    tmp_path: Path,
) -> None:
    ca = CA()
    leaf, other = ca.issue("bookie"), ca.issue("bookie")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(other.key_pem)
    with pytest.raises(tlsfiles.TlsFileError, match="must belong to the certificate"):
        tlsfiles.read(tlsfiles.TlsFiles(cert_file=cert, key_file=key))

    key.write_bytes(leaf.key_pem)
    clock = Clock()
    watched = tlsfiles.Watched(
        tlsfiles.TlsFiles(cert_file=cert, key_file=key), check_interval=1.0, clock=clock
    )
    cert.write_bytes(other.cert_pem)  # a rotation caught between the certificate and the key
    clock.now += 1.0
    assert watched.poll() is None
    assert watched.current.cert == leaf.cert_pem
    key.write_bytes(other.key_pem)
    clock.now += 1.0
    bundle = watched.poll()
    assert bundle is not None and (bundle.cert, bundle.key) == (other.cert_pem, other.key_pem)
