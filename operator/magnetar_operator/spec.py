"""The PulsarCluster spec as typed, frozen values with the CRD's defaults.

The API server applies the CRD's structural defaults, but builders must not depend on that
(unit tests and older stored objects pass partial specs), so ``ClusterSpec.parse`` fills the
same defaults. A unit test checks these against crds/pulsarcluster.yaml.

The image defaults are the exception: the CRD declares none for ``spec.image.registry`` and
``spec.image.etcd``, so that one operator setting, ``MAGNETAR_OPERATOR_IMAGE_REGISTRY`` (the
chart's ``global.imageRegistry``, read at import), moves every cluster that names no
images of its own to a private registry. Without it the images are ``magnetar/<name>``,
the names ``make images`` builds and loads into local clusters.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

DEFAULT_VERSION = "0.1.0"
ETCD_VERSION = "v3.5.21"
"""The tag of the default etcd image (``make images`` builds ``magnetar/etcd:<it>``)."""
IMAGE_REGISTRY_ENV = "MAGNETAR_OPERATOR_IMAGE_REGISTRY"


def image_prefix(registry: str) -> str:
    """Where the default images live: ``magnetar`` (``magnetar/broker:<version>`` ...), or
    ``<registry>/magnetar`` under a private registry."""
    registry = registry.strip().rstrip("/")
    return f"{registry}/magnetar" if registry else "magnetar"


DEFAULT_REGISTRY = image_prefix(os.environ.get(IMAGE_REGISTRY_ENV, ""))


def _sub(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def _str_map(raw: Mapping[str, Any], key: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _sub(raw, key).items()}


@dataclass(frozen=True)
class Volume:
    """One PersistentVolumeClaim template: size and (optional) storage class."""

    size: str
    storage_class: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, default_size: str) -> Volume:
        return cls(
            size=str(raw.get("size", default_size)), storage_class=raw.get("storageClassName")
        )


@dataclass(frozen=True)
class Resources:
    """Container resource requests/limits, passed through verbatim."""

    requests: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Resources:
        return cls(requests=dict(_sub(raw, "requests")), limits=dict(_sub(raw, "limits")))

    def to_k8s(self, *, default_requests: Mapping[str, str] | None = None) -> Json:
        """The container's ``resources``; ``default_requests`` when neither requests nor
        limits are given (with limits only, Kubernetes takes them as the requests)."""
        out: Json = {}
        if self.requests:
            out["requests"] = dict(self.requests)
        elif default_requests and not self.limits:
            out["requests"] = dict(default_requests)
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


@dataclass(frozen=True)
class Images:
    broker: str
    bookie: str
    etcd: str
    pull_policy: str
    pull_secrets: tuple[str, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, version: str) -> Images:
        """``registry`` (a prefix: ``reg.example.com/magnetar``) defaults to the operator's
        (``DEFAULT_REGISTRY``); broker, bookie and etcd default to images under it."""
        registry = str(raw.get("registry") or DEFAULT_REGISTRY).rstrip("/")
        return cls(
            broker=str(raw.get("broker") or f"{registry}/broker:{version}"),
            bookie=str(raw.get("bookie") or f"{registry}/bookie:{version}"),
            etcd=str(raw.get("etcd") or f"{registry}/etcd:{ETCD_VERSION}"),
            pull_policy=str(raw.get("pullPolicy", "IfNotPresent")),
            pull_secrets=tuple(str(s) for s in raw.get("pullSecrets", ())),
        )


AUTO = "auto"
MAX_BROKER_WORKERS = 64


def cpu_cores(quantity: object) -> float:
    """A Kubernetes CPU quantity (``2``, ``"1.5"``, ``"1500m"``) in cores; ValueError naming
    it when it is none."""
    text = str(quantity).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise ValueError(f"resources.limits.cpu {text!r} is not a CPU quantity") from None


@dataclass(frozen=True)
class Brokers:
    replicas: int
    resources: Resources
    config: dict[str, str]
    node_selector: dict[str, str]
    extra_args: tuple[str, ...] = ()
    workers: int | str = AUTO
    """Broker processes per pod (``magnetar broker --workers``), or ``auto`` (the default):
    one per whole core of the CPU limit (1 without a limit, or with advertisedListeners)."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Brokers:
        workers = raw.get("workers", AUTO)
        return cls(
            replicas=int(raw.get("replicas", 2)),
            resources=Resources.parse(_sub(raw, "resources")),
            config=_str_map(raw, "config"),
            extra_args=tuple(str(a) for a in raw.get("extraArgs", ())),
            node_selector=_str_map(raw, "nodeSelector"),
            workers=AUTO if workers == AUTO else int(workers),
        )

    def worker_count(self) -> int:
        """The processes each broker pod runs: ``workers``, or with ``auto`` the CPU limit's
        whole cores (at least 1, at most :data:`MAX_BROKER_WORKERS`); ``auto`` is 1 when
        ``config`` sets ``advertisedListeners``, which the broker refuses with workers (a
        listener names one address)."""
        if self.workers != AUTO:
            return int(self.workers)
        cpu = self.resources.limits.get("cpu")
        if cpu is None or self.config.get("advertisedListeners"):
            return 1
        return max(1, min(MAX_BROKER_WORKERS, int(cpu_cores(cpu))))


