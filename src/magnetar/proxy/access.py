"""Who a client of the proxy is, and how the proxy speaks for it to the brokers.

Why this module exists: Pulsar's proxy authenticates its clients itself (the broker's
``authenticationProviders``, through :mod:`magnetar.security.authn`) and then reaches the
brokers as *itself* -- ``brokerClientAuthenticationPlugin`` / ``...Parameters``, over TLS
with ``tlsEnabledWithBroker`` -- naming the client in CONNECT (``original_principal``, and
with ``forwardAuthorizationCredentials`` the client's ``original_auth_method`` /
``original_auth_data``) or, on HTTP, in ``X-Original-Principal``. The broker accepts that
only from a role in its ``proxyRoles`` and authorizes both the proxy's role and the client's
(docs/security.md, "The proxy"). :class:`ProxyAccess` holds those decisions once, for the
binary connections (:mod:`magnetar.proxy.connection`) and the HTTP side
(:mod:`magnetar.proxy.http`); it does no I/O.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Final

from magnetar.proxy.config import ProxyConfig
from magnetar.security import client_auth, tls
from magnetar.security.authn import AuthenticationError, Authenticator, Identity
from magnetar.wire import pb, session

ORIGINAL_PRINCIPAL_HEADER: Final = "X-Original-Principal"
"""The header naming the client on HTTP requests the proxy forwards (Pulsar's)."""


@dataclass(frozen=True, slots=True)
class Client:
    """An authenticated client of the proxy (``who`` is None without authentication)."""

    identity: Identity | None
    who: session.OnBehalfOf | None


class ProxyAccess:
    def __init__(self, config: ProxyConfig) -> None:
        sec = config.security
        self.authenticator: Authenticator | None = sec.authenticator()
        """None when authenticationEnabled is off: clients are not authenticated here."""
        self.credentials: client_auth.Credentials | None = sec.broker_client_credentials()
        """The proxy's own credentials towards the brokers (None: none)."""
        self.tls_with_broker = config.tls_enabled_with_broker
        self.forward_credentials = config.forward_authorization_credentials
        self.authenticate_metrics = sec.authenticate_metrics and self.authenticator is not None
        self.broker_ssl: ssl.SSLContext | None = (
            tls.client_context(sec.broker_client_tls_settings())
            if config.tls_enabled_with_broker
            else None
        )
        """How the proxy verifies the brokers (and presents its client certificate)."""

    @property
    def speaks_for_clients(self) -> bool:
        """Whether the proxy replaces a piped client's CONNECT with its own: when it
        authenticates clients or has credentials of its own. Otherwise the client's CONNECT
        goes to the broker unchanged (the broker authenticates the client end to end)."""
        return self.authenticator is not None or self.credentials is not None

    @property
    def method(self) -> str:
        """The proxy's auth method towards brokers (AuthProvider)."""
        return self.credentials.method if self.credentials is not None else "none"

    def auth_data(self) -> bytes:
        """The proxy's auth data towards brokers, read afresh (AuthProvider)."""
        return self.credentials.auth_data() if self.credentials is not None else b""

    @property
    def broker_auth(self) -> session.AuthProvider | None:
        return self if self.credentials is not None else None

    def authenticate(self, connect: pb.CommandConnect, *, peer_cn: str | None) -> Client:
        """The client of a CONNECT; AuthenticationError when its credentials are refused."""
        if self.authenticator is None:
            return Client(None, None)
        method = connect.auth_method_name or "none"
        identity = self.authenticator.authenticate(method, connect.auth_data, peer_cn=peer_cn)
        who = session.OnBehalfOf(
            identity.role,
            auth_method=method if self.forward_credentials else None,
            auth_data=connect.auth_data if self.forward_credentials else None,
        )
        return Client(identity, who)

    def broker_connect(self, connect: pb.CommandConnect, client: Client) -> pb.BaseCommand:
        """The CONNECT the proxy sends the broker for a piped client: the client's (its
        version and features), with the proxy's credentials and the client named. The
        broker's AUTH_CHALLENGE would reach the client through the pipe, so the proxy does
        not announce ``supports_auth_refresh`` (its credentials should not expire: the
        broker closes the connection when they do, and the client reconnects)."""
        cmd = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
        out = cmd.connect
        out.CopyFrom(connect)
        for name in (
            "auth_data", "proxy_to_broker_url", "original_principal", "original_auth_data",
            "original_auth_method",
        ):  # fmt: skip
            out.ClearField(name)
        out.auth_method_name = self.method
        data = self.auth_data()
        if data:
            out.auth_data = data
        out.feature_flags.supports_auth_refresh = False
        if client.who is not None:
            client.who.apply(out)
        return cmd

    def authenticate_http(self, headers: Any, *, peer_cn: str | None) -> Identity | None:
        """The client of an HTTP request (None without authentication); AuthenticationError
        when its credentials are refused."""
        if self.authenticator is None:
            return None
        return self.authenticator.authenticate_http(headers.get("Authorization"), peer_cn=peer_cn)

    def forwarded_headers(self, headers: dict[str, str], identity: Identity | None) -> None:
        """Make a client's request headers the proxy's (in place): with credentials of its
        own the proxy authenticates as itself and names the client in X-Original-Principal,
        as Pulsar's AdminProxyHandler does; without, the client's headers go unchanged."""
        if not self.speaks_for_clients:
            return
        for name in list(headers):
            if name.lower() == ORIGINAL_PRINCIPAL_HEADER.lower():
                del headers[name]  # a client never names a principal itself
        if identity is not None:
            headers[ORIGINAL_PRINCIPAL_HEADER] = identity.role
        if self.credentials is not None:
            for name in list(headers):
                if name.lower() == "authorization":
                    del headers[name]
            headers.update(self.credentials.http_headers())

    def http_ssl(self, url: str) -> ssl.SSLContext | bool:
        """The TLS context of a request to a broker's ``url`` (aiohttp's ``ssl``)."""
        if url.startswith("https://") and self.broker_ssl is not None:
            return self.broker_ssl
        return True


__all__ = ["AuthenticationError", "Client", "ProxyAccess"]
