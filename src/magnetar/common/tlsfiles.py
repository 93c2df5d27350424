"""The PEM files of a TLS identity and trust, read once and re-read when they change on disk.

Why this module exists: cert-manager (or the operator's own CA) rotates certificates by
rewriting the files a Secret is mounted as, and every TLS hop of Magnetar (the bookie's gRPC
server, the broker's channels to bookies, every process's channels to etcd, the broker's own
listeners) must pick the new files up without a restart and without reading them on every
handshake. One place reads them and says when they changed:

* :class:`TlsFiles` names the files (certificate chain, private key, trusted CAs), with the
  checks that give a clear error at startup (a key without a certificate, a missing file, a
  file that holds no PEM block of the expected kind);
* :func:`read` returns their bytes as a :class:`PemBundle` with a content fingerprint, after
  checking with the standard library's TLS that the key belongs to the certificate and the
  CA file parses (so a mismatched pair is refused at startup, and a rotation caught between
  the certificate and the key is not taken);
* :class:`Watched` keeps the current bundle and, at most every ``check_interval`` seconds,
  compares the files' (inode, size, mtime); only when those moved does it read them again, and
  only a different content fingerprint counts as a rotation (a touch is not one).

A rotation must replace the files atomically, as Kubernetes does for a mounted Secret (the
whole directory is swapped through its ``..data`` symlink) and as ``mv`` of one file does. A
file that cannot be read or holds no PEM block (caught half-written) keeps the previous
bundle in use, is logged, and is read again at the next check.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CHECK_INTERVAL = 1.0
"""Seconds between two looks at the files' metadata (a ``stat`` of each)."""


class TlsFileError(ValueError):
    """A TLS file Magnetar cannot use: the message names the file and the problem."""


_CERT_MARK = b"-----BEGIN CERTIFICATE-----"
_KEY_MARKS = (
    b"-----BEGIN PRIVATE KEY-----",
    b"-----BEGIN RSA PRIVATE KEY-----",
    b"-----BEGIN EC PRIVATE KEY-----",
)
_ENCRYPTED_KEY_MARK = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsFiles:
    """Where one side of a TLS hop finds its PEM files.

    ``cert_file`` + ``key_file``: this side's identity (a server's certificate, or a client's
    certificate for mutual TLS), given together or not at all; ``trust_file``: the CA
    certificates the peer's certificate must chain to (None: the system's roots for a
    client; no client verification for a server)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    trust_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (
                ("certificate", "private key")
                if self.cert_file is not None
                else ("private key", "certificate")
            )
            raise TlsFileError(f"a TLS {given} file is set but no {missing} file")

    @property
    def has_identity(self) -> bool:
        return self.cert_file is not None

    def paths(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert_file, self.key_file, self.trust_file) if p is not None)


@dataclass(frozen=True, slots=True)
class PemBundle:
    """The files' bytes at one moment; ``fingerprint`` is a SHA-256 over all of them."""

    cert: bytes | None
    key: bytes | None
    trust: bytes | None
    fingerprint: str


def _read_one(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TlsFileError(f"TLS {what} file {path}: {err.strerror or err}") from None
    if what == "private key":
        if _ENCRYPTED_KEY_MARK in data:
            raise TlsFileError(
                f"TLS private key file {path}: the key is encrypted; Magnetar reads "
                "unencrypted PEM keys only (a key store password is not supported)"
            )
        if not any(mark in data for mark in _KEY_MARKS):
            raise TlsFileError(f"TLS private key file {path}: no PEM private key in it")
    elif _CERT_MARK not in data:
        raise TlsFileError(f"TLS {what} file {path}: no PEM certificate in it")
    return data


def _read_bytes(files: TlsFiles) -> PemBundle:
    cert = _read_one(files.cert_file, "certificate") if files.cert_file else None
    key = _read_one(files.key_file, "private key") if files.key_file else None
    trust = _read_one(files.trust_file, "trusted CA certificates") if files.trust_file else None
    digest = hashlib.sha256()
    for part in (cert, key, trust):
        digest.update(len(part or b"").to_bytes(8, "big"))
        digest.update(part or b"")
    return PemBundle(cert, key, trust, digest.hexdigest())


def _check_usable(files: TlsFiles) -> None:
    """Load the files into a throwaway TLS context: the key must belong to the certificate
    and the CA file must parse."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if files.cert_file is not None and files.key_file is not None:
        try:
            context.load_cert_chain(files.cert_file, files.key_file)
        except ssl.SSLError as err:
            raise TlsFileError(
                f"TLS certificate {files.cert_file} and private key {files.key_file}: "
                f"{err.reason or err} (the key must belong to the certificate)"
            ) from None
    if files.trust_file is not None:
        try:
            context.load_verify_locations(cafile=files.trust_file)
        except ssl.SSLError as err:
            raise TlsFileError(
                f"TLS trusted CA certificates file {files.trust_file}: {err.reason or err}"
            ) from None


def read(files: TlsFiles) -> PemBundle:
    """The files' bytes now, checked usable together; raises TlsFileError naming a missing
    or unusable file (or a pair that does not match)."""
    bundle = _read_bytes(files)
    _check_usable(files)
    if _read_bytes(files).fingerprint != bundle.fingerprint:  # changed while being checked
        raise TlsFileError(
            "TLS files " + ", ".join(str(p) for p in files.paths()) + " changed while read"
        )
    return bundle


_Signature = tuple[tuple[int, int, int, int] | None, ...]


def _signature(files: TlsFiles) -> _Signature:
    """(device, inode, size, mtime) of each file, following symlinks; None for one missing."""
    out: list[tuple[int, int, int, int] | None] = []
    for path in files.paths():
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class Watched:
    """The current :class:`PemBundle` of ``files``, re-read when they change on disk.

    The constructor reads the files (TlsFileError when they are unusable: a process refuses
    to start on them). :meth:`poll` is cheap enough for every new connection: it looks at
    the files' metadata at most every ``check_interval`` seconds and returns the new bundle
    once after each rotation, None otherwise. ``generation`` counts the rotations seen."""

    def __init__(
        self,
        files: TlsFiles,
        *,
        check_interval: float = DEFAULT_CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if check_interval < 0:
            raise ValueError(f"TLS files check interval must be >= 0, got {check_interval}")
        self.files = files
        self.check_interval = check_interval
        self._clock = clock
        self._signature = _signature(files)
        self.current = read(files)
        self.generation = 0
        self._next_check = clock() + check_interval

    def poll(self) -> PemBundle | None:
        """The new bundle if the files changed since the last poll that returned one."""
        now = self._clock()
        if now < self._next_check:
            return None
        self._next_check = now + self.check_interval
        signature = _signature(self.files)
        if signature == self._signature:
            return None
        try:
            bundle = read(self.files)
        except TlsFileError as err:
            log.warning("TLS files changed but cannot be used yet (keeping the previous): %s", err)
            return None
        self._signature = signature
        if bundle.fingerprint == self.current.fingerprint:
            return None
        self.current = bundle
        self.generation += 1
        log.info(
            "TLS files %s rotated (generation %d)",
            ", ".join(str(p) for p in self.files.paths()),
            self.generation,
        )
        return bundle
