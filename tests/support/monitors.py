"""The chart's ServiceMonitor / PodMonitor objects as a plain Prometheus scrape config, the
way the Prometheus Operator turns them into one, so that a Prometheus outside the cluster
(started by the tests, no Prometheus Operator installed) scrapes the pods exactly as the
chart's monitors tell an in-cluster one to.

Why this module exists: the chart ships its scrape definitions as Prometheus Operator
objects (helm/magnetar/templates/servicemonitor.yaml, and the operator's per-component ones,
operator/magnetar_operator/builders/monitoring.py); the Kubernetes suite proves them on the
real cluster (e2e/observability_k8s.py) by translating them here:

* a ServiceMonitor endpoint becomes a job ``serviceMonitor/<namespace>/<name>/<i>`` with
  ``kubernetes_sd_configs`` role ``endpoints`` in the monitor's namespaces, its
  ``selector`` as ``keep`` relabelings on the Service's labels, its ``port`` as a ``keep``
  on the endpoint's port name, its path, scheme, TLS settings, interval and honorLabels;
* a PodMonitor endpoint becomes ``podMonitor/<namespace>/<name>/<i>``, role ``pod``, the
  selector on the pod's labels and the port on the container port's name;
* the target labels the Prometheus Operator attaches: ``namespace``, ``service``, ``pod``,
  ``container``, ``endpoint``, ``job`` (the Service's name; ``<namespace>/<name>`` for a
  PodMonitor), ``instance`` left as Prometheus sets it (the pod's address), pods Failed or
  Succeeded dropped.

A Prometheus with Kubernetes discovery reaches the API server with the credentials of a
kubeconfig (:func:`api_access`). Debian's Prometheus is built without it, so the suite does
the discovery here (:func:`role_targets`: the target groups and ``__meta_kubernetes_*``
labels Prometheus' discovery makes from Services, Endpoints and Pods) and hands the groups
to Prometheus as ``file_sd_configs`` (:func:`with_file_sd`); the relabelling, and so the
monitors' selectors, ports and target labels, is still Prometheus' own. :func:`discover`
applies the relabelling offline, on the objects the operator builds
(:func:`simulated`), so a unit test shows that every monitor selects what it should.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from magnetar_operator.builders import build_all
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "magnetar"
MONITORING_API = "monitoring.coreos.com/v1"
MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")

Json = dict[str, Any]


class UnsupportedMonitor(ValueError):
    """A monitor uses a field this translation does not carry over (named in the message)."""


# -- the chart ------------------------------------------------------------------------------


def render_chart(
    helm: Path | str,
    *,
    values: Sequence[Path],
    namespace: str,
    release: str = "magnetar",
    kube_version: str | None = None,
) -> list[Json]:
    """``helm template`` of helm/magnetar with ``values`` and the ServiceMonitor switched on
    (``monitoring.serviceMonitor.enabled``, the Prometheus Operator's API declared
    available): the objects the release installs, monitors included."""
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace]
    for v in values:
        args += ["-f", str(v)]
    args += ["--set", "monitoring.serviceMonitor.enabled=true", "--api-versions", MONITORING_API]
    if kube_version:
        args += ["--kube-version", kube_version]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"helm template {CHART.name}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def operator_objects(rendered: Iterable[Json], *, uid: str = "rendered") -> list[Json]:
    """What the operator builds (operator/magnetar_operator/builders) for every PulsarCluster
    in ``rendered``: its Services, workloads and, when the cluster's spec.monitoring asks
    for them, its own ServiceMonitors / PodMonitors."""
    out: list[Json] = []
    for doc in rendered:
        if doc.get("kind") != "PulsarCluster":
            continue
        meta = doc["metadata"]
        owner = Owner(name=meta["name"], namespace=meta["namespace"], uid=uid)
        out += build_all(owner, ClusterSpec.parse(doc.get("spec") or {}))
    return out


def monitors(objects: Iterable[Json]) -> list[Json]:
    return [d for d in objects if d.get("kind") in MONITOR_KINDS]


# -- API server access ----------------------------------------------------------------------


@dataclass(frozen=True)
class ApiAccess:
    """How Prometheus' Kubernetes discovery reaches the API server: its URL, the CA that
    signed it, and a client certificate and key or a bearer token."""

    server: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None

    def sd_fields(self) -> Json:
        tls: Json = {}
        if self.ca_file:
            tls["ca_file"] = str(self.ca_file)
        if self.cert_file and self.key_file:
            tls["cert_file"] = str(self.cert_file)
            tls["key_file"] = str(self.key_file)
        out: Json = {"api_server": self.server}
        if tls:
            out["tls_config"] = tls
        if self.token:
            out["authorization"] = {"type": "Bearer", "credentials": self.token}
        return out


def api_access(kubeconfig: Path, out_dir: Path) -> ApiAccess:
    """The current context's server and credentials in ``kubeconfig``; certificates given
    inline (``*-data``) are written to files in ``out_dir`` (Prometheus reads files)."""
    config = yaml.safe_load(kubeconfig.read_text())
    current = config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    if current in contexts:
        ctx = contexts[current]
        cluster_name, user_name = ctx["cluster"], ctx.get("user")
    else:
        cluster_name = config["clusters"][0]["name"]
        user_name = (config.get("users") or [{}])[0].get("name")
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == cluster_name)
    user: Json = next(
        (u.get("user") or {} for u in config.get("users") or [] if u["name"] == user_name), {}
    )
    out_dir.mkdir(parents=True, exist_ok=True)

    def material(section: Json, key: str, name: str) -> Path | None:
        if section.get(f"{key}-data"):
            path = out_dir / name
            path.write_bytes(base64.b64decode(section[f"{key}-data"]))
            path.chmod(0o600)
            return path
        if section.get(key):
            given = Path(section[key])
            return given if given.is_absolute() else kubeconfig.parent / given
        return None

    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    access = ApiAccess(
        server=str(cluster["server"]),
        ca_file=material(cluster, "certificate-authority", "ca.crt"),
        cert_file=material(user, "client-certificate", "client.crt"),
        key_file=material(user, "client-key", "client.key"),
        token=token,
    )
    if not (access.cert_file and access.key_file) and not access.token:
        raise ValueError(f"{kubeconfig}: user {user_name!r} has no client certificate or token")
    return access


# -- the translation ------------------------------------------------------------------------


def sanitize(label: str) -> str:
    """A Kubernetes label name as Prometheus' discovery spells it in a meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _selector_relabelings(selector: Json, meta: str) -> list[Json]:
    """``keep`` rules for a label selector on the ``meta`` object's labels (``service`` or
    ``pod``), as the Prometheus Operator writes them."""
    rules: list[Json] = []
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        name = sanitize(key)
        rules.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_{meta}_label_{name}",
                    f"__meta_kubernetes_{meta}_labelpresent_{name}",
                ],
                "regex": f"({re.escape(str(value))});true",
            }
        )
    for expr in selector.get("matchExpressions") or []:
        name = sanitize(expr["key"])
        label = f"__meta_kubernetes_{meta}_label_{name}"
        present = f"__meta_kubernetes_{meta}_labelpresent_{name}"
        values = "|".join(re.escape(str(v)) for v in expr.get("values") or [])
        op = expr["operator"]
        if op == "In":
            rules.append(
                {"action": "keep", "source_labels": [label, present], "regex": f"({values});true"}
            )
        elif op == "NotIn":
            rules.append(
                {"action": "drop", "source_labels": [label, present], "regex": f"({values});true"}
            )
        elif op == "Exists":
            rules.append({"action": "keep", "source_labels": [present], "regex": "true"})
        elif op == "DoesNotExist":
            rules.append({"action": "drop", "source_labels": [present], "regex": "true"})
        else:
            raise UnsupportedMonitor(f"selector operator {op!r} (key {expr['key']!r})")
    return rules


