"""The admin REST API of a client-suite target, as a script or ``pulsar-admin`` calls it:
(status, decoded JSON) for every answer, error statuses included, a ``307`` to the owning
broker followed with the same method and body. With the target's TLS trust and token, so
the same calls run against every target (standalone, cluster, secured, Apache Pulsar).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pulsar

from tests.clients.conftest import Target


def call(target: Target, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``method path`` with an optional JSON ``body``: the status and the decoded answer
    (None when empty; the raw bytes when not JSON)."""
    url = target.admin_url + path
    data = None if body is None else json.dumps(body).encode()
    ctx = (
        ssl.create_default_context(cafile=str(target.tls_trust_certs))
        if target.tls_trust_certs
        else None
    )
    for _ in range(3):
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if target.auth_token:
            req.add_header("Authorization", f"Bearer {target.auth_token}")
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as answer:
                return answer.status, _decoded(answer.read())
        except urllib.error.HTTPError as err:
            if err.code in (307, 308):
                url = urllib.parse.urljoin(url, err.headers["Location"])
                continue
            return err.code, _decoded(err.read())
    raise AssertionError(f"{method} {path}: too many redirects")


def _decoded(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def client(target: Target) -> pulsar.Client:
    """An official Python client of the target (its CA and token when it has them)."""
    kwargs: dict[str, Any] = {"operation_timeout_seconds": 30}
    if target.tls_trust_certs is not None:
        kwargs["tls_trust_certs_file_path"] = str(target.tls_trust_certs)
        kwargs["tls_validate_hostname"] = True
    if target.auth_token is not None:
        kwargs["authentication"] = pulsar.AuthenticationToken(target.auth_token)
    return pulsar.Client(target.service_url, **kwargs)
