"""gRPC credentials built from PEM files that rotate on disk (:mod:`magnetar.common.tlsfiles`).

Why this module exists: two internal hops speak gRPC over TLS, broker -> bookie and every
process -> etcd, and both must follow certificate rotation without dropping what is
established:

* the server side (:func:`server_credentials`, the bookie) uses gRPC's dynamic server
  credentials: gRPC asks a fetcher for the certificate configuration at each new handshake,
  and the fetcher answers with the re-read files only when they changed; connections already
  up keep the session they negotiated;
* the client side (:class:`ClientTls`) cannot change a channel's credentials, so it gives the
  current ones and a ``generation`` that moves on each rotation: the owner of channels opens a
  new channel for new calls when the generation moved and closes the old one once the calls on
  it are over (``ledger.bookie_client``, ``metadata.etcd``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from magnetar.common import tlsfiles

log = logging.getLogger(__name__)


def server_credentials(
    files: tlsfiles.TlsFiles,
    *,
    require_client_auth: bool,
    check_interval: float = tlsfiles.DEFAULT_CHECK_INTERVAL,
) -> grpc.ServerCredentials:
    """Server credentials serving ``files`` (certificate + key required; ``trust_file`` the
    CAs a client certificate must chain to), re-read when they rotate. With
    ``require_client_auth`` a client without a certificate signed by those CAs is refused
    during the handshake. Raises TlsFileError naming an unusable file."""
    if not files.has_identity:
        raise tlsfiles.TlsFileError("a TLS server needs a certificate and a private key file")
    if require_client_auth and files.trust_file is None:
        raise tlsfiles.TlsFileError(
            "client authentication needs the trusted CA certificates file (the CAs that sign "
            "client certificates)"
        )
    watched = tlsfiles.Watched(files, check_interval=check_interval)
    lock = threading.Lock()

    def configuration(bundle: tlsfiles.PemBundle) -> Any:
        assert bundle.key is not None and bundle.cert is not None
        return grpc.ssl_server_certificate_configuration(
            [(bundle.key, bundle.cert)], root_certificates=bundle.trust
        )

    def fetch() -> Any:
        # gRPC calls this from its own threads at the start of every handshake: None keeps the
        # configuration in use.
        try:
            with lock:
                bundle = watched.poll()
            return None if bundle is None else configuration(bundle)
        except Exception:  # never fail a handshake over a rotation problem
            log.exception("TLS server certificate reload failed; keeping the previous one")
            return None

    return grpc.dynamic_ssl_server_credentials(
        configuration(watched.current), fetch, require_client_authentication=require_client_auth
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTlsConfig:
    """How the client side of a hop speaks TLS (configuration only: :meth:`open` reads the
    files).

    ``files``: the trusted CAs (None: the system's roots) and, for mutual TLS, this client's
    certificate and key; ``authority`` overrides the name the server's certificate is checked
    against (Pulsar's etcd ``authority``; default the host connected to);
    ``check_interval``: seconds between looks at the files for a rotation."""

    files: tlsfiles.TlsFiles = field(default_factory=tlsfiles.TlsFiles)
    authority: str | None = None
    check_interval: float = tlsfiles.DEFAULT_CHECK_INTERVAL

    def open(self) -> ClientTls:
        """The credentials, files read now (TlsFileError naming an unusable one)."""
        return ClientTls(self)


class ClientTls:
    """The client side of a TLS hop: channel credentials from the configured files, rebuilt
    when the files rotate."""

    def __init__(self, config: ClientTlsConfig) -> None:
        self.config = config
        self.authority = config.authority or None
        self._watched = tlsfiles.Watched(config.files, check_interval=config.check_interval)
        self._credentials = self._build(self._watched.current)

    @staticmethod
    def _build(bundle: tlsfiles.PemBundle) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=bundle.trust, private_key=bundle.key, certificate_chain=bundle.cert
        )

    @property
    def generation(self) -> int:
        """Moves by one at each rotation :meth:`refresh` saw."""
        return self._watched.generation

    def refresh(self) -> int:
        """Look at the files (rate-limited) and return the generation now current."""
        bundle = self._watched.poll()
        if bundle is not None:
            self._credentials = self._build(bundle)
        return self._watched.generation

    def channel(self, target: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        """A new channel to ``target`` with the current credentials."""
        opts = list(options)
        if self.authority:
            opts.append(("grpc.ssl_target_name_override", self.authority))
            opts.append(("grpc.default_authority", self.authority))
        return grpc.aio.secure_channel(target, self._credentials, options=opts)


def open_channel(
    target: str, options: list[tuple[str, Any]], tls: ClientTls | None
) -> grpc.aio.Channel:
    """A channel to ``target``: over TLS with ``tls``, plaintext without."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    return tls.channel(target, options)