def _namespaces(monitor: Json) -> list[str] | None:
    """The namespaces to discover in (None: all)."""
    ns_sel = monitor["spec"].get("namespaceSelector") or {}
    if ns_sel.get("any"):
        return None
    if ns_sel.get("matchNames"):
        return [str(n) for n in ns_sel["matchNames"]]
    return [monitor["metadata"].get("namespace") or "default"]


def _tls_config(endpoint: Json, where: str) -> Json | None:
    tls = endpoint.get("tlsConfig")
    if not tls:
        return None
    out: Json = {}
    for src, dst in (
        ("caFile", "ca_file"),
        ("certFile", "cert_file"),
        ("keyFile", "key_file"),
        ("serverName", "server_name"),
        ("insecureSkipVerify", "insecure_skip_verify"),
    ):
        if src in tls:
            out[dst] = tls[src]
    refs = sorted(k for k in ("ca", "cert", "keySecret") if k in tls)
    if refs:
        raise UnsupportedMonitor(
            f"{where}: tlsConfig {refs} reference Secrets/ConfigMaps; a Prometheus outside "
            "the cluster needs them as files (caFile, certFile, keyFile)"
        )
    return out


_UNSUPPORTED_ENDPOINT_FIELDS = (
    "targetPort",
    "bearerTokenSecret",
    "authorization",
    "basicAuth",
    "oauth2",
    "params",
    "relabelings",
    "metricRelabelings",
    "proxyUrl",
)


