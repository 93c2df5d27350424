"""Brokers: ConfigMap (broker.conf), Deployment, client Service (6650/8080), PDB.

Brokers hold no durable state, so a plain Deployment with a surge-only rolling update is
right for them: a new broker is Ready before an old one goes, and topics move by lookup.
"""

from __future__ import annotations

from magnetar_operator import tokens
from magnetar_operator.builders import common, etcd, security
from magnetar_operator.builders.common import (
    BROKER_PORT,
    BROKER_TLS_PORT,
    HTTP_PORT,
    HTTPS_PORT,
    Owner,
)
from magnetar_operator.spec import ClusterSpec, Json

COMPONENT = "broker"
CONFIG_FILE = "broker.conf"
CONFIG_DIR = "/etc/magnetar/conf"
TLS_DIR = "/etc/magnetar/tls"
AUTH_DIR = "/etc/magnetar/auth"
ETCD_SETTINGS = "etcd.yaml"
READINESS_PATH = "/status.html"
"""200 while the broker holds its metadata session; needs no credentials (Pulsar's
status page), so the probe works with ``spec.auth`` too."""


def service_name(owner: Owner) -> str:
    return owner.name_of(COMPONENT)


def service_url(owner: Owner, spec: ClusterSpec) -> str:
    host = f"{service_name(owner)}.{owner.namespace}.svc"
    if spec.tls.enabled:
        return f"pulsar+ssl://{host}:{BROKER_TLS_PORT}"
    return f"pulsar://{host}:{BROKER_PORT}"


def admin_url(owner: Owner, spec: ClusterSpec) -> str:
    host = f"{service_name(owner)}.{owner.namespace}.svc"
    if spec.tls.enabled:
        return f"https://{host}:{HTTPS_PORT}"
    return f"http://{host}:{HTTP_PORT}"


