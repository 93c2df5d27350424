"""Admin calls to the broker that owns a topic, for operations spanning topics that several
brokers own: partitioned stats, deleting or unloading a partitioned topic, deleting a
namespace. (Operations on one topic answer ``307`` to its owner instead.)

:data:`PEERS` is the HTTP side of :class:`magnetar.broker.topic_ops.scope.Peers`: the typed
topic administration says what it needs of another broker, this module asks it over the
admin REST API. Only the current owner is asked (authoritatively): an unowned topic is
handled by this broker, which may take its bundle, as a lookup would.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

import aiohttp
from aiohttp import web

from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic_ops import errors
from magnetar.client import admin
from magnetar.security import tls
from magnetar.wire.topics import TopicDomain, TopicName

TIMEOUT_S: Final = 30.0


def namespace_path(domain: str, tenant: str, namespace: str) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}``, each part URL-quoted."""
    parts = (domain, tenant, namespace)
    return "/admin/v2/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def topic_path(topic: TopicName) -> str:
    """The admin path of a topic of either domain."""
    base = namespace_path(topic.domain.value, topic.tenant, topic.namespace)
    return f"{base}/{urllib.parse.quote(topic.local_name, safe='')}"


async def call(
    base_url: str,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    body: Any = None,
) -> tuple[int, Any]:
    """``method path`` on another broker's admin API (authoritative: it owns the topic);
    (status, decoded JSON or None), or for an error status (status, its reason decoded by
    the client layer's :func:`magnetar.client.admin.error_reason`). Unavailable when it
    cannot be reached."""
    sep = "&" if "?" in path else "?"
    url = f"{base_url}{path}{sep}authoritative=true"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
            session.request(
                method,
                url,
                headers=headers,
                ssl=ssl_context if ssl_context else True,
                json=body,
            ) as response,
        ):
            text = await response.text()
            if response.status >= 400:
                return response.status, admin.error_reason(response.status, text)
            return response.status, (json.loads(text) if text.strip() else None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        reason = f"broker {base_url} did not answer {method} {path}: {err}"
        raise errors.Unavailable(reason) from None


def raise_for(status: int, answer: Any, *, ok: tuple[int, ...] = (200, 204)) -> None:
    """Pass another broker's refusal on with its status and reason (what :func:`call`
    answers for an error status)."""
    if status in ok:
        return
    reason = answer if isinstance(answer, str) and answer else None
    raise errors.PeerRefused(status, reason or f"the owning broker answered {status}")


class HttpPeers:
    """:class:`magnetar.broker.topic_ops.scope.Peers` over the admin REST API, as this
    broker: with its brokerClient* credentials and TLS trust (docs/security.md)."""

    def __init__(
        self,
        *,
        headers: Callable[[], dict[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._headers = headers
        self._ssl = ssl_context

    @classmethod
    def of(cls, config: BrokerConfig) -> HttpPeers:
        """The peers client a broker with ``config`` uses (ValueError naming a bad key)."""
        sec = config.security
        creds = sec.broker_client_credentials()
        context = None
        if sec.broker_client_tls or config.http_port is None:
            try:
                context = tls.client_context(sec.broker_client_tls_settings())
            except tls.TlsConfigError as err:
                raise ValueError(f"brokerClient TLS: {err}") from None
        return cls(headers=creds.http_headers if creds else None, ssl_context=context)

    async def _call(
        self, web_url: str, method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        headers = self._headers() if self._headers else None
        return await call(web_url, method, path, headers=headers, ssl_context=self._ssl, body=body)

    async def admin_get(self, web_url: str, path: str) -> Any:
        """``GET path`` (from the root, ``/admin/v3/...``) on the peer: its decoded JSON."""
        status, answer = await self._call(web_url, "GET", path)
        raise_for(status, answer, ok=(200,))
        return answer

    async def topic_call(
        self, web_url: str, method: str, topic: TopicName, suffix: str, *, body: Any = None
    ) -> Any:
        status, answer = await self._call(web_url, method, f"{topic_path(topic)}{suffix}", body)
        raise_for(status, answer)
        return answer

    async def bundle_topics(
        self, web_url: str, *, domain: TopicDomain, tenant: str, namespace: str, bundle: str
    ) -> list[str]:
        path = f"{namespace_path(domain.value, tenant, namespace)}/{bundle}"
        status, answer = await self._call(web_url, "GET", path)
        raise_for(status, answer, ok=(200,))
        return list(answer)

    async def stats(self, web_url: str, topic: TopicName) -> dict[str, Any]:
        status, answer = await self._call(web_url, "GET", f"{topic_path(topic)}/stats")
        raise_for(status, answer, ok=(200,))
        return dict(answer)

    async def delete(self, web_url: str, topic: TopicName, *, force: bool) -> None:
        path = f"{topic_path(topic)}?force={'true' if force else 'false'}"
        status, answer = await self._call(web_url, "DELETE", path)
        raise_for(status, answer, ok=(204, 404))

    async def unload(self, web_url: str, topic: TopicName) -> None:
        status, answer = await self._call(web_url, "PUT", f"{topic_path(topic)}/unload")
        raise_for(status, answer, ok=(204, 404))

    async def unload_bundle(
        self, web_url: str, *, tenant: str, namespace: str, bundle: str
    ) -> None:
        path = f"/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload?authoritative=true"
        status, answer = await self._call(web_url, "PUT", path)
        raise_for(status, answer, ok=(204, 404))

    async def compact(self, web_url: str, topic: TopicName) -> None:
        status, answer = await self._call(web_url, "PUT", f"{topic_path(topic)}/compaction")
        raise_for(status, answer, ok=(204, 409))


PEERS = web.AppKey("magnetar_admin_peers", HttpPeers)
"""``request.app[PEERS]``: the broker's peers client, which the admin routes hand to the
typed topic operations (set up by the admin extension from the broker's config)."""


def peers(request: web.Request) -> HttpPeers:
    return request.app[PEERS]