def _job(
    monitor: Json,
    index: int,
    endpoint: Json,
    *,
    api: ApiAccess | None,
    interval: str | None,
) -> Json:
    kind = monitor["kind"]
    meta = monitor["metadata"]
    ns = meta.get("namespace") or "default"
    where = f"{kind} {ns}/{meta['name']} endpoint {index}"
    used = sorted(f for f in _UNSUPPORTED_ENDPOINT_FIELDS if endpoint.get(f))
    if used:
        raise UnsupportedMonitor(f"{where}: {used} are not translated")
    if "port" not in endpoint:
        raise UnsupportedMonitor(f"{where}: an endpoint without a port name")
    service = kind == "ServiceMonitor"
    obj = "service" if service else "pod"
    sd: Json = {"role": "endpoints" if service else "pod"}
    namespaces = _namespaces(monitor)
    if namespaces is not None:
        sd["namespaces"] = {"names": namespaces}
    if api is not None:
        sd.update(api.sd_fields())
    port_meta = (
        "__meta_kubernetes_endpoint_port_name"
        if service
        else "__meta_kubernetes_pod_container_port_name"
    )
    relabel: list[Json] = [
        *_selector_relabelings(monitor["spec"].get("selector") or {}, obj),
        {"action": "keep", "source_labels": [port_meta], "regex": re.escape(endpoint["port"])},
    ]
    if service:
        relabel += [
            {
                "source_labels": [
                    "__meta_kubernetes_endpoint_address_target_kind",
                    "__meta_kubernetes_endpoint_address_target_name",
                ],
                "separator": ";",
                "regex": "Node;(.*)",
                "replacement": "${1}",
                "target_label": "node",
            },
            {
                "source_labels": [
                    "__meta_kubernetes_endpoint_address_target_kind",
                    "__meta_kubernetes_endpoint_address_target_name",
                ],
                "separator": ";",
                "regex": "Pod;(.*)",
                "replacement": "${1}",
                "target_label": "pod",
            },
        ]
    relabel += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        *(
            [{"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"}]
            if service
            else []
        ),
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "(Failed|Succeeded)",
        },
        (
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"}
            if service
            else {"target_label": "job", "replacement": f"{ns}/{meta['name']}"}
        ),
        {"target_label": "endpoint", "replacement": str(endpoint["port"])},
    ]
    every = interval or endpoint.get("interval") or "30s"
    job: Json = {
        "job_name": f"{'serviceMonitor' if service else 'podMonitor'}/{ns}/{meta['name']}/{index}",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "kubernetes_sd_configs": [sd],
        "scrape_interval": every,
        "scrape_timeout": endpoint.get("scrapeTimeout") if interval is None else None,
        "metrics_path": endpoint.get("path") or "/metrics",
        "scheme": endpoint.get("scheme") or "http",
        "relabel_configs": relabel,
    }
    if not job["scrape_timeout"]:
        job["scrape_timeout"] = every
    tls = _tls_config(endpoint, where)
    if tls is not None:
        job["tls_config"] = tls
    return job


