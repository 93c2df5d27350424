"""The one module that talks to the Kubernetes API (besides kopf itself).

A small asyncio client over aiohttp: server-side apply (``fieldManager`` =
magnetar-operator, forced, so the operator owns the fields it sets and drift is reverted),
get/list/delete, and status patches of our custom resources. Credentials come from the
in-cluster service account or a kubeconfig, loaded by the ``kubernetes`` package, and
follow their rotation (:class:`CredentialSource`): the projected service-account token is
re-read every minute (kubelet replaces it long before it expires), an exec plugin's token
is fetched again when it expires, and a 401 reloads everything once and retries -- a
token read once at start would lock the operator out after an hour.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from magnetar_operator.spec import Json

FIELD_MANAGER = "magnetar-operator"
RETIRED_SESSION_GRACE_S = 60.0
"""A session replaced for a new TLS identity is closed this long after (its requests end)."""

# kind -> (plural, namespaced)
KINDS: dict[str, tuple[str, bool]] = {
    "Certificate": ("certificates", True),
    "ConfigMap": ("configmaps", True),
    "Deployment": ("deployments", True),
    "Event": ("events", True),
    "Function": ("functions", True),
    "HorizontalPodAutoscaler": ("horizontalpodautoscalers", True),
    "Node": ("nodes", False),
    "PersistentVolume": ("persistentvolumes", False),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "Pod": ("pods", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "PodMonitor": ("podmonitors", True),
    "PulsarCluster": ("pulsarclusters", True),
    "Secret": ("secrets", True),
    "Service": ("services", True),
    "ServiceAccount": ("serviceaccounts", True),
    "ServiceMonitor": ("servicemonitors", True),
    "StatefulSet": ("statefulsets", True),
    "Tenant": ("tenants", True),
    "Topic": ("topics", True),
}


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class Credentials:
    host: str
    token: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True


def _credentials_of(cfg: Any) -> Credentials:
    token = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix(
        "BearerToken"
    )
    if token and token.lower().startswith("bearer "):
        token = token[7:]
    return Credentials(
        host=str(cfg.host).rstrip("/"),
        token=token or None,
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify=bool(cfg.verify_ssl),
    )


class CredentialSource:
    """The operator's credentials as they are now: in-cluster service account first, then
    ``$KUBECONFIG``/~/.kube/config (``kubeconfig``: that file), loaded by the ``kubernetes``
    package, whose refresh hook re-reads a rotating service-account token (every minute)
    or runs an exec plugin again once its token expired."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        self._kubeconfig = kubeconfig
        self._cfg: Any = None
        self.reload()

    def reload(self) -> Credentials:
        """Load everything again (after a 401: a token revoked before its expiry, a client
        certificate replaced)."""
        from kubernetes import client, config  # the loaders only; no API calls through it

        cfg = client.Configuration()
        if self._kubeconfig is not None:
            config.load_kube_config(config_file=self._kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        self._cfg = cfg
        return _credentials_of(cfg)

    def current(self) -> Credentials:
        """The credentials to send now (the refresh hook first, when the loader set one)."""
        hook = getattr(self._cfg, "refresh_api_key_hook", None)
        if hook is not None:
            hook(self._cfg)
        return _credentials_of(self._cfg)


def load_credentials() -> Credentials:
    """The credentials as they are now (see :class:`CredentialSource`)."""
    return CredentialSource().current()


def resource_path(
    api_version: str, kind: str, namespace: str | None = None, name: str | None = None
) -> str:
    """The REST path of a kind (collection) or of one object."""
    try:
        plural, namespaced = KINDS[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} is not known to magnetar_operator.kube") from None
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} is namespaced: a namespace is required")
        base += f"/namespaces/{quote(namespace)}"
    path = f"{base}/{plural}"
    if name is not None:
        path += f"/{quote(name)}"
    return path


