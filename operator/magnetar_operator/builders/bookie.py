"""Bookies: headless Service, ConfigMap, StatefulSet (journal + ledger PVCs), PDB, rack map.

The StatefulSet uses ``updateStrategy: OnDelete``: Kubernetes never restarts a bookie on
its own. The operator's rollout step (``magnetar_operator.rollout``) deletes one outdated
pod at a time, and only when every bookie is Ready, so a spec change can never take two
bookies (and with them a write quorum) down together.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar_operator.builders import common, etcd, security
from magnetar_operator.builders.common import BOOKIE_HTTP_PORT, BOOKIE_PORT, Owner
from magnetar_operator.spec import ClusterSpec, Json

COMPONENT = "bookie"
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "512Mi"}
"""A bookie's requests when ``spec.bookies.resources`` gives none: the scheduler counts
the journal's and the entry logs' memory, and the pod is not the first evicted under
memory pressure (a data pod with no requests is BestEffort)."""
CONFIG_FILE = "bookkeeper.conf"
CONFIG_DIR = "/etc/magnetar"
JOURNAL_DIR = "/var/lib/magnetar/journal"
LEDGERS_DIR = "/var/lib/magnetar/ledgers"
RACKS_DIR = "/etc/magnetar-racks"
TLS_DIR = "/etc/magnetar-tls"
ETCD_SETTINGS = "etcd.yaml"


def service_name(owner: Owner) -> str:
    return owner.name_of(COMPONENT)


def config_data(owner: Owner, spec: ClusterSpec) -> dict[str, str]:
    """bookkeeper.conf properties (mounted at /etc/magnetar): ours, then the user's. Only
    keys ``magnetar bookie --config`` consumes (a unit test feeds each through its loader);
    the rack comes from the rack map through the image's entrypoint, not from here."""
    data = {
        "metadataServiceUri": etcd.metadata_store_url(owner, spec),
        "bookiePort": str(BOOKIE_PORT),
        "httpServerPort": str(BOOKIE_HTTP_PORT),
        "journalDirectories": JOURNAL_DIR,
        "ledgerDirectories": LEDGERS_DIR,
    }
    if not spec.tls.enabled:
        # An auditor candidate and a recovery worker in every bookie: what re-replicates a
        # lost bookie's ledgers and finishes the decommissions the operator starts
        # (docs/operations.md, "Autorecovery and decommission"). A TLS bookie refuses it:
        # with spec.tls they run in the autorecovery Deployment (builders.autorecovery).
        data["autoRecoveryDaemonEnabled"] = "true"
    data.update(tls_config(spec))
    data.update(spec.bookies.config)
    return data


def tls_config(spec: ClusterSpec) -> dict[str, str]:
    """bookkeeper.conf keys of ``spec.tls``: the gRPC port serves TLS and requires a client
    certificate from the cluster's CA; etcd is reached with the bookie's own certificate."""
    if not spec.tls.enabled:
        return {}
    return {
        "tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
        "tlsCertificatePath": f"{TLS_DIR}/{security.TLS_CERT}",
        "tlsKeyStore": f"{TLS_DIR}/{security.TLS_KEY}",
        "tlsTrustStore": f"{TLS_DIR}/{security.CA_CERT}",
        "tlsClientAuthentication": "true",
        "metadataStoreConfigPath": f"{CONFIG_DIR}/{ETCD_SETTINGS}",
    }


def config_map(owner: Owner, spec: ClusterSpec) -> Json:
    files = {ETCD_SETTINGS: security.etcd_client_settings(TLS_DIR)} if spec.tls.enabled else None
    return common.config_map(
        owner, COMPONENT, filename=CONFIG_FILE, data=config_data(owner, spec), files=files
    )


def service(owner: Owner) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT, name=service_name(owner)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": [
                {"name": "bookie", "port": BOOKIE_PORT, "targetPort": "bookie"},
                {"name": "http", "port": BOOKIE_HTTP_PORT, "targetPort": "http"},
            ],
        },
    }


def advertised_host(owner: Owner, pod: str) -> str:
    """The address bookie pod ``pod`` advertises (its bookie id is this, a colon, its port):
    how the operator finds a pod's bookie in the cluster's bookie list."""
    return f"{pod}.{service_name(owner)}.{owner.namespace}.svc"


