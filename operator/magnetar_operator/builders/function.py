"""A ``Function`` (Function Mesh's ``compute.functionmesh.io/v1alpha1`` subset; crds/function.yaml)
as Kubernetes objects: a StatefulSet whose pod ordinal is the instance id, a headless Service
for its pods' names, an HPA when ``spec.maxReplicas`` is set; and its status from the
StatefulSet and pods.

Each pod runs ``python -m magnetar.functions.pod`` in the broker image: it downloads the
package from the broker's admin API v3 (``/admin/v3/functions/{tenant}/{namespace}/{name}``
``/download``), then runs the instance (``magnetar.functions.instance``) with the
``FunctionConfig`` this module derives from the resource (``function_config``: Function
Mesh's names to Pulsar's). All objects carry an owner reference to the Function: deleting
it leaves nothing.

Pure: what the cluster looks like comes in as arguments (``Target``), nothing is read here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from magnetar_operator.builders import common
from magnetar_operator.spec import Json

GROUP: Final = "compute.functionmesh.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "Function"
COMPONENT: Final = "function"
CONTAINER: Final = "instance"
TLS_DIR: Final = "/etc/magnetar/tls"
AUTH_DIR: Final = "/etc/magnetar/auth"
WORK_DIR: Final = "/tmp/function"  # noqa: S108  (an emptyDir, per pod)
DEFAULT_CPU_UTILIZATION: Final = 80
"""The HPA's target when ``spec.maxReplicas`` is set (Function Mesh's default)."""
GUARANTEES: Final = {
    "atleast_once": "ATLEAST_ONCE",
    "atmost_once": "ATMOST_ONCE",
    "effectively_once": "EFFECTIVELY_ONCE",
    "manual": "MANUAL",
}


class FunctionSpecError(ValueError):
    """A Function the operator cannot run as given (reported in its Ready condition)."""


@dataclass(frozen=True)
class Target:
    """Where the instances connect, and with what (from the PulsarCluster or the ConfigMap)."""

    service_url: str
    web_service_url: str
    image: str
    pull_policy: str = "IfNotPresent"
    pull_secrets: tuple[str, ...] = ()
    ca_secret: tuple[str, str] | None = None
    """(Secret name, item) of the CA that signs the brokers' certificates."""
    token_secret: tuple[str, str] | None = None
    """(Secret name, item) of the token the instances authenticate with."""


@dataclass(frozen=True)
class Name:
    """The Function resource and the Pulsar function it runs."""

    resource: str
    namespace: str
    uid: str
    tenant: str
    pulsar_namespace: str
    function: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Name:
        meta, spec = body["metadata"], body.get("spec") or {}
        return cls(
            resource=str(meta["name"]),
            namespace=str(meta["namespace"]),
            uid=str(meta.get("uid", "")),
            tenant=str(spec.get("tenant") or "public"),
            pulsar_namespace=str(spec.get("namespace") or "default"),
            function=str(spec.get("name") or meta["name"]),
        )

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.pulsar_namespace}/{self.function}"

    @property
    def workload(self) -> str:
        """The StatefulSet's (and headless Service's) name: ``<resource>-function``."""
        return f"{self.resource}-{COMPONENT}"


def owner_reference(name: Name) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name.resource,
        "uid": name.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def selector_labels(name: Name) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "magnetar",
        "app.kubernetes.io/instance": name.resource,
        "app.kubernetes.io/component": COMPONENT,
    }


def _metadata(name: Name, object_name: str) -> Json:
    return {
        "name": object_name,
        "namespace": name.namespace,
        "labels": {
            **selector_labels(name),
            "app.kubernetes.io/managed-by": common.MANAGED_BY,
            f"{GROUP}/function": name.fqfn.replace("/", "."),
        },
        "ownerReferences": [owner_reference(name)],
    }


