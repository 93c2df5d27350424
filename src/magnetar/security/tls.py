"""TLS contexts from Pulsar's settings, re-read when their files change.

Why this module exists: every TLS listener (the binary protocol's ``brokerServicePortTls``,
the HTTP ``webServicePortTls``, the proxy's) and every TLS client inside Magnetar builds its
``ssl.SSLContext`` from the same few keys -- ``tlsCertificateFilePath``, ``tlsKeyFilePath``,
``tlsTrustCertsFilePath``, ``tlsRequireTrustedClientCertOnConnect``,
``tlsAllowInsecureConnection``, ``tlsProtocols``, ``tlsCiphers`` -- and cert-manager rotates
those files under a running process.

:class:`ServerTls` holds one server context and re-reads the certificate chain and trust
files into it when their content changes (:meth:`ServerTls.refresh`, called periodically by
the process): OpenSSL applies a context's new certificate to handshakes that start after the
change, so established connections are never dropped.

Client certificates: with a trust file the server asks for one; with
``tlsRequireTrustedClientCertOnConnect`` a handshake without a trusted one fails. Unlike
Pulsar, ``tlsAllowInsecureConnection=true`` does not make the server accept *untrusted*
client certificates (a certificate that does not verify never yields a role): it only
matters on the client side, where it skips verifying the server (docs/security.md).
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography import x509

from magnetar.security import metrics

log = logging.getLogger(__name__)

_VERSIONS: Final = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(ValueError):
    """Settings that cannot make a context; the message names the setting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    certificate: str | None = None
    """tlsCertificateFilePath: PEM certificate chain (leaf first)."""
    key: str | None = None
    """tlsKeyFilePath: PEM private key (PKCS#8 or traditional)."""
    trust: str | None = None
    """tlsTrustCertsFilePath: PEM CA certificates the peer's certificate must chain to."""
    require_client_cert: bool = False
    """tlsRequireTrustedClientCertOnConnect."""
    allow_insecure: bool = False
    """tlsAllowInsecureConnection (a client skips verifying the server)."""
    protocols: tuple[str, ...] = ()
    """tlsProtocols: e.g. ("TLSv1.3", "TLSv1.2"); empty: the library's defaults."""
    ciphers: tuple[str, ...] = ()
    """tlsCiphers (OpenSSL names); empty: the library's defaults."""
    verify_hostname: bool = True
    """Client side: check the server certificate's name (the clients' tlsHostnameVerification)."""

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.certificate, self.key, self.trust) if f)


def parse_protocols(text: str) -> tuple[str, ...]:
    """tlsProtocols (comma-separated): each one of TLSv1.2 / TLSv1.3."""
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    for name in names:
        if name not in _VERSIONS:
            raise ValueError(f"unsupported TLS protocol {name!r}: one of {', '.join(_VERSIONS)}")
    return names


def parse_ciphers(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip())


def _apply_common(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.protocols:
        versions = sorted(_VERSIONS[p] for p in settings.protocols)
        ctx.minimum_version = versions[0]
        ctx.maximum_version = versions[-1]
    if settings.ciphers:
        try:
            ctx.set_ciphers(":".join(settings.ciphers))
        except ssl.SSLError as err:
            raise TlsConfigError(f"tlsCiphers {','.join(settings.ciphers)}: {err}") from None


def _load_chain(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    assert settings.certificate and settings.key
    try:
        ctx.load_cert_chain(settings.certificate, settings.key)
    except (OSError, ssl.SSLError) as err:
        raise TlsConfigError(
            f"tlsCertificateFilePath {settings.certificate} / tlsKeyFilePath {settings.key}: {err}"
        ) from None


def _load_trust(ctx: ssl.SSLContext, trust: str) -> None:
    try:
        ctx.load_verify_locations(cafile=trust)
    except (OSError, ssl.SSLError) as err:
        raise TlsConfigError(f"tlsTrustCertsFilePath {trust}: {err}") from None


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context: its certificate, client certificates asked for when a trust file
    is given (required with ``require_client_cert``)."""
    if not settings.certificate or not settings.key:
        raise TlsConfigError("a TLS listener needs tlsCertificateFilePath and tlsKeyFilePath")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_common(ctx, settings)
    _load_chain(ctx, settings)
    if settings.trust:
        _load_trust(ctx, settings.trust)
        ctx.verify_mode = ssl.CERT_REQUIRED if settings.require_client_cert else ssl.CERT_OPTIONAL
    elif settings.require_client_cert:
        raise TlsConfigError(
            "tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath"
        )
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client context: the server verified against ``trust`` (or the system's CAs) unless
    ``allow_insecure``; a client certificate presented when one is configured."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_common(ctx, settings)
    if settings.allow_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = settings.verify_hostname
        if settings.trust:
            _load_trust(ctx, settings.trust)
        else:
            ctx.load_default_certs()
    if settings.certificate and settings.key:
        _load_chain(ctx, settings)
    return ctx


def not_after(certificate: str) -> float:
    """When the first (leaf) certificate of the PEM file ``certificate`` expires, epoch
    seconds (TlsConfigError naming the file when it holds none)."""
    try:
        leaf = x509.load_pem_x509_certificate(Path(certificate).read_bytes())
    except (OSError, ValueError) as err:
        raise TlsConfigError(f"tlsCertificateFilePath {certificate}: {err}") from None
    return leaf.not_valid_after_utc.timestamp()


def fingerprint(paths: tuple[str, ...]) -> str:
    """A digest of the files' contents (a missing file counts as empty)."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            digest.update(Path(path).read_bytes())
        except OSError:
            digest.update(b"\0missing\0" + path.encode())
    return digest.hexdigest()


class ServerTls:
    """The server contexts of a process's TLS listeners (one per listener, so each counts
    its own refusals), refreshed in place together."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.contexts: list[ssl.SSLContext] = []
        server_context(settings)  # fail at startup on bad settings, before any listener
        self._seen = fingerprint(settings.files())
        self.reloads = 0
        self._export_expiry()

    def _export_expiry(self) -> None:
        """``pulsar_tls_certificate_expiration_timestamp_seconds``: the serving certificate's
        notAfter, for the certificate-expiry alert."""
        certificate = self.settings.certificate
        assert certificate is not None
        metrics.TLS_CERT_EXPIRY.labels(certificate).set(not_after(certificate))

    def context(self) -> ssl.SSLContext:
        """A new context from the current files, refreshed with the others from now on."""
        ctx = server_context(self.settings)
        self.contexts.append(ctx)
        return ctx

    def refresh(self) -> bool:
        """Re-read the files into the context if their content changed; True when it did.
        A half-written rotation (a key that does not match its certificate) keeps the old
        certificate and is tried again at the next call."""
        now = fingerprint(self.settings.files())
        if now == self._seen:
            return False
        try:
            for ctx in self.contexts:
                _load_chain(ctx, self.settings)
                if self.settings.trust:
                    _load_trust(ctx, self.settings.trust)
        except TlsConfigError as err:
            log.warning("TLS files changed but cannot be loaded yet (%s); keeping the old", err)
            return False
        self._seen = now
        self.reloads += 1
        self._export_expiry()
        log.info("TLS certificate reloaded from %s", self.settings.certificate)
        return True


def peer_common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a verified peer certificate (``SSLSocket.getpeercert()``'s form), or None."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None
