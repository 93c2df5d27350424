"""Function instances as Kubernetes ``Function`` resources: the runtime of brokers that run
under the operator (docs/functions.md, "On Kubernetes").

Every ``poll_interval_s`` the runtime reads the function records (:mod:`.registry`) and makes
the namespace's ``Function`` resources (Function Mesh's ``compute.functionmesh.io/v1alpha1``,
``crds/function.yaml``) match them: each function is one resource (:func:`resource`: Pulsar's
``FunctionConfig`` in Function Mesh's names, ``clusterRef`` to the brokers' PulsarCluster,
``replicas`` = parallelism, 0 when every instance is stopped), applied with server-side apply;
a resource this runtime made (label ``app.kubernetes.io/managed-by: magnetar-broker``)
whose function is gone is deleted. The operator turns each resource into pods; the status it
writes back (``status.instances``) is what :meth:`KubernetesRuntime.instances` answers
(running, restarts, the container's error, the pod as ``workerId``). Resources applied by
hand, without the label, are never touched.

Talks to the API server over HTTPS with a bearer token read from a file on each request (a
projected service-account token rotates): :meth:`ApiServer.in_cluster` is the pod's own
service account. ``magnetar broker --functions-runtime kubernetes`` runs it; the operator
sets that flag on a PulsarCluster's brokers and gives them a service account allowed to
write Functions only (docs/functions.md). Every broker of the cluster runs the same rounds;
they agree because each applies the same resource for a record, and a resource is deleted
only when its record is absent in a read made after the listing (:meth:`reconcile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp

from magnetar.functions import registry
from magnetar.functions.config import FunctionName
from magnetar.functions.runtime import InstanceState
from magnetar.metadata import api

log = logging.getLogger(__name__)

GROUP: Final = "compute.functionmesh.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
MANAGED_BY: Final = "magnetar-broker"
FQFN_ANNOTATION: Final = "magnetar.dev/fqfn"
POLL_INTERVAL_S: Final = 2.0
SERVICE_ACCOUNT_DIR_ENV: Final = "MAGNETAR_KUBERNETES_SERVICEACCOUNT_DIR"
"""Where the pod's service-account files are (token, ca.crt, namespace); default Kubernetes'
mount point."""
SERVICE_ACCOUNT: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
STATS_UNAVAILABLE: Final = (
    "stats of instances running as Kubernetes pods are not collected yet: their counters "
    "stay in the pods (status says whether each runs)"
)
MAX_NAME: Final = 40
"""Longest resource name: the StatefulSet's pods add ``-function-NNN`` within 63 characters."""


class KubernetesError(Exception):
    """The API server refused a request, or cannot be reached (the reason names which)."""


@dataclass(frozen=True)
class ApiServer:
    url: str
    token_file: Path | None = None
    ca_file: Path | None = None

    @classmethod
    def in_cluster(cls) -> ApiServer:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise KubernetesError("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST is not set")
        host = f"[{host}]" if ":" in host else host
        account = service_account_dir()
        return cls(f"https://{host}:{port}", account / "token", account / "ca.crt")


def service_account_dir() -> Path:
    return Path(os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT)


def pod_namespace() -> str:
    """The pod's own namespace (its service account's ``namespace`` file)."""
    path = service_account_dir() / "namespace"
    try:
        namespace = path.read_text().strip()
    except OSError as err:
        raise KubernetesError(f"cannot read the pod's namespace from {path}: {err}") from None
    if not namespace:
        raise KubernetesError(f"{path} is empty")
    return namespace


def resource_name(name: FunctionName) -> str:
    """A DNS label for the function: ``tenant-namespace-name`` lowercased, what is not
    ``[a-z0-9-]`` replaced, and a digest of the fully qualified name when that changed it
    or it is too long (so two functions never share a resource)."""
    plain = f"{name.tenant}-{name.namespace}-{name.name}"
    label = re.sub(r"[^a-z0-9-]", "-", plain.lower()).strip("-")
    if label == plain and len(label) <= MAX_NAME:
        return label
    digest = hashlib.sha256(name.fqfn.encode()).hexdigest()[:8]
    return f"{label[: MAX_NAME - 9].rstrip('-')}-{digest}"