class Kube:
    """An aiohttp session bound to one API server; with a :class:`CredentialSource`, each
    request sends the current token, a changed TLS identity opens a new session, and a 401
    reloads the credentials and retries once."""

    def __init__(self, creds: Credentials | CredentialSource) -> None:
        self._source = creds if isinstance(creds, CredentialSource) else None
        self._creds = creds.current() if isinstance(creds, CredentialSource) else creds
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_environment(cls) -> Kube:
        return cls(CredentialSource())

    def _refresh(self, creds: Credentials) -> None:
        """Take ``creds``; a new TLS identity or server needs a new session."""
        tls = (creds.host, creds.ca_file, creds.cert_file, creds.key_file, creds.verify)
        old = self._creds
        if tls != (old.host, old.ca_file, old.cert_file, old.key_file, old.verify) and (
            self._session is not None
        ):
            # requests in flight on the old session finish (30 s timeout) before it closes
            retired, self._session = self._session, None
            loop = asyncio.get_running_loop()
            loop.call_later(RETIRED_SESSION_GRACE_S, lambda: loop.create_task(retired.close()))
        self._creds = creds

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self._creds.host.startswith("https"):
            return False
        if not self._creds.verify:
            return False
        ctx = ssl.create_default_context(cafile=self._creds.ca_file)
        if self._creds.cert_file and self._creds.key_file:
            ctx.load_cert_chain(self._creds.cert_file, self._creds.key_file)
        return ctx

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "application/json", "User-Agent": FIELD_MANAGER}
            self._session = aiohttp.ClientSession(
                base_url=self._creds.host,
                headers=headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl()),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        if self._source is not None:
            self._refresh(self._source.current())
        try:
            return await self._send(method, path, body, params, content_type)
        except ApiError as e:
            if e.status != 401 or self._source is None:
                raise
            self._refresh(self._source.reload())
            return await self._send(method, path, body, params, content_type)

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, str] | None,
        content_type: str,
    ) -> Json:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        if self._creds.token:
            headers["Authorization"] = f"Bearer {self._creds.token}"
        async with self._client().request(
            method, path, data=data, params=params, headers=headers
        ) as resp:
            text = await resp.text()
            try:
                payload: Json = json.loads(text) if text else {}
            except ValueError:  # e.g. "404 page not found" for a kind nobody serves
                payload = {"message": text.strip()}
            if resp.status >= 400:
                raise ApiError(
                    resp.status,
                    str(payload.get("message", text)),
                    reason=str(payload.get("reason", "")),
                )
            return payload

    async def apply(self, obj: Mapping[str, Any]) -> Json:
        """Server-side apply of a complete object (create or update; forced ownership)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        return await self._request(
            "PATCH",
            path,
            body=obj,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> Json | None:
        try:
            return await self._request("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(
        self, api_version: str, kind: str, namespace: str | None, *, labels: Mapping[str, str]
    ) -> list[Json]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        payload = await self._request(
            "GET", resource_path(api_version, kind, namespace), params={"labelSelector": selector}
        )
        return list(payload.get("items") or [])

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        grace_period: int | None = None,
    ) -> bool:
        """Delete one object (background propagation); False when it was already gone.
        ``grace_period`` 0: at once, as for a pod whose node no longer exists (no kubelet
        will ever confirm its end)."""
        body: Json = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            await self._request(
                "DELETE", resource_path(api_version, kind, namespace, name), body=body
            )
        except ApiError as e:
            if e.not_found:
                return False
            raise
        return True

    async def delete_collection(
        self, api_version: str, kind: str, namespace: str, *, labels: Mapping[str, str]
    ) -> None:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        await self._request(
            "DELETE",
            resource_path(api_version, kind, namespace),
            params={"labelSelector": selector},
        )

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> Json:
        """Merge-patch the status subresource of one of our custom resources."""
        path = resource_path(api_version, kind, namespace, name) + "/status"
        return await self._request(
            "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
        )
