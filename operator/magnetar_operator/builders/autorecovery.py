"""Autorecovery: ``magnetar autorecovery`` as a Deployment of its own, with ``spec.tls``.

Why: the auditor and the re-replication workers (docs/operations.md, "Autorecovery and
decommission") restore a lost bookie's copies and finish the decommissions the operator
starts before it removes a bookie. Without ``spec.tls`` every bookie runs them in-process
(``autoRecoveryDaemonEnabled``, ``builders.bookie``). A TLS bookie refuses that, so with
``spec.tls`` they run here instead, as Pulsar's chart runs its autorecovery component: the
broker image (``magnetar``), a client certificate of its own (``<cluster>-autorecovery-tls``,
from the cluster's CA, which the bookies and etcd require of their clients) presented to
etcd (``--metadata-tls-*``) and to the bookies (``--bookkeeper-tls-*``). It serves only
``/health`` (its probes) and ``/metrics`` on port 8001, behind a headless Service whose port
is named ``http`` like the brokers' and bookies', so the chart's ServiceMonitor and
``spec.monitoring`` scrape it (``builders.monitoring``); it needs nothing of the Kubernetes
API (no service-account token is mounted). Its replicas are auditor candidates (one
elected) and workers (one claim per ledger), so more than one is safe.
"""

from __future__ import annotations

from magnetar_operator.builders import common, etcd, security
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec, Json

COMPONENT = "autorecovery"
HTTP_PORT = 8001
"""``magnetar autorecovery --http-port``: ``/health`` and ``/metrics``."""
TLS_DIR = "/etc/magnetar/tls"
DEFAULT_REQUESTS = {"cpu": "50m", "memory": "128Mi"}
"""Requests when ``spec.autorecovery.resources`` gives none: it copies entries only while
a bookie is lost or decommissioning."""


def enabled(spec: ClusterSpec) -> bool:
    """Whether the cluster gets this Deployment: with ``spec.tls`` (without it, the bookies
    run autorecovery in-process)."""
    return spec.tls.enabled


BOOKIE_CONFIG_FLAGS = {
    "auditorLostBookieRecoveryDelay": "--lost-bookie-recovery-delay",  # Magnetar's earlier name
    "lostBookieRecoveryDelay": "--lost-bookie-recovery-delay",  # after it: BookKeeper's wins
    "auditorPeriodicCheckInterval": "--periodic-check-interval",
    "openLedgerRereplicationGracePeriod": "--open-ledger-grace",
    "replicationRateByBytes": "--replication-rate-by-bytes",
    "minNumRacksPerWriteQuorum": "--min-racks-per-write-quorum",
    "enforceMinNumRacksPerWriteQuorum": "--enforce-min-racks-per-write-quorum",
}
"""bookkeeper.conf keys of the auditor and the workers (``spec.bookies.config``, which
in-process autorecovery reads) -> the flags of ``magnetar autorecovery``: the same settings
apply with and without ``spec.tls``."""
MILLISECOND_KEYS = frozenset({"openLedgerRereplicationGracePeriod"})
"""Keys BookKeeper gives in milliseconds; their flags take seconds."""


def config_flags(spec: ClusterSpec) -> list[str]:
    """The autorecovery settings of ``spec.bookies.config`` as flags. A millisecond value
    that is not a number is passed as it is, for ``magnetar autorecovery`` to refuse by
    name."""
    out = []
    for key, flag in BOOKIE_CONFIG_FLAGS.items():
        value = spec.bookies.config.get(key)
        if value is None:
            continue
        if key in MILLISECOND_KEYS:
            try:
                value = repr(float(value) / 1000.0)
            except ValueError:
                pass
        out.append(f"{flag}={value}")
    return out


def args(owner: Owner, spec: ClusterSpec) -> list[str]:
    """``magnetar autorecovery`` arguments: the cluster's etcd, mutual TLS to etcd and to the
    bookies with the mounted certificate, the autorecovery settings of
    ``spec.bookies.config`` (:func:`config_flags`), then ``spec.autorecovery.extraArgs``
    (the last of a repeated flag wins)."""
    crt, key, ca = (
        f"{TLS_DIR}/{f}" for f in (security.TLS_CERT, security.TLS_KEY, security.CA_CERT)
    )
    return [
        "autorecovery",
        f"--metadata-url={etcd.metadata_store_url(owner, spec)}",
        f"--http-port={HTTP_PORT}",
        f"--metadata-tls-trust-certs-file={ca}",
        f"--metadata-tls-certificate-file={crt}",
        f"--metadata-tls-key-file={key}",
        "--bookkeeper-tls-client-authentication=true",
        f"--bookkeeper-tls-trust-certs-file={ca}",
        f"--bookkeeper-tls-certificate-file={crt}",
        f"--bookkeeper-tls-key-file={key}",
        *config_flags(spec),
        *spec.autorecovery.extra_args,
    ]


def deployment(owner: Owner, spec: ClusterSpec) -> Json:
    pod_sc, container_sc = common.security_context()
    container: Json = {
        "name": COMPONENT,
        "image": spec.images.broker,
        "imagePullPolicy": spec.images.pull_policy,
        "args": args(owner, spec),
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        # /health answers once the process reached etcd and started its auditor and worker
        "readinessProbe": common.http_probe("/health", "http", period=10),
        "livenessProbe": common.http_probe("/health", "http", period=10, failures=6, initial=10),
        "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
        "securityContext": container_sc,
        "resources": spec.autorecovery.resources.to_k8s(default_requests=DEFAULT_REQUESTS),
    }
    pod_spec: Json = {
        "securityContext": pod_sc,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [security.tls_volume(owner, COMPONENT)],
        **common.spread(owner, COMPONENT, topology_key="kubernetes.io/hostname", hard=False),
    }
    return common.surge_deployment(
        owner,
        COMPONENT,
        version=spec.version,
        replicas=spec.autorecovery.replicas,
        config={"args": "\n".join(container["args"])},
        pod_spec=pod_spec,
        pull_secrets=spec.images.pull_secrets,
    )


def service(owner: Owner) -> Json:
    """Headless: what selects the pods' ``/metrics`` for a ServiceMonitor; no client uses
    it."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT),
        "spec": {
            "clusterIP": "None",
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}],
        },
    }


def build(owner: Owner, spec: ClusterSpec) -> list[Json]:
    """The Deployment and its Service with ``spec.tls``; nothing without it."""
    return [deployment(owner, spec), service(owner)] if enabled(spec) else []