def function_config(body: Mapping[str, Any]) -> Json:
    """Pulsar's ``FunctionConfig`` for the resource (Function Mesh's field names to Pulsar's);
    the instance checks and defaults it as the admin API does (``magnetar.functions.config``)."""
    name = Name.of(body)
    spec = body.get("spec") or {}
    source = spec.get("input") or {}
    sink = spec.get("output") or {}
    python = spec.get("python") or {}
    guarantee = str(spec.get("processingGuarantee") or "atleast_once")
    if guarantee not in GUARANTEES:
        raise FunctionSpecError(f"spec.processingGuarantee {guarantee!r}: not one of {GUARANTEES}")
    config: Json = {
        "tenant": name.tenant,
        "namespace": name.pulsar_namespace,
        "name": name.function,
        "className": spec.get("className"),
        "inputs": list(source.get("topics") or ()),
        "topicsPattern": source.get("topicPattern"),
        "customSerdeInputs": dict(source.get("customSerdeSources") or {}),
        "output": sink.get("topic"),
        "outputSerdeClassName": sink.get("sinkSerdeClassName"),
        "logTopic": spec.get("logTopic"),
        "autoAck": spec.get("autoAck"),
        "processingGuarantees": GUARANTEES[guarantee],
        "subName": spec.get("subscriptionName"),
        "subscriptionPosition": (
            str(spec["subscriptionPosition"]).capitalize()
            if spec.get("subscriptionPosition")
            else None
        ),
        "retainOrdering": spec.get("retainOrdering"),
        "retainKeyOrdering": spec.get("retainKeyOrdering"),
        "deadLetterTopic": spec.get("deadLetterTopic"),
        "maxMessageRetries": spec.get("maxMessageRetry"),
        "timeoutMs": spec.get("timeout"),
        "forwardSourceMessageProperty": spec.get("forwardSourceMessageProperty"),
        "userConfig": dict(spec.get("funcConfig") or {}),
        "parallelism": max(1, int(spec.get("replicas", 1))),
        "runtime": "PYTHON",
        "py": python.get("py"),
    }
    if config["maxMessageRetries"] is None and config["deadLetterTopic"]:
        config["maxMessageRetries"] = 3  # Function Mesh's: a dead-letter topic implies retries
    return {k: v for k, v in config.items() if v not in (None, [], {})}


def package_source(body: Mapping[str, Any]) -> str:
    """``tenant/namespace/name`` of the function whose package the instances download."""
    location = str((body.get("spec") or {}).get("python", {}).get("pyLocation") or "")
    if location:
        return location.removeprefix("function://")
    return Name.of(body).fqfn


def _secret_env(spec: Mapping[str, Any]) -> tuple[list[Json], dict[str, str]]:
    """``secretsMap`` as env vars from the Secrets, and the map secret name -> env var."""
    env: list[Json] = []
    names: dict[str, str] = {}
    for i, (secret, ref) in enumerate(sorted((spec.get("secretsMap") or {}).items())):
        var = f"MAGNETAR_FUNCTION_SECRET_{i}"
        env.append(
            {
                "name": var,
                "valueFrom": {"secretKeyRef": {"name": str(ref["path"]), "key": str(ref["key"])}},
            }
        )
        names[str(secret)] = var
    return env, names


def statefulset(body: Mapping[str, Any], target: Target) -> Json:
    name = Name.of(body)
    spec = body.get("spec") or {}
    pod_sc, container_sc = common.security_context()
    secret_env, secret_names = _secret_env(spec)
    env: list[Json] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MAGNETAR_FUNCTION_CONFIG", "value": json.dumps(function_config(body))},
        {"name": "MAGNETAR_FUNCTION_PACKAGE", "value": package_source(body)},
        {"name": "MAGNETAR_SERVICE_URL", "value": target.service_url},
        {"name": "MAGNETAR_WEB_SERVICE_URL", "value": target.web_service_url},
        {"name": "MAGNETAR_FUNCTION_WORK_DIR", "value": WORK_DIR},
        *secret_env,
    ]
    if secret_names:
        env.append({"name": "MAGNETAR_FUNCTION_SECRETS", "value": json.dumps(secret_names)})
    mounts: list[Json] = [{"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108
    volumes: list[Json] = [{"name": "tmp", "emptyDir": {}}]
    if target.ca_secret:
        secret_name, item = target.ca_secret
        env.append({"name": "MAGNETAR_TLS_TRUST_CERTS", "value": f"{TLS_DIR}/{item}"})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        # the CA certificate only: never the brokers' private key from the same Secret
        volumes.append(_secret_item_volume("tls", secret_name, item))
    if target.token_secret:
        secret_name, item = target.token_secret
        env.append({"name": "MAGNETAR_AUTH_TOKEN_FILE", "value": f"{AUTH_DIR}/{item}"})
        mounts.append({"name": "auth", "mountPath": AUTH_DIR, "readOnly": True})
        volumes.append(_secret_item_volume("auth", secret_name, item))
    container: Json = {
        "name": CONTAINER,
        "image": str(spec.get("image") or target.image),
        "imagePullPolicy": str(spec.get("imagePullPolicy") or target.pull_policy),
        "command": ["python3", "-m", "magnetar.functions.pod"],
        "env": env,
        "volumeMounts": mounts,
        "securityContext": container_sc,
        # Ready once the instance runs: it writes its first metrics report when it starts
        # (after the package is downloaded and installed; the pod entry removes a stale one)
        "readinessProbe": {
            "exec": {"command": ["test", "-f", f"{WORK_DIR}/metrics.json"]},
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
    }
    resources = spec.get("resources") or {}
    if resources.get("requests") or resources.get("limits"):
        container["resources"] = {
            k: {q: str(v) for q, v in resources[k].items()}
            for k in ("requests", "limits")
            if resources.get(k)
        }
    pod_spec: Json = {
        "securityContext": pod_sc,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": volumes,
    }
    if target.pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in target.pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(name, name.workload),
        "spec": {
            "serviceName": name.workload,
            "replicas": int(spec.get("replicas", 1)),
            # instances start and stop independently: one instance does not wait for another
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector_labels(name)},
            "template": {
                "metadata": {"labels": _metadata(name, "")["labels"]},
                "spec": pod_spec,
            },
        },
    }


def _secret_item_volume(volume: str, secret_name: str, item: str) -> Json:
    return {
        "name": volume,
        "secret": {
            "secretName": secret_name,
            "items": [{"key": item, "path": item}],
            "defaultMode": 0o440,
        },
    }


def headless_service(body: Mapping[str, Any]) -> Json:
    """Gives the StatefulSet's pods their stable names (``serviceName``); no ports."""
    name = Name.of(body)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, name.workload),
        "spec": {"clusterIP": "None", "selector": selector_labels(name)},
    }