def _quantity_cpu(cores: float) -> str:
    return f"{round(float(cores) * 1000)}m"


def resource(function: registry.Function, *, namespace: str, cluster_ref: str) -> dict[str, Any]:
    """The ``Function`` resource of a function record (Pulsar's names to Function Mesh's)."""
    config = function.config
    name = function.name
    spec: dict[str, Any] = {
        "clusterRef": {"name": cluster_ref},
        "tenant": name.tenant,
        "namespace": name.namespace,
        "name": name.name,
        "className": config["className"],
        "replicas": 0 if len(function.stopped) >= function.parallelism else function.parallelism,
        "input": {
            k: v
            for k, v in (
                ("topics", list(config.get("inputs") or ())),
                ("topicPattern", config.get("topicsPattern")),
                ("customSerdeSources", dict(config.get("customSerdeInputs") or {})),
            )
            if v
        },
        "python": {"py": function.record["package"]["file"]},
        "processingGuarantee": str(config.get("processingGuarantees", "ATLEAST_ONCE")).lower(),
        "subscriptionName": config.get("subName"),
        "subscriptionPosition": str(config.get("subscriptionPosition", "Latest")).lower(),
        "autoAck": bool(config.get("autoAck", True)),
        "retainOrdering": bool(config.get("retainOrdering", False)),
        "retainKeyOrdering": bool(config.get("retainKeyOrdering", False)),
        "forwardSourceMessageProperty": bool(config.get("forwardSourceMessageProperty", True)),
        "funcConfig": dict(config.get("userConfig") or {}),
    }
    output = {
        k: v
        for k, v in (
            ("topic", config.get("output")),
            ("sinkSerdeClassName", config.get("outputSerdeClassName")),
        )
        if v
    }
    if output:
        spec["output"] = output
    for key, field_name in (
        ("logTopic", "logTopic"),
        ("deadLetterTopic", "deadLetterTopic"),
        ("maxMessageRetries", "maxMessageRetry"),
        ("timeoutMs", "timeout"),
    ):
        if config.get(key) is not None:
            spec[field_name] = config[key]
    # Pulsar's Kubernetes secrets: name -> {"path": Secret, "key": item}
    secrets = {
        k: {"path": str(v["path"]), "key": str(v["key"])}
        for k, v in (config.get("secrets") or {}).items()
        if isinstance(v, dict) and v.get("path") and v.get("key")
    }
    if secrets:
        spec["secretsMap"] = secrets
    res = config.get("resources") or {}
    if res.get("cpu") or res.get("ram"):
        amounts = {
            k: v
            for k, v in (
                ("cpu", _quantity_cpu(res["cpu"]) if res.get("cpu") else None),
                ("memory", str(int(res["ram"])) if res.get("ram") else None),
            )
            if v
        }
        spec["resources"] = {"requests": amounts, "limits": dict(amounts)}
    return {
        "apiVersion": API_VERSION,
        "kind": "Function",
        "metadata": {
            "name": resource_name(name),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {FQFN_ANNOTATION: name.fqfn},
        },
        "spec": {k: v for k, v in spec.items() if v is not None},
    }


def instance_states(body: dict[str, Any] | None, parallelism: int) -> dict[int, InstanceState]:
    """Each instance's state from a resource's ``status.instances`` (the operator's)."""
    if body is None:
        why = "the Function resource is not created yet"
        return {i: InstanceState(running=False, error=why) for i in range(parallelism)}
    found = {int(i["instanceId"]): i for i in (body.get("status") or {}).get("instances") or ()}
    out = {}
    for i in range(parallelism):
        item = found.get(i)
        if item is None:
            out[i] = InstanceState(running=False, error="no pod yet")
            continue
        out[i] = InstanceState(
            running=bool(item.get("running")),
            error=str(item.get("error") or ""),
            restarts=int(item.get("restarts") or 0),
            worker_id=str(item.get("pod") or ""),
            counted=False,
        )
    return out