def config_data(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> dict[str, str]:
    """broker.conf properties (Pulsar's key names); the user's overrides win.

    Only keys ``magnetar broker --config`` consumes (a unit test feeds every rendered key
    through its loader). ``spec.tls`` and ``spec.auth`` add :func:`tls_config` and
    :func:`security.auth_config` (``verification``: the signing Secret's key brokers verify
    tokens with). ``spec.offload`` becomes the managedLedgerOffload* /
    s3ManagedLedgerOffload* keys (docs/offload.md); its credentials Secret reaches the
    brokers as AWS environment variables (:func:`deployment`)."""
    bk = spec.bookies
    data = {
        "clusterName": owner.name,
        "metadataStoreUrl": etcd.metadata_store_url(owner, spec),
        "bindAddress": "0.0.0.0",
        "brokerServicePort": str(BROKER_PORT),
        "webServicePort": str(HTTP_PORT),
        "managedLedgerDefaultEnsembleSize": str(bk.ensemble_size),
        "managedLedgerDefaultWriteQuorum": str(bk.write_quorum),
        "managedLedgerDefaultAckQuorum": str(bk.ack_quorum),
        # `functions create` writes a Function resource (docs/functions.md, "On Kubernetes"):
        # the brokers' service account may (functions_role)
        "magnetarFunctionsRuntime": "kubernetes",
    }
    data.update(tls_config(spec))
    if spec.auth.enabled:
        data.update(security.auth_config(spec, auth_dir=AUTH_DIR, verify_key=verification.item))
    data.update(offload_config(spec))
    data.update(spec.brokers.config)
    return data


def tls_config(spec: ClusterSpec) -> dict[str, str]:
    """broker.conf keys of ``spec.tls``: TLS listeners only (the plaintext ports are off),
    the broker's certificate re-read every minute, and TLS with the same certificate as a
    client of the bookies (mutual), of etcd and of other brokers."""
    if not spec.tls.enabled:
        return {}
    crt, key, ca = (
        f"{TLS_DIR}/{f}" for f in (security.TLS_CERT, security.TLS_KEY, security.CA_CERT)
    )
    return {
        "brokerServicePort": "",
        "webServicePort": "",
        "brokerServicePortTls": str(BROKER_TLS_PORT),
        "webServicePortTls": str(HTTPS_PORT),
        "tlsCertificateFilePath": crt,
        "tlsKeyFilePath": key,
        "tlsTrustCertsFilePath": ca,
        "tlsCertRefreshCheckDurationSec": "60",
        "brokerClientTlsEnabled": "true",
        "brokerClientTrustCertsFilePath": ca,
        "brokerClientCertificateFilePath": crt,
        "brokerClientKeyFilePath": key,
        "bookkeeperTLSClientAuthentication": "true",
        "bookkeeperTLSCertificateFilePath": crt,
        "bookkeeperTLSKeyFilePath": key,
        "bookkeeperTLSTrustCertsFilePath": ca,
        "metadataStoreConfigPath": f"{CONFIG_DIR}/{ETCD_SETTINGS}",
    }


def offload_config(spec: ClusterSpec) -> dict[str, str]:
    """broker.conf keys of ``spec.offload`` (empty when offload is off). An endpoint means
    an S3-compatible store (driver ``S3``, path-style URLs, as MinIO wants); none means AWS."""
    off = spec.offload
    if not off.enabled:
        return {}
    data = {
        "managedLedgerOffloadDriver": "S3" if off.endpoint else "aws-s3",
        "s3ManagedLedgerOffloadBucket": str(off.bucket),
        "s3ManagedLedgerOffloadRegion": off.region,
        "managedLedgerOffloadThresholdInBytes": str(off.threshold_bytes),
        "managedLedgerOffloadThresholdInSeconds": str(off.threshold_seconds),
        "managedLedgerOffloadDeletionLagMs": str(off.deletion_lag_seconds * 1000),
    }
    if off.endpoint:
        data["s3ManagedLedgerOffloadServiceEndpoint"] = off.endpoint
        data["magnetarOffloadPathStyle"] = "true"
    return data


def args(owner: Owner, spec: ClusterSpec) -> list[str]:
    """``magnetar broker`` arguments: the mounted broker.conf, the pod's own address (which a
    shared ConfigMap cannot hold), the worker processes when more than one
    (``spec.brokers.workers``, ``auto``: from the CPU limit), then ``spec.brokers.extraArgs``
    (flags override the file)."""
    workers = spec.brokers.worker_count()
    return [
        "broker",
        f"--config={CONFIG_DIR}/{CONFIG_FILE}",
        "--advertised-address=$(POD_IP)",
        *([f"--workers={workers}"] if workers > 1 else []),
        *spec.brokers.extra_args,
    ]


def config_map(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> Json:
    files = {ETCD_SETTINGS: security.etcd_client_settings(TLS_DIR)} if spec.tls.enabled else None
    return common.config_map(
        owner,
        COMPONENT,
        filename=CONFIG_FILE,
        data=config_data(owner, spec, verification=verification),
        files=files,
    )


def _ports(spec: ClusterSpec) -> list[tuple[str, int]]:
    if spec.tls.enabled:
        return [("pulsar-tls", BROKER_TLS_PORT), ("https", HTTPS_PORT)]
    return [("pulsar", BROKER_PORT), ("http", HTTP_PORT)]


def _web_port(spec: ClusterSpec) -> str:
    return "https" if spec.tls.enabled else "http"


def deployment(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> Json:
    pod_sc, container_sc = common.security_context()
    mounts: list[Json] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108  (an emptyDir, per pod)
    ]
    volumes: list[Json] = [
        {"name": "config", "configMap": {"name": owner.name_of(COMPONENT)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.tls.enabled:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(security.tls_volume(owner, COMPONENT))
    if spec.auth.enabled:
        mounts.append({"name": "auth", "mountPath": AUTH_DIR, "readOnly": True})
        volumes.append(
            security.auth_volume(
                owner, spec, verify_key=verification.item, token=security.BROKER_TOKEN
            )
        )
    container: Json = {
        "name": "broker",
        "image": spec.images.broker,
        "imagePullPolicy": spec.images.pull_policy,
        "args": args(owner, spec),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": n, "containerPort": p} for n, p in _ports(spec)],
        # Ready = serving: a metadata session (the bookies are reached per ledger)
        "readinessProbe": common.http_probe(READINESS_PATH, _web_port(spec), period=5),
        "livenessProbe": common.http_probe(
            "/metrics", _web_port(spec), period=10, failures=6, initial=30
        ),
        "volumeMounts": mounts,
        "securityContext": container_sc,
    }
    if spec.offload.enabled and spec.offload.credentials_secret:
        container["envFrom"] = [{"secretRef": {"name": spec.offload.credentials_secret}}]
    if spec.brokers.resources.to_k8s():
        container["resources"] = spec.brokers.resources.to_k8s()
    pod_spec: Json = {
        "serviceAccountName": service_account_name(owner),
        "securityContext": pod_sc,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": volumes,
        **common.spread(owner, COMPONENT, topology_key="kubernetes.io/hostname", hard=False),
    }
    if spec.brokers.node_selector:
        pod_spec["nodeSelector"] = dict(spec.brokers.node_selector)
    return common.surge_deployment(
        owner,
        COMPONENT,
        version=spec.version,
        replicas=spec.brokers.replicas,
        # the key's digest too: a new signing key restarts the brokers, which read it once
        config={
            **config_data(owner, spec, verification=verification),
            "#tokenKey": verification.digest,
        },
        pod_spec=pod_spec,
        pull_secrets=spec.images.pull_secrets,
    )


def service(owner: Owner, spec: ClusterSpec) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT, name=service_name(owner)),
        "spec": {
            "type": "ClusterIP",
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": [{"name": n, "port": p, "targetPort": n} for n, p in _ports(spec)],
        },
    }


def service_account_name(owner: Owner) -> str:
    return owner.name_of(COMPONENT)


FUNCTIONS_RULE: Json = {
    "apiGroups": ["compute.functionmesh.io"],
    "resources": ["functions"],
    "verbs": ["get", "list", "create", "patch", "delete"],
}
"""What the brokers' runtime of functions does with Function resources, and no more."""


def service_account(owner: Owner) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": common.metadata(owner, COMPONENT, name=service_account_name(owner)),
    }


def functions_role(owner: Owner) -> Json:
    """The brokers may write the namespace's Function resources (``functions create`` on a
    broker writes one: ``magnetarFunctionsRuntime=kubernetes``), nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": common.metadata(owner, COMPONENT, name=owner.name_of("broker-functions")),
        "rules": [FUNCTIONS_RULE],
    }


def functions_role_binding(owner: Owner) -> Json:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": common.metadata(owner, COMPONENT, name=owner.name_of("broker-functions")),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": owner.name_of("broker-functions"),
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": service_account_name(owner),
                "namespace": owner.namespace,
            }
        ],
    }


def build_workload(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> list[Json]:
    return [
        service_account(owner),
        functions_role(owner),
        functions_role_binding(owner),
        config_map(owner, spec, verification=verification),
        deployment(owner, spec, verification=verification),
        common.pdb(owner, COMPONENT),
    ]


def build_services(owner: Owner, spec: ClusterSpec) -> list[Json]:
    return [service(owner, spec)]
