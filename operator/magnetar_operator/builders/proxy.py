"""The proxy: ConfigMap (proxy.conf), Deployment, Service (ClusterIP/NodePort/LoadBalancer).

Why: clients outside Kubernetes reach one address. ``magnetar proxy`` (the broker image)
finds the brokers in the cluster's metadata store, answers lookups itself and forwards each
client connection to the owning broker, and forwards the admin API; its Service is what
users expose (``spec.proxy.service.type``, NodePorts by name).

With ``spec.tls`` the proxy listens on TLS only (6651, 8443) with a certificate of its own
(its Service's names and addresses), reaches etcd and the brokers over TLS and trusts the
cluster's CA; with ``spec.auth`` it authenticates clients' tokens itself and acts towards
the brokers with the operator-minted ``magnetar-proxy`` token, a role the brokers list in
``proxyRoles`` -- so each broker authorizes the client the proxy forwards, as in Pulsar
(docs/security.md, "The proxy").
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

COMPONENT = "proxy"
CONFIG_FILE = "proxy.conf"
CONFIG_DIR = "/etc/magnetar/proxy"
TLS_DIR = "/etc/magnetar/tls"
AUTH_DIR = "/etc/magnetar/auth"
ETCD_SETTINGS = "etcd.yaml"
READINESS_PATH = "/status.html"
"""200 once the proxy knows a live broker (``magnetar.proxy.http``); needs no credentials,
so the probe works with ``spec.auth`` too."""


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
    """proxy.conf: only keys ``magnetar proxy --config`` consumes (a unit test feeds every
    rendered key through its loader); ``spec.tls`` adds :func:`tls_config`, ``spec.auth``
    token authentication of clients and the proxy's own token; the user's keys win."""
    data = {
        "metadataStoreUrl": etcd.metadata_store_url(owner, spec),
        "bindAddress": "0.0.0.0",
        "servicePort": str(BROKER_PORT),
        "webServicePort": str(HTTP_PORT),
    }
    data.update(tls_config(spec))
    if spec.auth.enabled:
        data.update(
            security.token_authentication(
                auth_dir=AUTH_DIR, verify_key=verification.item, token=security.PROXY_TOKEN
            )
        )
    data.update(spec.proxy.config)
    return data


def tls_config(spec: ClusterSpec) -> dict[str, str]:
    """proxy.conf keys of ``spec.tls``: TLS listeners only (the plaintext ports off), the
    certificate re-read every minute, TLS to the brokers and to etcd trusting the cluster's
    CA, with the proxy's certificate as the client certificate (etcd requires one)."""
    if not spec.tls.enabled:
        return {}
    crt, key, ca = (
        f"{TLS_DIR}/{f}" for f in (security.TLS_CERT, security.TLS_KEY, security.CA_CERT)
    )
    return {
        "servicePort": "",
        "webServicePort": "",
        "servicePortTls": str(BROKER_TLS_PORT),
        "webServicePortTls": str(HTTPS_PORT),
        "tlsCertificateFilePath": crt,
        "tlsKeyFilePath": key,
        "tlsTrustCertsFilePath": ca,
        "tlsCertRefreshCheckDurationSec": "60",
        "tlsEnabledWithBroker": "true",
        "brokerClientTrustCertsFilePath": ca,
        "brokerClientCertificateFilePath": crt,
        "brokerClientKeyFilePath": key,
        "metadataStoreConfigPath": f"{CONFIG_DIR}/{ETCD_SETTINGS}",
    }


def args(spec: ClusterSpec) -> list[str]:
    return ["proxy", f"--config={CONFIG_DIR}/{CONFIG_FILE}", *spec.proxy.extra_args]


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


def deployment(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> Json:
    pod_sc, container_sc = common.security_context()
    binary, web = (name for name, _ in _ports(spec))
    mounts: list[Json] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes: list[Json] = [{"name": "config", "configMap": {"name": owner.name_of(COMPONENT)}}]
    if spec.tls.enabled:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(security.tls_volume(owner, COMPONENT))
    if spec.auth.enabled:
        mounts.append({"name": "auth", "mountPath": AUTH_DIR, "readOnly": True})
        volumes.append(
            security.auth_volume(
                owner, spec, verify_key=verification.item, token=security.PROXY_TOKEN
            )
        )
    container: Json = {
        "name": "proxy",
        "image": spec.images.broker,
        "imagePullPolicy": spec.images.pull_policy,
        "args": args(spec),
        "ports": [{"name": n, "containerPort": p} for n, p in _ports(spec)],
        "readinessProbe": common.http_probe(READINESS_PATH, web, period=5),
        "livenessProbe": {
            "tcpSocket": {"port": binary},
            "periodSeconds": 10,
            "failureThreshold": 6,
            "timeoutSeconds": 5,
        },
        "volumeMounts": mounts,
        "securityContext": container_sc,
    }
    if spec.proxy.resources.to_k8s():
        container["resources"] = spec.proxy.resources.to_k8s()
    pod_spec: Json = {
        "securityContext": pod_sc,
        "terminationGracePeriodSeconds": 10,
        "containers": [container],
        "volumes": volumes,
        **common.spread(owner, COMPONENT, topology_key="kubernetes.io/hostname", hard=False),
    }
    return common.surge_deployment(
        owner,
        COMPONENT,
        version=spec.version,
        replicas=spec.proxy.replicas,
        # the key's digest too: a new signing key restarts the proxies, which read it once
        config={
            **config_data(owner, spec, verification=verification),
            "#tokenKey": verification.digest,
        },
        pod_spec=pod_spec,
        pull_secrets=spec.images.pull_secrets,
    )


def service(owner: Owner, spec: ClusterSpec) -> Json:
    ports: list[Json] = []
    for name, port in _ports(spec):
        entry: Json = {"name": name, "port": port, "targetPort": name}
        if spec.proxy.service_type != "ClusterIP" and name in spec.proxy.node_ports:
            entry["nodePort"] = spec.proxy.node_ports[name]
        ports.append(entry)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(owner, COMPONENT, name=service_name(owner)),
        "spec": {
            "type": spec.proxy.service_type,
            "selector": common.selector_labels(owner, COMPONENT),
            "ports": ports,
        },
    }


def build(
    owner: Owner, spec: ClusterSpec, *, verification: tokens.Verification = tokens.NO_VERIFICATION
) -> list[Json]:
    return [
        config_map(owner, spec, verification=verification),
        deployment(owner, spec, verification=verification),
        service(owner, spec),
        common.pdb(owner, COMPONENT),
    ]
