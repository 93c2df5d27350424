"""The proxy: ConfigMap (proxy.conf), Deployment, Service (ClusterIP/NodePort/LoadBalancer).

Why: clients outside Kubernetes reach one address. ``magnetar proxy`` (the broker image)
finds the brokers in the cluster's metadata store, answers lookups itself and forwards each
client connection to the owning broker, and forwards the admin API; its Service is what
users expose (``spec.proxy.service.type``, NodePorts by name).
"""

from __future__ import annotations

from magnetar_operator.builders import common, etcd
from magnetar_operator.builders.common import BROKER_PORT, HTTP_PORT, Owner
from magnetar_operator.spec import ClusterSpec, Json

COMPONENT = "proxy"
CONFIG_FILE = "proxy.conf"
CONFIG_DIR = "/etc/magnetar/proxy"
READINESS_PATH = "/status.html"
"""200 once the proxy knows a live broker (``magnetar.proxy.http``)."""


def service_name(owner: Owner) -> str:
    return owner.name_of(COMPONENT)


def service_url(owner: Owner) -> str:
    return f"pulsar://{service_name(owner)}.{owner.namespace}.svc:{BROKER_PORT}"


def admin_url(owner: Owner) -> str:
    return f"http://{service_name(owner)}.{owner.namespace}.svc:{HTTP_PORT}"


def config_data(owner: Owner, spec: ClusterSpec) -> dict[str, str]:
    """proxy.conf: only keys ``magnetar proxy --config`` consumes; the user's win."""
    data = {
        "metadataStoreUrl": etcd.metadata_store_url(owner, spec),
        "bindAddress": "0.0.0.0",
        "servicePort": str(BROKER_PORT),
        "webServicePort": str(HTTP_PORT),
    }
    data.update(spec.proxy.config)
    return data


def args(spec: ClusterSpec) -> list[str]:
    return ["proxy", f"--config={CONFIG_DIR}/{CONFIG_FILE}", *spec.proxy.extra_args]


def config_map(owner: Owner, spec: ClusterSpec) -> Json:
    return common.config_map(owner, COMPONENT, filename=CONFIG_FILE, data=config_data(owner, spec))


def deployment(owner: Owner, spec: ClusterSpec) -> Json:
    pod_sc, container_sc = common.security_context()
    container: Json = {
        "name": "proxy",
        "image": spec.images.broker,
        "imagePullPolicy": spec.images.pull_policy,
        "args": args(spec),
        "ports": [
            {"name": "pulsar", "containerPort": BROKER_PORT},
            {"name": "http", "containerPort": HTTP_PORT},
        ],
        "readinessProbe": common.http_probe(READINESS_PATH, "http", period=5),
        "livenessProbe": {
            "tcpSocket": {"port": "pulsar"},
            "periodSeconds": 10,
            "failureThreshold": 6,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": container_sc,
    }
    if spec.proxy.resources.to_k8s():
        container["resources"] = spec.proxy.resources.to_k8s()
    pod_spec: Json = {
        "securityContext": pod_sc,
        "terminationGracePeriodSeconds": 10,
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": owner.name_of(COMPONENT)}}],
        **common.spread(owner, COMPONENT, topology_key="kubernetes.io/hostname", hard=False),
    }
    return common.surge_deployment(
        owner,
        COMPONENT,
        version=spec.version,
        replicas=spec.proxy.replicas,
        config=config_data(owner, spec),
        pod_spec=pod_spec,
        pull_secrets=spec.images.pull_secrets,
    )


def service(owner: Owner, spec: ClusterSpec) -> Json:
    ports: list[Json] = []
    for name, port in (("pulsar", BROKER_PORT), ("http", HTTP_PORT)):
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


def build(owner: Owner, spec: ClusterSpec) -> list[Json]:
    return [
        config_map(owner, spec),
        deployment(owner, spec),
        service(owner, spec),
        common.pdb(owner, COMPONENT),
    ]
