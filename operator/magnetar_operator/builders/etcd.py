"""The managed etcd ensemble: headless peer Service, client Service, StatefulSet, PDB.

Members are named by ordinal and find each other through the headless Service's stable
DNS names; the initial cluster is therefore known from the replica count alone (which the
CRD makes immutable: etcd membership changes are not a StatefulSet scale).
"""

from __future__ import annotations

from magnetar_operator.builders import common, security
from magnetar_operator.builders.common import ETCD_CLIENT_PORT, ETCD_PEER_PORT, Owner
from magnetar_operator.spec import ClusterSpec, Json

COMPONENT = "etcd"
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
"""etcd's requests when ``spec.metadata.etcd.resources`` gives none (not BestEffort: the
metadata store is the last thing to evict)."""
METRICS_PORT = 2381
TLS_DIR = "/etc/etcd/tls"


def peer_service_name(owner: Owner) -> str:
    return owner.name_of(COMPONENT)


def client_service_name(owner: Owner) -> str:
    return owner.name_of("etcd-client")


def metadata_store_url(owner: Owner, spec: ClusterSpec) -> str:
    """What brokers and bookies get as their metadata URL: ``etcd://host:port[,host:port]``,
    or with ``spec.tls`` Pulsar's ``etcd:https://host:port[,...]`` (the client certificate
    and CA come from the etcd settings file, :func:`security.etcd_client_settings`)."""
    if not spec.metadata.managed:
        hosts = [e.split("://", 1)[-1].rstrip("/") for e in spec.metadata.external_endpoints]
    else:
        hosts = [f"{client_service_name(owner)}.{owner.namespace}.svc:{ETCD_CLIENT_PORT}"]
    if spec.tls.enabled:
        return "etcd:" + ",".join(f"https://{h}" for h in hosts)
    return "etcd://" + ",".join(hosts)


def _scheme(spec: ClusterSpec) -> str:
    return "https" if spec.tls.enabled else "http"


def _member_url(owner: Owner, ordinal: int, port: int, scheme: str = "http") -> str:
    sts = owner.name_of(COMPONENT)
    return f"{scheme}://{sts}-{ordinal}.{peer_service_name(owner)}.{owner.namespace}.svc:{port}"


def initial_cluster(owner: Owner, replicas: int, scheme: str = "http") -> str:
    sts = owner.name_of(COMPONENT)
    return ",".join(
        f"{sts}-{i}={_member_url(owner, i, ETCD_PEER_PORT, scheme)}" for i in range(replicas)
    )


def tls_flags() -> list[str]:
    """etcd's flags for ``spec.tls``: clients and peers need a certificate from the cluster's
    CA; etcd re-reads its certificate files at each new handshake, so a renewal needs no
    restart."""
    crt, key, ca = (
        f"{TLS_DIR}/{f}" for f in (security.TLS_CERT, security.TLS_KEY, security.CA_CERT)
    )
    return [
        f"--cert-file={crt}",
        f"--key-file={key}",
        f"--trusted-ca-file={ca}",
        "--client-cert-auth",
        f"--peer-cert-file={crt}",
        f"--peer-key-file={key}",
        f"--peer-trusted-ca-file={ca}",
        "--peer-client-cert-auth",
    ]


def peer_service(owner: Owner) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT, name=peer_service_name(owner)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": [
                {"name": "client", "port": ETCD_CLIENT_PORT, "targetPort": "client"},
                {"name": "peer", "port": ETCD_PEER_PORT, "targetPort": "peer"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"},
            ],
        },
    }


def client_service(owner: Owner) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT, name=client_service_name(owner)),
        "spec": {
            "type": "ClusterIP",
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": [{"name": "client", "port": ETCD_CLIENT_PORT, "targetPort": "client"}],
        },
    }


def statefulset(owner: Owner, spec: ClusterSpec) -> Json:
    md = spec.metadata
    pod_sc, container_sc = common.security_context()
    domain = f"{peer_service_name(owner)}.{owner.namespace}.svc"
    s = _scheme(spec)
    command = [
        "etcd",
        "--name=$(POD_NAME)",
        "--data-dir=/var/lib/etcd/data",
        f"--listen-client-urls={s}://0.0.0.0:{ETCD_CLIENT_PORT}",
        f"--advertise-client-urls={s}://$(POD_NAME).{domain}:{ETCD_CLIENT_PORT}",
        f"--listen-peer-urls={s}://0.0.0.0:{ETCD_PEER_PORT}",
        f"--initial-advertise-peer-urls={s}://$(POD_NAME).{domain}:{ETCD_PEER_PORT}",
        # the probes' port: plaintext, /health and /metrics only
        f"--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}",
        f"--initial-cluster={initial_cluster(owner, md.etcd_replicas, s)}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={owner.name}-{owner.uid[:8]}",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1h",
    ]
    mounts: list[Json] = [{"name": "data", "mountPath": "/var/lib/etcd"}]
    if spec.tls.enabled:
        command += tls_flags()
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    container: Json = {
        "name": "etcd",
        "image": spec.images.etcd,
        "imagePullPolicy": spec.images.pull_policy,
        "command": command,
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [
            {"name": "client", "containerPort": ETCD_CLIENT_PORT},
            {"name": "peer", "containerPort": ETCD_PEER_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        "readinessProbe": common.http_probe("/health", "metrics", period=5),
        "livenessProbe": common.http_probe("/health", "metrics", period=10, failures=6, initial=15),
        "volumeMounts": mounts,
        "securityContext": container_sc,
    }
    container["resources"] = md.etcd_resources.to_k8s(default_requests=DEFAULT_REQUESTS)
    pod_spec: Json = {
        "securityContext": pod_sc,
        "containers": [container],
        **common.spread(owner, COMPONENT, topology_key="kubernetes.io/hostname", hard=False),
    }
    if spec.tls.enabled:
        pod_spec["volumes"] = [security.tls_volume(owner, COMPONENT)]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": common.metadata(owner, COMPONENT),
        "spec": {
            "serviceName": peer_service_name(owner),
            "replicas": md.etcd_replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": common.selector_labels(owner, COMPONENT)},
            "template": {
                "metadata": {"labels": common.labels(owner, COMPONENT)},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [
                common.volume_claim(
                    "data", size=md.etcd_storage.size, storage_class=md.etcd_storage.storage_class
                )
            ],
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": spec.reclaim_policy,
                "whenScaled": "Retain",
            },
        },
    }


def build(owner: Owner, spec: ClusterSpec) -> list[Json]:
    """The etcd objects, or none when the metadata store is external."""
    if not spec.metadata.managed:
        return []
    return [
        peer_service(owner),
        client_service(owner),
        statefulset(owner, spec),
        common.pdb(owner, COMPONENT),
    ]
