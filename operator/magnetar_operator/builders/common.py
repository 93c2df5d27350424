"""Names, labels, owner references and the ConfigMap helpers every builder shares."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar_operator.spec import Json

GROUP = "magnetar.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = "magnetar-operator"
CONFIG_HASH_ANNOTATION = f"{GROUP}/config-hash"

BROKER_PORT = 6650
BROKER_TLS_PORT = 6651
HTTP_PORT = 8080
HTTPS_PORT = 8443
BOOKIE_PORT = 3181
BOOKIE_HTTP_PORT = 8000
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380


@dataclass(frozen=True)
class Owner:
    """The PulsarCluster that owns the built objects."""

    name: str
    namespace: str
    uid: str
    kind: str = "PulsarCluster"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Owner:
        meta = body["metadata"]
        return cls(
            name=str(meta["name"]),
            namespace=str(meta["namespace"]),
            uid=str(meta["uid"]),
            kind=str(body.get("kind", "PulsarCluster")),
        )

    def name_of(self, component: str) -> str:
        """``<cluster>-<component>``: the name of a component's objects."""
        return f"{self.name}-{component}"

    def owner_reference(self) -> Json:
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def selector_labels(owner: Owner, component: str) -> dict[str, str]:
    """The labels that select one component's pods (immutable once a workload exists)."""
    return {
        "app.kubernetes.io/name": "magnetar",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/component": component,
    }


def labels(owner: Owner, component: str, version: str | None = None) -> dict[str, str]:
    out = {**selector_labels(owner, component), "app.kubernetes.io/managed-by": MANAGED_BY}
    if version:
        out["app.kubernetes.io/version"] = version
    return out


def metadata(
    owner: Owner, component: str, *, name: str | None = None, version: str | None = None
) -> Json:
    return {
        "name": name or owner.name_of(component),
        "namespace": owner.namespace,
        "labels": labels(owner, component, version),
        "ownerReferences": [owner.owner_reference()],
    }


def config_hash(data: Mapping[str, str]) -> str:
    """A stable digest of ConfigMap data: put on pod templates so config changes roll pods."""
    blob = json.dumps(dict(data), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def render_properties(data: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted: the format of broker.conf / bookkeeper.conf."""
    return "".join(f"{k}={v}\n" for k, v in sorted(data.items()))


def config_map(
    owner: Owner,
    component: str,
    *,
    filename: str,
    data: Mapping[str, str],
    files: Mapping[str, str] | None = None,
) -> Json:
    """The component's properties file (``filename``), plus other ``files`` verbatim (the
    etcd settings file of ``spec.tls``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, component),
        "data": {filename: render_properties(data), **(files or {})},
    }


def pdb(owner: Owner, component: str, *, max_unavailable: int = 1) -> Json:
    """A PodDisruptionBudget: voluntary evictions (drains) take at most one pod at a time."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, component),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": selector_labels(owner, component)},
        },
    }


def volume_claim(name: str, *, size: str, storage_class: str | None) -> Json:
    spec: Json = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def spread(owner: Owner, component: str, *, topology_key: str, hard: bool) -> Json:
    """Pod anti-affinity per node plus a topology spread over ``topology_key``.

    ``hard`` makes the spread a scheduling requirement (rack awareness); otherwise pods are
    only preferred apart, so small clusters (kind, one node) still schedule.
    """
    sel = {"matchLabels": selector_labels(owner, component)}
    anti: Json
    if hard:
        anti = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": sel, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    else:
        anti = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": sel,
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    return {
        "affinity": {"podAntiAffinity": anti},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": topology_key,
                "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
                "labelSelector": sel,
            }
        ],
    }


def security_context() -> tuple[Json, Json]:
    """(pod, container) security contexts: non-root, read-only root, no privileges."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


def http_probe(
    path: str, port: str, *, period: int = 10, failures: int = 3, initial: int = 0
) -> Json:
    probe: Json = {
        "httpGet": {"path": path, "port": port, **({"scheme": "HTTPS"} if port == "https" else {})},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }
    if initial:
        probe["initialDelaySeconds"] = initial
    return probe


def surge_deployment(
    owner: Owner,
    component: str,
    *,
    version: str,
    replicas: int,
    config: Mapping[str, str],
    pod_spec: Json,
    pull_secrets: tuple[str, ...] = (),
) -> Json:
    """A Deployment of a stateless component (brokers, the proxy): surge one, never fewer
    than ``replicas`` available; a config change changes the template (hash annotation)."""
    if pull_secrets:
        pod_spec = {**pod_spec, "imagePullSecrets": [{"name": s} for s in pull_secrets]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, component, version=version),
        "spec": {
            "replicas": replicas,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "selector": {"matchLabels": selector_labels(owner, component)},
            "template": {
                "metadata": {
                    "labels": labels(owner, component, version),
                    "annotations": {CONFIG_HASH_ANNOTATION: config_hash(config)},
                },
                "spec": pod_spec,
            },
        },
    }