def hpa(body: Mapping[str, Any]) -> Json | None:
    """An autoscaler of the Function itself (its scale subresource) between ``minReplicas``
    (default 1) and ``maxReplicas`` on CPU; None without ``maxReplicas``. Not ``replicas``
    as the floor: the autoscaler writes ``replicas``, so the floor would only ever rise."""
    name = Name.of(body)
    spec = body.get("spec") or {}
    if not spec.get("maxReplicas"):
        return None
    low = int(spec.get("minReplicas") or 1)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(name, name.workload),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": name.resource},
            "minReplicas": max(1, low),
            "maxReplicas": int(spec["maxReplicas"]),
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": DEFAULT_CPU_UTILIZATION,
                        },
                    },
                }
            ],
        },
    }


def build(body: Mapping[str, Any], target: Target) -> list[Json]:
    """Every object the Function wants (the HPA only with ``maxReplicas``)."""
    out = [headless_service(body), statefulset(body, target)]
    autoscaler = hpa(body)
    if autoscaler is not None:
        out.append(autoscaler)
    return out


def _ordinal(pod: Mapping[str, Any]) -> int:
    return int(str(pod["metadata"]["name"]).rsplit("-", 1)[1])


def _pod_state(pod: Mapping[str, Any]) -> Json:
    """An instance runs when its pod is Ready (and not being deleted); otherwise the error
    is its container's waiting or terminated reason, or the pod's phase."""
    pod_status = pod.get("status") or {}
    statuses = pod_status.get("containerStatuses") or []
    mine: Mapping[str, Any] = next((s for s in statuses if s.get("name") == CONTAINER), {})
    state = mine.get("state") or {}
    ready = not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod_status.get("conditions") or ()
    )
    error = ""
    if "waiting" in state:
        waiting = state["waiting"]
        error = f"{waiting.get('reason', 'Waiting')}: {waiting.get('message', '')}".rstrip(": ")
    elif "terminated" in state:
        done = state["terminated"]
        error = f"{done.get('reason', 'Terminated')} (exit {done.get('exitCode')})"
    elif pod["metadata"].get("deletionTimestamp"):
        error = "pod terminating"
    elif not ready:
        error = f"pod {pod_status.get('phase', 'Pending')}, not ready"
    return {
        "instanceId": _ordinal(pod),
        "pod": str(pod["metadata"]["name"]),
        "running": ready,
        "restarts": int(mine.get("restartCount", 0)),
        "error": error,
    }


def status(
    body: Mapping[str, Any], sts: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> tuple[Json, str, str]:
    """(status fields, Ready reason, message) from the StatefulSet and its pods. Phase:
    ``Running`` (all replicas ready), ``Pending`` (none yet, or the StatefulSet has not
    caught up), ``Degraded`` (some ready)."""
    name = Name.of(body)
    wanted = int((body.get("spec") or {}).get("replicas", 1))
    sts_status = (sts or {}).get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    current = int(sts_status.get("replicas") or 0)
    instances = sorted(
        (_pod_state(p) for p in pods if _ordinal(p) < wanted), key=lambda i: i["instanceId"]
    )
    selector = ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))
    fields: Json = {
        "fqfn": name.fqfn,
        "replicas": current,
        "readyReplicas": ready,
        "selector": selector,
        "statefulSet": name.workload,
        "instances": instances,
    }
    if ready >= wanted:
        fields["phase"] = "Running"
        return fields, "Running", f"{ready}/{wanted} instances ready"
    errors = [f"instance {i['instanceId']}: {i['error']}" for i in instances if i["error"]]
    fields["phase"] = "Degraded" if ready else "Pending"
    detail = f" ({'; '.join(errors)})" if errors else ""
    return fields, fields["phase"], f"{ready}/{wanted} instances ready{detail}"
