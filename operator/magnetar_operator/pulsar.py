"""A minimal Pulsar admin REST API v2 client: tenants, namespaces (+ policies), topics.

Only what the Tenant and Topic resources need, with Pulsar's paths and JSON shapes
(``/admin/v2/tenants/{t}``, ``/admin/v2/namespaces/{t}/{ns}``,
``/admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}[/partitions]``), so the same
code drives a Magnetar broker or an Apache Pulsar one. Errors are split by how the caller
reacts: ``AdminUnavailable`` (cannot reach it: retry, or give up on deletion) and
``AdminError`` (it answered no; ``retryable`` for 5xx).
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import aiohttp

from magnetar_operator.spec import Json


def error_reason(status: int, body: bytes | str) -> str:
    """The reason of an admin API error answer: Pulsar's ``{"reason": "..."}`` (also
    ``{"message": ...}``), else the body's text, else the status's standard phrase.

    The same function as ``magnetar.client.admin.error_reason`` (the operator imports
    nothing of ``magnetar``, docs/architecture.md "Layers"): a unit test runs both on the
    same answers, and the structure test allows no third decoder of Pulsar's error body."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    text = text.strip()
    try:
        decoded = json.loads(text) if text else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        for key in ("reason", "message"):
            value = decoded.get(key)
            if isinstance(value, str) and value:
                return value
    if isinstance(decoded, str) and decoded:
        return decoded
    if text:
        return text
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


class AdminUnavailable(Exception):
    """The admin endpoint could not be reached (connection refused, DNS, timeout)."""


class AdminError(Exception):
    """The admin API answered with an error status."""

    def __init__(self, status: int, reason: str, *, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {reason}")
        self.status = status
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status == 429


@dataclass(frozen=True)
class TopicName:
    persistent: bool
    tenant: str
    namespace: str
    name: str

    @property
    def domain(self) -> str:
        return "persistent" if self.persistent else "non-persistent"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.name}"

    @property
    def path(self) -> str:
        return f"/admin/v2/{self.domain}/{_q(self.tenant)}/{_q(self.namespace)}/{_q(self.name)}"

    @property
    def namespace_path(self) -> str:
        return f"/admin/v2/{self.domain}/{_q(self.tenant)}/{_q(self.namespace)}"


def _q(part: str) -> str:
    return quote(part, safe="")


def ns_path(tenant: str, namespace: str) -> str:
    return f"/admin/v2/namespaces/{_q(tenant)}/{_q(namespace)}"


