"""Who the source is and whom it trusts: the authentication and TLS options, parsed once on
the driver and carried (picklable) to the executors, and the three ways of connecting they
configure -- the admin client (planning), the client layer's blocking connection (the
protocol read path) and the official client (the client read path and the writes).

Why this module exists: every hop of the source to a secured cluster takes the same
options, named as Pulsar's clients name them (the StreamNative Spark connector's names, with
or without its ``pulsar.client.`` prefix):

* ``authPluginClassName`` / ``authParams`` -- a plugin of the Java client (or ``token``,
  ``basic``, ``tls``) and its parameters (:mod:`magnetar.security.client_auth`);
* ``tlsTrustCertsFilePath``, ``tlsAllowInsecureConnection``,
  ``tlsHostnameVerificationEnable`` (off by default, as in Pulsar's clients) -- for
  ``pulsar+ssl://`` service URLs and ``https://`` admin URLs.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from magnetar.client import admin
from magnetar.security import tls
from magnetar.security.client_auth import Credentials, CredentialsError
from magnetar.spark.options import MagnetarSourceError, boolean

PREFIX: Final = "pulsar.client."
OPTION_NAMES: Final = (
    "authPluginClassName",
    "authParams",
    "tlsTrustCertsFilePath",
    "tlsAllowInsecureConnection",
    "tlsHostnameVerificationEnable",
)
"""The options of this module; each also with the ``pulsar.client.`` prefix."""
ALL_NAMES: Final = OPTION_NAMES + tuple(PREFIX + name for name in OPTION_NAMES)
ADMIN_TIMEOUT_S: Final = 30.0


def _option(options: Mapping[str, str], name: str) -> str | None:
    """An option by either of its names (Spark hands them over lower-cased); both given
    with different values is refused."""
    short, prefixed = options.get(name.lower()), options.get((PREFIX + name).lower())
    if short is not None and prefixed is not None and short != prefixed:
        raise MagnetarSourceError(f"options {name} and {PREFIX}{name} disagree: give one")
    value = short if short is not None else prefixed
    return value.strip() if value is not None and value.strip() else None


def _flag(options: Mapping[str, str], name: str) -> bool:
    return boolean({name.lower(): _option(options, name) or ""}, name, default=False)


@dataclass(frozen=True)
class Access:
    """The source's credentials and TLS trust (no credentials: anonymous)."""

    auth_plugin: str | None = None
    auth_params: str | None = None
    trust_certs_file: str | None = None
    allow_insecure: bool = False
    verify_hostname: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Access:
        """The options, checked (a plugin or params that cannot be used, a trust file that
        does not load: MagnetarSourceError naming it)."""
        lowered = {k.lower(): v for k, v in options.items()}
        found = cls(
            auth_plugin=_option(lowered, "authPluginClassName"),
            auth_params=_option(lowered, "authParams"),
            trust_certs_file=_option(lowered, "tlsTrustCertsFilePath"),
            allow_insecure=_flag(lowered, "tlsAllowInsecureConnection"),
            verify_hostname=_flag(lowered, "tlsHostnameVerificationEnable"),
        )
        if found.auth_params and not found.auth_plugin:
            raise MagnetarSourceError("option authParams needs authPluginClassName")
        found.credentials()
        settings = found.tls_settings()
        if settings.files():  # (a context costs 10-200 ms: made only to check named files)
            found.ssl_context()
        return found

    def credentials(self) -> Credentials | None:
        if not self.auth_plugin:
            return None
        try:
            creds = Credentials.parse(self.auth_plugin, self.auth_params or "")
            creds.auth_data()  # a token file is read here: a missing one is named now
        except CredentialsError as err:
            raise MagnetarSourceError(f"option authPluginClassName/authParams: {err}") from None
        return creds

    def tls_settings(self) -> tls.TlsSettings:
        creds = self.credentials()
        return tls.TlsSettings(
            trust=self.trust_certs_file,
            allow_insecure=self.allow_insecure,
            verify_hostname=self.verify_hostname,
            certificate=creds.cert_file if creds is not None else None,
            key=creds.key_file if creds is not None else None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The client context of ``pulsar+ssl://`` connections (built where it is used:
        contexts do not pickle)."""
        try:
            return tls.client_context(self.tls_settings())
        except tls.TlsConfigError as err:
            raise MagnetarSourceError(f"TLS options: {err}") from None

    def admin_client(self, url: str) -> admin.AdminClient:
        """The admin client of ``url`` with these credentials and trust: one per process
        (the driver plans every query and micro-batch with it; a TLS context costs 10-200 ms
        to make, and a token file is read at every call anyway)."""
        return _admin_client(url, self)

    def official_client_options(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client`` (the official Python client) for these
        credentials and this trust."""
        import pulsar  # the executors' dependency, imported where it runs

        out: dict[str, Any] = {
            "tls_allow_insecure_connection": self.allow_insecure,
            "tls_validate_hostname": self.verify_hostname,
        }
        if self.trust_certs_file:
            out["tls_trust_certs_file_path"] = self.trust_certs_file
        creds = self.credentials()
        if creds is None:
            return out
        if creds.method == "token":
            # a callable: the client asks again when the broker challenges an expired token
            out["authentication"] = pulsar.AuthenticationToken(creds.current_token)
        elif creds.method == "basic":
            out["authentication"] = pulsar.AuthenticationBasic(creds.user, creds.password)
        else:
            out["authentication"] = pulsar.AuthenticationTLS(creds.cert_file, creds.key_file)
        return out


ANONYMOUS: Final = Access()
"""No credentials, the system's CAs."""


@functools.lru_cache(maxsize=16)
def _admin_client(url: str, access: Access) -> admin.AdminClient:
    try:
        return admin.AdminClient(
            url,
            credentials=access.credentials(),
            tls_trust_certs_file=access.trust_certs_file,
            tls_allow_insecure=access.allow_insecure,
            tls_verify_hostname=access.verify_hostname,
            timeout=ADMIN_TIMEOUT_S,
        )
    except admin.AdminConfigError as err:
        raise MagnetarSourceError(f"option adminUrl: {err}") from None