def scrape_configs(
    objects: Iterable[Json], *, api: ApiAccess | None = None, interval: str | None = None
) -> list[Json]:
    """One scrape job per endpoint of every ServiceMonitor / PodMonitor in ``objects``
    (module docstring); ``interval`` replaces the endpoints' own (a test's shorter one)."""
    jobs: list[Json] = []
    for monitor in monitors(objects):
        if monitor.get("apiVersion") != MONITORING_API:
            raise UnsupportedMonitor(f"{monitor['kind']}: apiVersion {monitor.get('apiVersion')}")
        key = "endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
        endpoints = monitor["spec"].get(key) or []
        if not endpoints:
            raise UnsupportedMonitor(f"{monitor['kind']} {monitor['metadata']['name']}: no {key}")
        jobs += [_job(monitor, i, ep, api=api, interval=interval) for i, ep in enumerate(endpoints)]
    return jobs


# -- discovery ------------------------------------------------------------------------------
#
# Prometheus' Kubernetes discovery, done here on Service, Endpoints and Pod objects (read from
# the API server, or made up from the workloads the operator builds): the target groups it
# would hand to the relabelling, with the same ``__meta_kubernetes_*`` labels. Debian's
# Prometheus is built without the Kubernetes discovery, so the suite gives Prometheus these
# groups through ``file_sd_configs`` (:func:`with_file_sd`) and Prometheus applies the
# translated relabelling itself; :func:`discover` applies it offline for the unit test.