class Admin:
    """One admin endpoint (``http(s)://host:port``); use as an async context manager.

    ``token``: a bearer token (the operator's super-user token of a cluster with
    ``spec.auth``); ``ca``: PEM CA certificates an ``https://`` endpoint's certificate must
    chain to (the cluster's CA, with ``spec.tls``), the host name checked as usual."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        ca: bytes | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._ssl: ssl.SSLContext | None = None
        if ca:
            self._ssl = ssl.create_default_context(cadata=ca.decode())
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Admin:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            timeout=self._timeout,
            connector=aiohttp.TCPConnector(ssl=self._ssl) if self._ssl else None,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        missing_ok: bool = False,
    ) -> Any:
        assert self._session is not None, "use `async with Admin(url)`"
        kwargs: dict[str, Any] = {"params": params}
        if body is not None:
            kwargs["data"] = json.dumps(body)
            kwargs["headers"] = {"Content-Type": "application/json"}
        try:
            async with self._session.request(method, self.url + path, **kwargs) as resp:
                text = await resp.text()
                if resp.status == 404 and missing_ok:
                    return None
                if resp.status >= 400:
                    reason = error_reason(resp.status, text)
                    raise AdminError(resp.status, reason, method=method, path=path)
                return json.loads(text) if text.strip() else None
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise AdminUnavailable(f"{self.url}: {e or type(e).__name__}") from e

    # --- tenants -----------------------------------------------------------------------
    async def get_tenant(self, tenant: str) -> Json | None:
        result: Json | None = await self._call(
            "GET", f"/admin/v2/tenants/{_q(tenant)}", missing_ok=True
        )
        return result

    async def create_tenant(self, tenant: str, info: Json) -> None:
        await self._call("PUT", f"/admin/v2/tenants/{_q(tenant)}", body=info)

    async def update_tenant(self, tenant: str, info: Json) -> None:
        await self._call("POST", f"/admin/v2/tenants/{_q(tenant)}", body=info)

    async def delete_tenant(self, tenant: str) -> None:
        """Never forced: a tenant that still has namespaces answers 409."""
        await self._call("DELETE", f"/admin/v2/tenants/{_q(tenant)}", missing_ok=True)

    # --- namespaces --------------------------------------------------------------------
    async def list_namespaces(self, tenant: str) -> list[str]:
        """Namespace names (without the tenant prefix)."""
        names = await self._call("GET", f"/admin/v2/namespaces/{_q(tenant)}", missing_ok=True)
        return [str(n).split("/", 1)[-1] for n in names or ()]

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        await self._call("PUT", ns_path(tenant, namespace))

    async def delete_namespace(self, tenant: str, namespace: str, *, force: bool = False) -> None:
        await self._call(
            "DELETE",
            ns_path(tenant, namespace),
            params={"force": "true" if force else "false"},
            missing_ok=True,
        )

    async def get_policies(self, tenant: str, namespace: str) -> Json:
        result: Json = await self._call("GET", ns_path(tenant, namespace)) or {}
        return result

    async def set_retention(
        self, tenant: str, namespace: str, *, minutes: int, size_mb: int
    ) -> None:
        body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
        await self._call("POST", ns_path(tenant, namespace) + "/retention", body=body)

    async def set_message_ttl(self, tenant: str, namespace: str, seconds: int) -> None:
        await self._call("POST", ns_path(tenant, namespace) + "/messageTTL", body=seconds)

    async def set_deduplication(self, tenant: str, namespace: str, enabled: bool) -> None:
        await self._call("POST", ns_path(tenant, namespace) + "/deduplication", body=enabled)

    async def set_backlog_quota(self, tenant: str, namespace: str, quota: Json) -> None:
        await self._call(
            "POST",
            ns_path(tenant, namespace) + "/backlogQuota",
            body=quota,
            params={"backlogQuotaType": "destination_storage"},
        )

    async def set_offload_threshold(self, tenant: str, namespace: str, size_bytes: int) -> None:
        await self._call("PUT", ns_path(tenant, namespace) + "/offloadThreshold", body=size_bytes)

    # --- topics ------------------------------------------------------------------------
    async def list_topics(self, topic: TopicName) -> list[str]:
        """Non-partitioned topics and partitions of the topic's namespace (full names)."""
        return [str(t) for t in await self._call("GET", topic.namespace_path) or ()]

    async def list_partitioned_topics(self, topic: TopicName) -> list[str]:
        return [
            str(t) for t in await self._call("GET", topic.namespace_path + "/partitioned") or ()
        ]

    async def create_topic(self, topic: TopicName) -> None:
        await self._call("PUT", topic.path)

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        await self._call("PUT", topic.path + "/partitions", body=partitions)

    async def update_partitions(self, topic: TopicName, partitions: int) -> None:
        await self._call("POST", topic.path + "/partitions", body=partitions)

    async def get_partitions(self, topic: TopicName) -> int:
        meta = await self._call("GET", topic.path + "/partitions") or {}
        return int(meta.get("partitions", 0))

    async def delete_topic(self, topic: TopicName, *, partitioned: bool) -> None:
        path = topic.path + ("/partitions" if partitioned else "")
        await self._call("DELETE", path, params={"force": "true"}, missing_ok=True)

    async def get_topic_policy(self, topic: TopicName, policy: str) -> Any:
        """``policy``: messageTTL | retention | deduplicationEnabled (None when unset)."""
        return await self._call("GET", f"{topic.path}/{policy}", missing_ok=True)

    async def set_topic_policy(self, topic: TopicName, policy: str, value: Any) -> None:
        if policy == "messageTTL":
            await self._call("POST", f"{topic.path}/messageTTL", params={"messageTTL": str(value)})
        else:
            await self._call("POST", f"{topic.path}/{policy}", body=value)

    # --- bookies (issue 22: docs/operations.md, "Autorecovery and decommission") --------
    async def list_bookies(self) -> list[Json]:
        """Every bookie: ``bookieId``, ``state`` (rw, ro, decommissioning, decommissioned,
        gone), ``rack``, ``registered``, ``instanceId``."""
        doc = await self._call("GET", "/admin/v2/bookies/all") or {}
        return [dict(b) for b in doc.get("bookies") or ()]

    async def list_underreplicated(self) -> list[Json]:
        """Ledgers marked under-replicated (``ledgerId``, ``missingReplicas``, ...)."""
        return [dict(m) for m in await self._call("GET", "/admin/v2/bookies/underreplicated") or ()]

    async def decommission_bookie(self, bookie_id: str) -> Json:
        """Start decommissioning ``bookie_id``; its progress (``state``,
        ``ledgersReferencing``)."""
        result: Json = (
            await self._call("POST", f"/admin/v2/bookies/decommission/{_q(bookie_id)}") or {}
        )
        return result

    async def decommission_status(self, bookie_id: str) -> Json | None:
        """A decommission's progress; None when the cluster does not know the bookie."""
        result: Json | None = await self._call(
            "GET", f"/admin/v2/bookies/decommission/{_q(bookie_id)}", missing_ok=True
        )
        return result