@dataclass(frozen=True)
class Proxy:
    """``magnetar proxy`` in front of the brokers: one Service for clients outside."""

    enabled: bool = False
    replicas: int = 1
    service_type: str = "ClusterIP"
    node_ports: dict[str, int] = field(default_factory=dict)
    """``pulsar`` / ``http`` (``pulsar-tls`` / ``https`` with TLS) -> nodePort (NodePort and
    LoadBalancer services)."""
    certificate_names: tuple[str, ...] = ()
    """With ``spec.tls``: more names and addresses in the proxy's certificate."""
    resources: Resources = field(default_factory=lambda: Resources.parse({}))
    config: dict[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Proxy:
        svc = _sub(raw, "service")
        return cls(
            enabled=bool(raw.get("enabled", False)),
            replicas=int(raw.get("replicas", 1)),
            service_type=str(svc.get("type", "ClusterIP")),
            node_ports={str(k): int(v) for k, v in _sub(svc, "nodePorts").items()},
            certificate_names=tuple(str(n) for n in raw.get("certificateNames", ())),
            resources=Resources.parse(_sub(raw, "resources")),
            config=_str_map(raw, "config"),
            extra_args=tuple(str(a) for a in raw.get("extraArgs", ())),
        )


@dataclass(frozen=True)
class RackAwareness:
    enabled: bool = False
    topology_key: str = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class Bookies:
    replicas: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    journal: Volume
    ledgers: Volume
    rack: RackAwareness
    resources: Resources
    config: dict[str, str]
    node_selector: dict[str, str]
    extra_args: tuple[str, ...] = ()
    node_loss_policy: str = "Manual"
    """Manual | Replace: what the operator does about a bookie whose node or local volume
    is gone (``magnetar_operator.rollout.node_loss``)."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Bookies:
        rack = _sub(raw, "rackAwareness")
        return cls(
            replicas=int(raw.get("replicas", 3)),
            ensemble_size=int(raw.get("ensembleSize", 2)),
            write_quorum=int(raw.get("writeQuorum", 2)),
            ack_quorum=int(raw.get("ackQuorum", 2)),
            journal=Volume.parse(_sub(raw, "journal"), default_size="10Gi"),
            ledgers=Volume.parse(_sub(raw, "ledgers"), default_size="50Gi"),
            rack=RackAwareness(
                enabled=bool(rack.get("enabled", False)),
                topology_key=str(rack.get("topologyKey", "topology.kubernetes.io/zone")),
            ),
            resources=Resources.parse(_sub(raw, "resources")),
            config=_str_map(raw, "config"),
            node_selector=_str_map(raw, "nodeSelector"),
            extra_args=tuple(str(a) for a in raw.get("extraArgs", ())),
            node_loss_policy=str(raw.get("nodeLossPolicy", "Manual")),
        )


@dataclass(frozen=True)
class Autorecovery:
    """``magnetar autorecovery`` as a Deployment of its own (the auditor candidates and the
    re-replication workers), rendered with ``spec.tls``: a TLS bookie does not run them
    in-process (``builders.autorecovery``)."""

    replicas: int = 1
    resources: Resources = field(default_factory=lambda: Resources.parse({}))
    extra_args: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Autorecovery:
        return cls(
            replicas=int(raw.get("replicas", 1)),
            resources=Resources.parse(_sub(raw, "resources")),
            extra_args=tuple(str(a) for a in raw.get("extraArgs", ())),
        )


@dataclass(frozen=True)
class Metadata:
    mode: str
    etcd_replicas: int
    etcd_storage: Volume
    etcd_resources: Resources
    external_endpoints: tuple[str, ...]

    @property
    def managed(self) -> bool:
        return self.mode == "managed"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Metadata:
        etcd = _sub(raw, "etcd")
        return cls(
            mode=str(raw.get("mode", "managed")),
            etcd_replicas=int(etcd.get("replicas", 3)),
            etcd_storage=Volume.parse(_sub(etcd, "storage"), default_size="10Gi"),
            etcd_resources=Resources.parse(_sub(etcd, "resources")),
            external_endpoints=tuple(str(e) for e in raw.get("externalEndpoints", ())),
        )


@dataclass(frozen=True)
class Offload:
    enabled: bool
    endpoint: str | None
    bucket: str | None
    region: str
    credentials_secret: str | None
    threshold_bytes: int
    threshold_seconds: int
    deletion_lag_seconds: int

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Offload:
        return cls(
            enabled=bool(raw.get("enabled", False)),
            endpoint=raw.get("endpoint"),
            bucket=raw.get("bucket"),
            region=str(raw.get("region", "us-east-1")),
            credentials_secret=raw.get("credentialsSecret"),
            threshold_bytes=int(raw.get("thresholdBytes", 1 << 30)),
            threshold_seconds=int(raw.get("thresholdSeconds", 3600)),
            deletion_lag_seconds=int(raw.get("deletionLagSeconds", 14400)),
        )


def duration_seconds(text: str) -> int:
    """cert-manager's duration form, as the CRD allows it: ``2160h``, ``90m``, ``3600s`` or
    a sum of those (``1h30m``)."""
    total, number = 0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for ch in text.strip():
        if ch.isdigit():
            number += ch
        elif ch in units and number:
            total += int(number) * units[ch]
            number = ""
        else:
            raise ValueError(f"duration {text!r}: expected e.g. 2160h, 90m or 1h30m")
    if number or total <= 0:
        raise ValueError(f"duration {text!r}: expected e.g. 2160h, 90m or 1h30m")
    return total


@dataclass(frozen=True)
class IssuerRef:
    """A cert-manager issuer: the operator then asks cert-manager for the certificates."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True)
class Tls:
    """``spec.tls``: every listener and internal hop over TLS, with certificates from a
    cert-manager issuer (``issuer``) or, without one, from the operator's own CA."""

    enabled: bool = False
    issuer: IssuerRef | None = None
    duration_s: int = 2160 * 3600
    renew_before_s: int = 720 * 3600

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Tls:
        ref = _sub(raw, "issuerRef")
        issuer = None
        if ref.get("name"):
            issuer = IssuerRef(
                name=str(ref["name"]),
                kind=str(ref.get("kind", "Issuer")),
                group=str(ref.get("group", "cert-manager.io")),
            )
        return cls(
            enabled=bool(raw.get("enabled", False)),
            issuer=issuer,
            duration_s=duration_seconds(str(raw.get("duration", "2160h"))),
            renew_before_s=duration_seconds(str(raw.get("renewBefore", "720h"))),
        )


@dataclass(frozen=True)
class Auth:
    """``spec.auth``: token authentication and authorization. ``secret_name`` holds the
    signing key (generated by the operator when the Secret does not exist)."""

    enabled: bool = False
    secret_name: str | None = None
    super_user_roles: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Auth:
        return cls(
            enabled=bool(raw.get("enabled", False)),
            secret_name=raw.get("secretName"),
            super_user_roles=tuple(str(r) for r in raw.get("superUserRoles", ())),
        )


@dataclass(frozen=True)
class Monitoring:
    enabled: bool = False
    kind: str = "ServiceMonitor"
    interval: str = "30s"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSpec:
    """Everything the builders need to know about one PulsarCluster."""

    version: str
    images: Images
    brokers: Brokers
    bookies: Bookies
    metadata: Metadata
    proxy: Proxy
    offload: Offload
    tls: Tls
    auth: Auth
    monitoring: Monitoring
    reclaim_policy: str
    autorecovery: Autorecovery = field(default_factory=lambda: Autorecovery.parse({}))

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ClusterSpec:
        raw = raw or {}
        version = str(raw.get("version", DEFAULT_VERSION))
        mon = _sub(raw, "monitoring")
        return cls(
            version=version,
            images=Images.parse(_sub(raw, "image"), version=version),
            brokers=Brokers.parse(_sub(raw, "brokers")),
            bookies=Bookies.parse(_sub(raw, "bookies")),
            metadata=Metadata.parse(_sub(raw, "metadata")),
            proxy=Proxy.parse(_sub(raw, "proxy")),
            offload=Offload.parse(_sub(raw, "offload")),
            tls=Tls.parse(_sub(raw, "tls")),
            auth=Auth.parse(_sub(raw, "auth")),
            monitoring=Monitoring(
                enabled=bool(mon.get("enabled", False)),
                kind=str(mon.get("kind", "ServiceMonitor")),
                interval=str(mon.get("interval", "30s")),
                labels=_str_map(mon, "labels"),
            ),
            reclaim_policy=str(_sub(raw, "persistence").get("reclaimPolicy", "Retain")),
            autorecovery=Autorecovery.parse(_sub(raw, "autorecovery")),
        )