@dataclass
class KubernetesRuntime:
    """A :class:`magnetar.functions.runtime.Runtime` writing ``Function`` resources."""

    store: api.MetadataStore
    server: ApiServer
    namespace: str
    cluster_ref: str
    poll_interval_s: float = POLL_INTERVAL_S
    stats_unavailable: str | None = field(default=STATS_UNAVAILABLE, init=False)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """fqfn -> the last resource read (its status included)."""
    _session: aiohttp.ClientSession | None = None
    _task: asyncio.Task[None] | None = None

    # --- the Runtime protocol ----------------------------------------------------------------

    def instances(self, name: FunctionName, parallelism: int) -> dict[int, InstanceState]:
        return instance_states(self.resources.get(name.fqfn), parallelism)

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="functions-kubernetes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except (KubernetesError, api.StoreUnavailableError) as err:
                log.warning("functions on Kubernetes: %s", err)
            except Exception:
                log.exception("functions on Kubernetes: reconcile failed")
            await asyncio.sleep(self.poll_interval_s)

    async def reconcile(self) -> None:
        """One round: a resource per function record, none for a deleted one."""
        functions = {f.name.fqfn: f for f in await registry.all_functions(self.store)}
        for function in functions.values():
            body = resource(function, namespace=self.namespace, cluster_ref=self.cluster_ref)
            await self._request(
                "PATCH",
                self._path(body["metadata"]["name"]),
                body,
                params={"fieldManager": MANAGED_BY, "force": "true"},
                content_type="application/apply-patch+yaml",
            )
        listing = await self._request(
            "GET",
            self._path(None),
            params={"labelSelector": f"app.kubernetes.io/managed-by={MANAGED_BY}"},
        )
        seen: dict[str, dict[str, Any]] = {}
        orphans: dict[str, dict[str, Any]] = {}
        for item in listing.get("items") or ():
            fqfn = (item["metadata"].get("annotations") or {}).get(FQFN_ANNOTATION, "")
            (seen if fqfn in functions else orphans)[fqfn] = item
        if orphans:
            # Another broker may have created a function (and applied its resource) after
            # this round read the records: a resource is an orphan only if its record is
            # still absent now, read after the listing.
            current = {f.name.fqfn for f in await registry.all_functions(self.store)}
            for fqfn, item in orphans.items():
                if fqfn in current:
                    seen[fqfn] = item
                else:
                    await self._request("DELETE", self._path(item["metadata"]["name"]))
        self.resources = seen

    # --- the API server ----------------------------------------------------------------------

    def _path(self, name: str | None) -> str:
        ns = urllib.parse.quote(self.namespace, safe="")
        path = f"/apis/{API_VERSION}/namespaces/{ns}/functions"
        return path if name is None else f"{path}/{urllib.parse.quote(name, safe='')}"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            ssl_context: ssl.SSLContext | bool = True
            if self.server.ca_file is not None:
                ssl_context = ssl.create_default_context(cafile=str(self.server.ca_file))
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_context),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if self.server.token_file is not None:
            try:
                token = self.server.token_file.read_text().strip()
            except OSError as err:
                raise KubernetesError(
                    f"cannot read the token {self.server.token_file}: {err}"
                ) from None
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            async with self._client().request(
                method, self.server.url + path, data=data, headers=headers, params=params
            ) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise KubernetesError(f"cannot reach {self.server.url}: {err}") from None
        if response.status == 404 and method == "DELETE":
            return {}
        if response.status >= 300:
            try:
                reason = str(json.loads(text).get("message", text))
            except ValueError:
                reason = text
            raise KubernetesError(f"{method} {path}: {response.status} {reason}")
        payload: dict[str, Any] = json.loads(text) if text else {}
        return payload
