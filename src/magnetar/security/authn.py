"""Authentication providers (TLS certificate, token, basic) and the service that picks one.

Why this module exists: a role comes out of the binary protocol's CONNECT / AUTH_RESPONSE
and out of an HTTP request's ``Authorization`` header or client certificate, by the same
rules, Pulsar's (``authenticationProviders``, ``anonymousUserRole``):

* ``tls`` -- the role is the CN of the client certificate the TLS handshake verified;
* ``token`` -- a JWT checked by :class:`magnetar.security.tokens.Validator`; its expiry is
  returned so the connection can ask for a fresh one (AUTH_CHALLENGE) in time;
* ``basic`` -- ``user:password`` against an htpasswd file (``basicAuthConf``), whose hashes
  are the two Pulsar reads: Apache's ``$apr1$`` MD5 and traditional crypt (through libpass);
* no credentials, or a method no provider serves: ``anonymousUserRole`` if set, refused
  otherwise.

Failures raise :class:`AuthenticationError` with the message the client is shown, and count
in :mod:`magnetar.security.metrics`.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from passlib.hash import apr_md5_crypt, des_crypt

from magnetar.security import keys, metrics, tokens

PROVIDER_CLASSES: Final = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}
"""Pulsar's provider class names (``authenticationProviders``) -> the method each serves."""

_PROVIDER_NAMES: Final = {
    "tls": "AuthenticationProviderTls",
    "token": "AuthenticationProviderToken",
    "basic": "AuthenticationProviderBasic",
}


class AuthenticationError(Exception):
    """Credentials that do not authenticate; ``str()`` is what the client is told."""


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    method: str
    """The method that authenticated it ("anonymous" for the anonymous role)."""
    expires_at: float | None = None
    """Unix time after which the credentials are no longer valid (tokens with ``exp``)."""

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.time()) >= self.expires_at


class Provider(Protocol):
    method: str

    def authenticate(self, data: bytes, *, peer_cn: str | None) -> Identity: ...


class TlsProvider:
    method = "tls"

    def authenticate(self, data: bytes, *, peer_cn: str | None) -> Identity:
        if not peer_cn:
            raise AuthenticationError("Client certificate is missing or has no common name")
        return Identity(peer_cn, self.method)


class TokenProvider:
    method = "token"

    def __init__(self, validator: tokens.Validator) -> None:
        self.validator = validator

    def authenticate(self, data: bytes, *, peer_cn: str | None) -> Identity:
        token = data.decode("utf-8", "replace").strip()
        token = token.removeprefix("token:")  # some clients send "token:<jwt>" as params
        try:
            role, expires = self.validator.validate(token)
        except tokens.TokenError as err:
            raise AuthenticationError(f"Failed to authentication token: {err}") from None
        return Identity(role, self.method, expires)


class BasicProvider:
    method = "basic"

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = dict(users)

    @classmethod
    def from_conf(cls, value: str) -> BasicProvider:
        """``basicAuthConf``: the htpasswd file in any of :func:`keys.read`'s forms."""
        text = keys.read(value, what="basicAuthConf").decode("utf-8")
        users: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.strip().split(":")
            if len(parts) != 2 or not parts[0]:
                raise ValueError(f"basicAuthConf line {number}: expected user:hash")
            users[parts[0]] = parts[1]
        return cls(users)

    def authenticate(self, data: bytes, *, peer_cn: str | None) -> Identity:
        user, sep, password = data.decode("utf-8", "replace").partition(":")
        if not sep:
            raise AuthenticationError("Base64 decoded params are invalid")
        hashed = self.users.get(user)
        if hashed is None or not _verify(password, hashed):
            raise AuthenticationError("Unknown user or invalid password")
        return Identity(user, self.method)


def _verify(password: str, hashed: str) -> bool:
    try:
        if hashed.startswith("$apr1$"):
            return bool(apr_md5_crypt.verify(password, hashed))
        return bool(des_crypt.verify(password, hashed))
    except ValueError:  # a malformed hash in the file
        return False


class Authenticator:
    """The providers of ``authenticationProviders`` by method, and the anonymous role."""

    def __init__(self, providers: Sequence[Provider], *, anonymous_role: str | None) -> None:
        self.providers = {p.method: p for p in providers}
        self.anonymous_role = anonymous_role

    def authenticate(self, method: str, data: bytes, *, peer_cn: str | None) -> Identity:
        """The identity of a CONNECT / AUTH_RESPONSE (``auth_method_name``, ``auth_data``)."""
        provider = self.providers.get(method)
        if provider is None:  # no method ("none" from clients without auth) or an unknown one
            return self._anonymous(method)
        return self._run(provider, data, peer_cn)

    def authenticate_http(
        self, authorization: str | None, *, peer_cn: str | None, method_hint: str | None = None
    ) -> Identity:
        """The identity of an HTTP request: ``Authorization: Bearer <token>`` or ``Basic
        <base64 user:password>``, else the client certificate, else anonymous."""
        if authorization:
            scheme, _, value = authorization.strip().partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer" and "token" in self.providers:
                return self._run(self.providers["token"], value.strip().encode(), peer_cn)
            if scheme == "basic" and "basic" in self.providers:
                try:
                    decoded = base64.b64decode(value.strip(), validate=True)
                except (binascii.Error, ValueError):
                    self._failed("basic", "INVALID_HEADER")
                    raise AuthenticationError("Base64 decoding is failure") from None
                return self._run(self.providers["basic"], decoded, peer_cn)
        if peer_cn and "tls" in self.providers:
            return self._run(self.providers["tls"], b"", peer_cn)
        if authorization and self.anonymous_role is None:
            raise AuthenticationError(
                "Authentication method in the Authorization header is not supported"
            )
        return self._anonymous(method_hint or "")

    def _run(self, provider: Provider, data: bytes, peer_cn: str | None) -> Identity:
        try:
            identity = provider.authenticate(data, peer_cn=peer_cn)
        except AuthenticationError:
            self._failed(provider.method, "INVALID_AUTH_DATA")
            raise
        metrics.AUTH_SUCCESS.labels(_PROVIDER_NAMES[provider.method], provider.method).inc()
        return identity

    def _anonymous(self, method: str) -> Identity:
        if self.anonymous_role is None:
            self._failed(method or "none", "NO_PROVIDER")
            if method and method != "none":
                raise AuthenticationError(f"Unsupported authentication method: [{method}]")
            raise AuthenticationError("Authentication required")
        return Identity(self.anonymous_role, "anonymous")

    def _failed(self, method: str, reason: str) -> None:
        metrics.AUTH_FAILURES.labels(
            _PROVIDER_NAMES.get(method, "AuthenticationService"), method, reason
        ).inc()