def _label_meta(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in labels.items():
        out[f"{prefix}_label_{sanitize(k)}"] = str(v)
        out[f"{prefix}_labelpresent_{sanitize(k)}"] = "true"
    return out


def _pod_meta(pod: Json, container: Json, port: Json | None) -> dict[str, str]:
    meta = pod["metadata"]
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    out = {
        "__meta_kubernetes_namespace": str(meta.get("namespace") or "default"),
        "__meta_kubernetes_pod_name": str(meta["name"]),
        "__meta_kubernetes_pod_ip": str(status.get("podIP", "")),
        "__meta_kubernetes_pod_phase": str(status.get("phase", "")),
        "__meta_kubernetes_pod_ready": "true" if ready else "false",
        "__meta_kubernetes_pod_node_name": str((pod.get("spec") or {}).get("nodeName", "")),
        "__meta_kubernetes_pod_container_name": str(container["name"]),
        **_label_meta("__meta_kubernetes_pod", meta.get("labels") or {}),
    }
    if port is not None:
        out["__meta_kubernetes_pod_container_port_name"] = str(port.get("name", ""))
        out["__meta_kubernetes_pod_container_port_number"] = str(port["containerPort"])
        out["__meta_kubernetes_pod_container_port_protocol"] = str(port.get("protocol", "TCP"))
    return out


def _of_kind(objects: Iterable[Json], kind: str) -> list[Json]:
    return [o for o in objects if o.get("kind") == kind]


def pod_targets(objects: Iterable[Json]) -> list[dict[str, str]]:
    """Role ``pod``: one target per container port of every pod with an address."""
    return [
        {
            "__address__": f"{pod['status']['podIP']}:{port['containerPort']}",
            **_pod_meta(pod, container, port),
        }
        for pod in _of_kind(objects, "Pod")
        if (pod.get("status") or {}).get("podIP")
        for container in pod["spec"]["containers"]
        for port in container.get("ports") or []
    ]


def endpoints_targets(objects: Iterable[Json]) -> list[dict[str, str]]:
    """Role ``endpoints``: one target per address and port of every Endpoints object, with
    its Service's labels and, for an address of a pod, the pod's and the container port's.
    (Prometheus also lists the pods' other container ports, without an endpoint port name:
    every monitor's port rule drops those, so they are not made here.)"""
    objects = list(objects)
    services = {
        (o["metadata"].get("namespace") or "default", o["metadata"]["name"]): o
        for o in _of_kind(objects, "Service")
    }
    pods = {
        (o["metadata"].get("namespace") or "default", o["metadata"]["name"]): o
        for o in _of_kind(objects, "Pod")
    }
    out: list[dict[str, str]] = []
    for eps in _of_kind(objects, "Endpoints"):
        ns = eps["metadata"].get("namespace") or "default"
        name = eps["metadata"]["name"]
        common: dict[str, str] = {
            "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_endpoints_name": name,
            **_label_meta("__meta_kubernetes_endpoints", eps["metadata"].get("labels") or {}),
        }
        svc = services.get((ns, name))
        if svc is not None:
            common["__meta_kubernetes_service_name"] = name
            common.update(
                _label_meta("__meta_kubernetes_service", svc["metadata"].get("labels") or {})
            )
        for subset in eps.get("subsets") or []:
            addresses = [(a, "true") for a in subset.get("addresses") or []]
            addresses += [(a, "false") for a in subset.get("notReadyAddresses") or []]
            for address, ready in addresses:
                ref = address.get("targetRef") or {}
                pod = pods.get((ns, ref.get("name", ""))) if ref.get("kind") == "Pod" else None
                for eport in subset.get("ports") or []:
                    target = {
                        **common,
                        "__address__": f"{address['ip']}:{eport['port']}",
                        "__meta_kubernetes_endpoint_ready": ready,
                        "__meta_kubernetes_endpoint_port_name": str(eport.get("name", "")),
                        "__meta_kubernetes_endpoint_port_protocol": str(
                            eport.get("protocol", "TCP")
                        ),
                    }
                    if ref:
                        target["__meta_kubernetes_endpoint_address_target_kind"] = str(ref["kind"])
                        target["__meta_kubernetes_endpoint_address_target_name"] = str(ref["name"])
                    if address.get("nodeName"):
                        target["__meta_kubernetes_endpoint_node_name"] = str(address["nodeName"])
                    if pod is not None:
                        for container in pod["spec"]["containers"]:
                            for cport in container.get("ports") or []:
                                if cport["containerPort"] == eport["port"]:
                                    target.update(_pod_meta(pod, container, cport))
                    out.append(target)
    return out


def role_targets(job: Json, objects: Iterable[Json]) -> list[dict[str, str]]:
    """What ``job``'s Kubernetes discovery finds among ``objects`` (its role, its
    namespaces), before relabelling."""
    (sd,) = job["kubernetes_sd_configs"]
    found = endpoints_targets(objects) if sd["role"] == "endpoints" else pod_targets(objects)
    names = (sd.get("namespaces") or {}).get("names")
    return [t for t in found if names is None or t["__meta_kubernetes_namespace"] in names]


def with_file_sd(job: Json, path: Path) -> Json:
    """``job`` with its Kubernetes discovery replaced by the target groups in ``path``
    (written by :func:`write_file_sd`); the relabelling unchanged."""
    out = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    out["file_sd_configs"] = [{"files": [str(path)], "refresh_interval": "5s"}]
    return out


def write_file_sd(path: Path, targets: Iterable[Mapping[str, str]]) -> None:
    """``targets`` as a ``file_sd_configs`` file (one group per target), written whole then
    renamed into place (Prometheus never reads half a file)."""
    groups = [
        {
            "targets": [t["__address__"]],
            "labels": {k: v for k, v in t.items() if k != "__address__"},
        }
        for t in targets
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=1))
    tmp.replace(path)