def claim_names(pod: str) -> tuple[str, str]:
    """The PersistentVolumeClaims the StatefulSet creates for bookie pod ``pod``."""
    return f"journal-{pod}", f"ledgers-{pod}"


def args(owner: Owner, spec: ClusterSpec) -> list[str]:
    """``magnetar bookie`` arguments: the mounted bookkeeper.conf, the pod's own address
    (which a shared ConfigMap cannot hold), then ``spec.bookies.extraArgs`` (flags override
    the file)."""
    out = [
        "bookie",
        f"--config={CONFIG_DIR}/{CONFIG_FILE}",
        f"--advertised-address={advertised_host(owner, '$(POD_NAME)')}",
    ]
    out += spec.bookies.extra_args
    return out


def statefulset(owner: Owner, spec: ClusterSpec, *, replicas: int | None = None) -> Json:
    """The bookie StatefulSet; ``replicas`` overrides the spec during a stepwise scale-down."""
    bk = spec.bookies
    pod_sc, container_sc = common.security_context()
    env: list[Json] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    mounts: list[Json] = [
        {"name": "journal", "mountPath": JOURNAL_DIR},
        {"name": "ledgers", "mountPath": LEDGERS_DIR},
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
    if bk.rack.enabled:
        # The image's entrypoint waits for racks/$POD_NAME (written by the operator once
        # the pod is on a node) and passes it as --rack.
        env.append({"name": "MAGNETAR_RACK_FILE", "value": f"{RACKS_DIR}/$(POD_NAME)"})
        mounts.append({"name": "racks", "mountPath": RACKS_DIR, "readOnly": True})
        volumes.append(
            {"name": "racks", "configMap": {"name": rack_map_name(owner), "optional": True}}
        )
    container: Json = {
        "name": "bookie",
        "image": spec.images.bookie,
        "imagePullPolicy": spec.images.pull_policy,
        "args": args(owner, spec),
        "env": env,
        "ports": [
            {"name": "bookie", "containerPort": BOOKIE_PORT},
            {"name": "http", "containerPort": BOOKIE_HTTP_PORT},
        ],
        "readinessProbe": common.http_probe("/health", "http", period=5),
        "livenessProbe": common.http_probe("/health", "http", period=10, failures=6, initial=30),
        "volumeMounts": mounts,
        "securityContext": container_sc,
    }
    container["resources"] = bk.resources.to_k8s(default_requests=DEFAULT_REQUESTS)
    pod_spec: Json = {
        "securityContext": pod_sc,
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": volumes,
        **common.spread(
            owner,
            COMPONENT,
            topology_key=bk.rack.topology_key if bk.rack.enabled else "kubernetes.io/hostname",
            hard=bk.rack.enabled,
        ),
    }
    if bk.node_selector:
        pod_spec["nodeSelector"] = dict(bk.node_selector)
    if spec.images.pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.images.pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": common.metadata(owner, COMPONENT, version=spec.version),
        "spec": {
            "serviceName": service_name(owner),
            "replicas": bk.replicas if replicas is None else replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": common.selector_labels(owner, COMPONENT)},
            "template": {
                "metadata": {
                    "labels": common.labels(owner, COMPONENT, spec.version),
                    "annotations": {
                        common.CONFIG_HASH_ANNOTATION: common.config_hash(config_data(owner, spec))
                    },
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [
                common.volume_claim(
                    "journal", size=bk.journal.size, storage_class=bk.journal.storage_class
                ),
                common.volume_claim(
                    "ledgers", size=bk.ledgers.size, storage_class=bk.ledgers.storage_class
                ),
            ],
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": spec.reclaim_policy,
                "whenScaled": "Retain",
            },
        },
    }


def rack_map_name(owner: Owner) -> str:
    return owner.name_of("bookie-racks")


def rack_map(owner: Owner, racks: Mapping[str, str]) -> Json:
    """ConfigMap ``<cluster>-bookie-racks``: bookie pod name -> rack (its node's label)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": common.metadata(owner, COMPONENT, name=rack_map_name(owner)),
        "data": {pod: f"/{rack}" for pod, rack in sorted(racks.items())},
    }


def build(owner: Owner, spec: ClusterSpec, *, replicas: int | None = None) -> list[Json]:
    return [
        config_map(owner, spec),
        service(owner),
        statefulset(owner, spec, replicas=replicas),
        common.pdb(owner, COMPONENT),
    ]
