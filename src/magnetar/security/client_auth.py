"""Client-side credentials in the forms Pulsar's clients and tools take them.

Why this module exists: ``magnetar admin`` (and, later, every client hop inside Magnetar)
is configured the way ``pulsar-admin`` and ``client.conf`` are: ``authPlugin`` (a class
name of the Java client, or tls / token / basic) and ``authParams`` in that plugin's
formats:

* token: ``token:<jwt>``, ``file:///path`` (read at every use, so a rotated token is
  picked up), ``{"token": "<jwt>"}``, or the bare token;
* basic: ``{"userId": "u", "password": "p"}`` or ``u:p``;
* tls: ``tlsCertFile:/p,tlsKeyFile:/p`` or ``{"tlsCertFile": "/p", "tlsKeyFile": "/p"}``.

:class:`Credentials` gives the binary protocol's (method, data) and the HTTP headers.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

PLUGINS: Final = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "org.apache.pulsar.client.impl.auth.AuthenticationKeyStoreTls": "tls",
    "token": "token",
    "basic": "basic",
    "tls": "tls",
}


class CredentialsError(ValueError):
    """authPlugin / authParams that cannot be used; the message names the problem."""


@dataclass(frozen=True, slots=True)
class Credentials:
    method: str
    """token, basic or tls."""
    token: str | None = None
    token_file: Path | None = None
    user: str | None = None
    password: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @classmethod
    def parse(cls, plugin: str, params: str) -> Credentials:
        method = PLUGINS.get(plugin.strip())
        if method is None:
            known = ", ".join(sorted(PLUGINS))
            raise CredentialsError(f"unsupported auth plugin {plugin!r}: one of {known}")
        text = params.strip()
        as_json = _json(text)
        if method == "token":
            if as_json is not None:
                token = as_json.get("token")
                if not isinstance(token, str) or not token:
                    raise CredentialsError('token auth params: expected {"token": "..."}')
                return cls("token", token=token)
            if text.startswith("file:"):
                path = urllib.parse.unquote(urllib.parse.urlparse(text).path)
                return cls("token", token_file=Path(path))
            token = text.removeprefix("token:")
            if not token:
                raise CredentialsError("token auth params: empty token")
            return cls("token", token=token)
        if method == "basic":
            if as_json is not None:
                user, password = as_json.get("userId"), as_json.get("password")
            else:
                user, _, password = text.partition(":")
            if not isinstance(user, str) or not user or not isinstance(password, str):
                raise CredentialsError('basic auth params: expected {"userId": .., "password": ..}')
            return cls("basic", user=user, password=password)
        fields = as_json if as_json is not None else _pairs(text)
        cert, key = fields.get("tlsCertFile"), fields.get("tlsKeyFile")
        if not isinstance(cert, str) or not isinstance(key, str) or not cert or not key:
            raise CredentialsError("tls auth params: expected tlsCertFile:PATH,tlsKeyFile:PATH")
        return cls("tls", cert_file=cert, key_file=key)

    def current_token(self) -> str:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as err:
                raise CredentialsError(
                    f"cannot read the token file {self.token_file}: {err}"
                ) from None
        return self.token or ""

    def auth_data(self) -> bytes:
        """CONNECT's ``auth_data`` (tls: empty, the certificate authenticates)."""
        if self.method == "token":
            return self.current_token().encode()
        if self.method == "basic":
            return f"{self.user}:{self.password}".encode()
        return b""

    def http_headers(self) -> dict[str, str]:
        if self.method == "token":
            return {"Authorization": f"Bearer {self.current_token()}"}
        if self.method == "basic":
            raw = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}
        return {}


def _json(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError as err:
        raise CredentialsError(f"auth params: malformed JSON: {err}") from None
    if not isinstance(value, dict):
        raise CredentialsError("auth params: expected a JSON object")
    return value


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out