def relabel(labels: Mapping[str, str], rules: Sequence[Json]) -> dict[str, str] | None:
    """Prometheus' relabelling (``replace``, ``keep``, ``drop``) of one target's labels;
    None when the target is dropped."""
    out = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        sources = rule.get("source_labels", [])
        value = rule.get("separator", ";").join(out.get(s, "") for s in sources)
        m = re.compile(f"^(?:{rule.get('regex', '(.*)')})$").match(value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if not m:
                continue
            replacement = re.sub(r"\$\{(\d+)\}|\$(\d+)", r"\\\1\2", rule.get("replacement", "$1"))
            result = m.expand(replacement)
            if result:
                out[rule["target_label"]] = result
            else:
                out.pop(rule["target_label"], None)
        else:
            raise UnsupportedMonitor(f"relabel action {action!r}")
    return out


def discover(job: Json, objects: Sequence[Json]) -> list[dict[str, str]]:
    """The targets ``job`` keeps among ``objects`` (Services, Endpoints, Pods), labelled as
    Prometheus labels them: relabelled, meta labels removed, ``job`` defaulting to the job's
    name and ``instance`` to the address."""
    kept: list[dict[str, str]] = []
    for target in role_targets(job, objects):
        labels = relabel({"job": job["job_name"], **target}, job["relabel_configs"])
        if labels is None:
            continue
        final = {k: v for k, v in labels.items() if not k.startswith("__")}
        final.setdefault("instance", labels["__address__"])
        kept.append(final)
    return kept


def simulated(objects: Sequence[Json]) -> list[Json]:
    """Pods and Endpoints as Kubernetes would make them for the StatefulSets, Deployments and
    Services in ``objects`` (each pod Running and Ready, a made-up address), added to them:
    what discovery would see once they run."""
    pods: list[Json] = []
    for obj in objects:
        if obj.get("kind") not in ("StatefulSet", "Deployment"):
            continue
        template = obj["spec"]["template"]
        for i in range(int(obj["spec"].get("replicas", 1))):
            n = len(pods) + 1
            pods.append(
                {
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{obj['metadata']['name']}-{i}",
                        "namespace": obj["metadata"].get("namespace") or "default",
                        "labels": dict(template["metadata"].get("labels") or {}),
                    },
                    "spec": {"containers": template["spec"]["containers"]},
                    "status": {
                        "podIP": f"10.0.{n // 250}.{n % 250 + 1}",
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
    endpoints: list[Json] = []
    for svc in _of_kind(objects, "Service"):
        ns = svc["metadata"].get("namespace") or "default"
        selector = svc["spec"].get("selector") or {}
        subsets: list[Json] = []
        for pod in pods:
            labels = pod["metadata"]["labels"]
            if not selector or pod["metadata"]["namespace"] != ns:
                continue
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            ports = []
            for sport in svc["spec"].get("ports") or []:
                target = sport.get("targetPort", sport["port"])
                number = next(
                    (
                        p["containerPort"]
                        for c in pod["spec"]["containers"]
                        for p in c.get("ports") or []
                        if target in (p.get("name"), p["containerPort"])
                    ),
                    target if isinstance(target, int) else None,
                )
                if number is not None:
                    ports.append({"name": sport.get("name", ""), "port": number})
            address = {
                "ip": pod["status"]["podIP"],
                "targetRef": {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": ns},
            }
            subsets.append({"addresses": [address], "ports": ports})
        endpoints.append(
            {
                "kind": "Endpoints",
                "metadata": {
                    "name": svc["metadata"]["name"],
                    "namespace": ns,
                    "labels": dict(svc["metadata"].get("labels") or {}),
                },
                "subsets": subsets,
            }
        )
    return [*objects, *pods, *endpoints]
