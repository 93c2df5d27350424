"""kopf handlers: thin adapters from kopf's causes to ``cluster`` and ``resources``.

PulsarCluster: create/update/resume and a resync timer all run the same idempotent
reconcile (under a per-object lock), so rollouts and status progress even without spec
changes. Function: the same idempotent apply of its StatefulSet (``functions``), its status
read back by a timer (for which kopf keeps its finalizer on the Function; nothing else to
do at deletion: owner references remove its objects). Tenant/Topic: the
same, against the cluster's admin API; their finalizers give up
(with a Warning event) once the cluster is gone or stays unreachable, so deletion never
hangs on a cluster that no longer exists. A Tenant's deletion is never forced: while the
tenant still holds what the resource did not create (409), the finalizer reports it
(Warning event and Ready condition ``DeleteBlocked``) and retries.

Settings from the environment (read at import):
``MAGNETAR_OPERATOR_CLUSTER_RESYNC`` (s, default 10), ``MAGNETAR_OPERATOR_RESOURCE_RESYNC``
(s, default 60), ``MAGNETAR_OPERATOR_RETRY_DELAY`` (s, default 10),
``MAGNETAR_OPERATOR_DELETE_RETRIES`` (attempts before a finalizer gives up, default 5),
``MAGNETAR_OPERATOR_FIRST_RETRY_DELAY`` (s, default 1: a Tenant/Topic waiting for its
cluster or namespace retries after 1, 2, 4 ... s, at most the retry delay, so a Tenant and
its Topics applied in one command are Ready within seconds),
``MAGNETAR_OPERATOR_FUNCTION_RESYNC`` (s, default 5: how often a Function's status is read
back from its StatefulSet and pods), ``MAGNETAR_OPERATOR_METRICS_PORT`` (the operator's own
/metrics, ``metrics``; off when unset or 0) and ``MAGNETAR_OPERATOR_METRICS_ADDRESS``
(default 0.0.0.0).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from magnetar_operator import cluster, conditions, functions, metrics, resources
from magnetar_operator.builders import function as fn
from magnetar_operator.builders.common import API_VERSION, GROUP
from magnetar_operator.kube import Kube
from magnetar_operator.pulsar import Admin, AdminError, AdminUnavailable
from magnetar_operator.spec import Json

CLUSTER_RESYNC = float(os.environ.get("MAGNETAR_OPERATOR_CLUSTER_RESYNC", "10"))
RESOURCE_RESYNC = float(os.environ.get("MAGNETAR_OPERATOR_RESOURCE_RESYNC", "60"))
RETRY_DELAY = float(os.environ.get("MAGNETAR_OPERATOR_RETRY_DELAY", "10"))
DELETE_RETRIES = int(os.environ.get("MAGNETAR_OPERATOR_DELETE_RETRIES", "5"))
FIRST_RETRY_DELAY = float(os.environ.get("MAGNETAR_OPERATOR_FIRST_RETRY_DELAY", "1"))
FUNCTION_RESYNC = float(os.environ.get("MAGNETAR_OPERATOR_FUNCTION_RESYNC", "5"))
METRICS_PORT = int(os.environ.get("MAGNETAR_OPERATOR_METRICS_PORT") or 0)
METRICS_ADDRESS = os.environ.get("MAGNETAR_OPERATOR_METRICS_ADDRESS", "0.0.0.0")
ADMIN_URL_ANNOTATION = cluster.ADMIN_URL_ANNOTATION

log = logging.getLogger("magnetar_operator")


@dataclass
class State:
    """Operator-wide state kept in kopf's memo."""

    kube: Kube
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, body: Mapping[str, Any]) -> asyncio.Lock:
        uid = str(body["metadata"]["uid"])
        return self.locks.setdefault(uid, asyncio.Lock())

    def forget(self, body: Mapping[str, Any]) -> None:
        self.locks.pop(str(body["metadata"]["uid"]), None)


def _state(memo: kopf.Memo) -> State:
    state = memo["magnetar"]
    assert isinstance(state, State)
    return state


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    memo["magnetar"] = State(kube=Kube.from_environment())
    if METRICS_PORT:
        metrics.serve(METRICS_PORT, METRICS_ADDRESS)
        log.info("metrics on http://%s:%d/metrics", METRICS_ADDRESS, METRICS_PORT)


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    await _state(memo).kube.close()


def _events(body: kopf.Body) -> cluster.EventFn:
    def post(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)
        metrics.EVENTS.labels(str(body.get("kind")), type_, reason).inc()
        log.info("%s/%s %s: %s", body.metadata.namespace, body.metadata.name, reason, message)

    return post


# --- PulsarCluster -------------------------------------------------------------------------
async def _reconcile_cluster(body: kopf.Body, memo: kopf.Memo) -> None:
    state = _state(memo)
    if body.metadata.get("deletionTimestamp"):
        return
    async with state.lock(body), metrics.reconcile_pass("PulsarCluster"):
        status = await cluster.reconcile(
            state.kube, body, event=_events(body), now=conditions.now_iso()
        )
        metrics.PHASES.set(
            "PulsarCluster", str(body.metadata.namespace), str(body.metadata.name), status["phase"]
        )


@kopf.on.create(GROUP, "pulsarclusters")
@kopf.on.update(GROUP, "pulsarclusters")
@kopf.on.resume(GROUP, "pulsarclusters")
async def cluster_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _reconcile_cluster(body, memo)


@kopf.timer(GROUP, "pulsarclusters", interval=CLUSTER_RESYNC, initial_delay=CLUSTER_RESYNC)
async def cluster_resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _reconcile_cluster(body, memo)


@kopf.on.delete(GROUP, "pulsarclusters")
async def cluster_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    state = _state(memo)
    async with state.lock(body):
        await cluster.cleanup(state.kube, body, event=_events(body))
    state.forget(body)
    metrics.PHASES.forget("PulsarCluster", str(body.metadata.namespace), str(body.metadata.name))


# --- Tenant / Topic ------------------------------------------------------------------------
class ClusterGone(Exception):
    """The referenced PulsarCluster does not exist (or is being deleted)."""


@dataclass(frozen=True)
class Target:
    url: str
    cluster_name: str
    token: str | None = None
    ca: bytes | None = None
    not_ready: str | None = None
    """Why the referenced PulsarCluster is not Ready yet (None when it is, or for an
    adminUrl): what a Tenant/Topic waits for while the admin API does not answer."""


def _not_ready(pc: Mapping[str, Any]) -> str | None:
    for cond in (pc.get("status") or {}).get("conditions") or ():
        if cond.get("type") == conditions.READY:
            if cond.get("status") == "True":
                return None
            return f"{cond.get('reason')}: {cond.get('message')}"
    return "not reconciled yet"


async def _target(kube: Kube, namespace: str, ref: Mapping[str, Any]) -> Target:
    """Where a Tenant/Topic's admin calls go: an explicit adminUrl or a PulsarCluster's
    (``cluster.admin_endpoint``)."""
    if ref.get("adminUrl"):
        return Target(str(ref["adminUrl"]), str(ref.get("clusterName") or "standalone"))
    name = str(ref.get("name"))
    pc = await kube.get(API_VERSION, "PulsarCluster", namespace, name)
    if pc is None or pc["metadata"].get("deletionTimestamp"):
        raise ClusterGone(f"PulsarCluster {namespace}/{name} not found")
    endpoint = await cluster.admin_endpoint(kube, pc)
    return Target(
        endpoint.url,
        str(ref.get("clusterName") or name),
        endpoint.token,
        endpoint.ca,
        _not_ready(pc),
    )


async def _write_status(
    kube: Kube, body: kopf.Body, plural_kind: str, cond: conditions.Condition, extra: Json
) -> None:
    generation = int(body.metadata.get("generation") or 0)
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    metrics.PHASES.set(plural_kind, namespace, name, "Ready" if cond.ok else cond.reason)
    status = {
        **extra,
        "conditions": conditions.merge(
            (body.get("status") or {}).get("conditions"),
            [cond],
            now=conditions.now_iso(),
            generation=generation,
        ),
        "observedGeneration": generation,
    }
    await kube.patch_status(
        API_VERSION, plural_kind, str(body.metadata.namespace), str(body.metadata.name), status
    )


async def _sync(body: kopf.Body, memo: kopf.Memo, kind: str, retry: int) -> None:
    """Reconcile one Tenant or Topic; errors go to status, then to kopf as retry/permanent.
    What usually arrives within seconds (the cluster turning Ready, the namespace a Tenant
    applied alongside creates) is retried after 1, 2, 4 ... s (``resources.backoff``), the
    Ready condition saying what it waits for."""
    state = _state(memo)
    if body.metadata.get("deletionTimestamp"):
        return
    spec = body.spec
    extra: Json = {}
    delay = resources.backoff(retry, first=FIRST_RETRY_DELAY, cap=RETRY_DELAY)
    target: Target | None = None
    async with state.lock(body), metrics.reconcile_pass(kind):
        try:
            target = await _target(state.kube, str(body.metadata.namespace), spec["clusterRef"])
            extra["adminUrl"] = target.url
            async with Admin(target.url, token=target.token, ca=target.ca) as admin:
                if kind == "Tenant":
                    managed = list((body.get("status") or {}).get("namespaces") or ())
                    changes, managed = await resources.reconcile_tenant(
                        admin, spec, default_cluster=target.cluster_name, managed=managed
                    )
                    extra["namespaces"] = managed
                else:
                    changes = await resources.reconcile_topic(admin, spec)
                    extra["topicName"] = str(resources.topic_name(spec))
        except (ClusterGone, AdminUnavailable, resources.Waiting) as e:
            reason, message = "AdminUnavailable", str(e)
            if isinstance(e, ClusterGone):
                reason = "ClusterNotFound"
            elif isinstance(e, resources.Waiting):
                reason = "WaitingForNamespace"
            elif target is not None and target.not_ready is not None:
                reason = "WaitingForCluster"
                name = spec["clusterRef"].get("name")
                message = f"waiting for PulsarCluster {name} to be Ready ({target.not_ready})"
            await _write_status(
                state.kube,
                body,
                kind,
                conditions.Condition(conditions.READY, False, reason, message),
                extra,
            )
            raise kopf.TemporaryError(f"{message}; retrying in {delay:g}s", delay=delay) from e
        except (AdminError, resources.TopicConflict) as e:
            await _write_status(
                state.kube,
                body,
                kind,
                conditions.Condition(conditions.READY, False, "AdminError", str(e)),
                extra,
            )
            if isinstance(e, AdminError) and e.retryable:
                raise kopf.TemporaryError(str(e), delay=delay) from e
            raise kopf.PermanentError(str(e)) from e
        post = _events(body)
        for change in changes:
            post("Normal", "Synced", change)
        extra["lastSyncTime"] = conditions.now_iso()
        await _write_status(
            state.kube,
            body,
            kind,
            conditions.Condition(conditions.READY, True, "Synced", f"in sync with {target.url}"),
            extra,
        )


async def _delete(body: kopf.Body, memo: kopf.Memo, kind: str, retry: int) -> None:
    """Finalizer: delete in Pulsar unless orphaned; give up cleanly when the cluster is gone."""
    state = _state(memo)
    spec = body.spec
    post = _events(body)
    if spec.get("deletionPolicy") == "Orphan":
        return
    try:
        target = await _target(state.kube, str(body.metadata.namespace), spec["clusterRef"])
        async with Admin(target.url, token=target.token, ca=target.ca) as admin:
            if kind == "Tenant":
                managed = list((body.get("status") or {}).get("namespaces") or ())
                await resources.delete_tenant(admin, spec, managed=managed)
            else:
                await resources.delete_topic(admin, spec)
    except ClusterGone as e:
        post("Warning", "ClusterGone", f"{e}: nothing to delete in Pulsar")
    except AdminError as e:
        if e.status == 409:
            delay = resources.backoff(retry, first=FIRST_RETRY_DELAY, cap=RETRY_DELAY)
            await _delete_blocked(state.kube, body, kind, e, delay)  # raises: retried
        elif e.retryable:
            _retry_or_give_up(post, e, retry)
        else:
            post("Warning", "DeleteFailed", f"{e}: giving up")
    except AdminUnavailable as e:
        _retry_or_give_up(post, e, retry)
    state.forget(body)
    metrics.PHASES.forget(kind, str(body.metadata.namespace), str(body.metadata.name))


async def _delete_blocked(
    kube: Kube, body: kopf.Body, kind: str, e: AdminError, delay: float
) -> None:
    """The tenant/namespace still holds what this resource did not create: say so and retry
    (never forced) until its owner removes it -- soon at first: a Topic deleted in the same
    command is usually gone within a second."""
    cond = conditions.Condition(conditions.READY, False, "DeleteBlocked", str(e))
    if not conditions.holds(body.get("status", {}).get("conditions"), cond):
        # One event when the deletion becomes blocked (or blocked for another reason), not
        # one per retry: the Ready condition says it is still blocked.
        _events(body)("Warning", "DeleteBlocked", f"{e}: retrying, never forced")
    await _write_status(kube, body, kind, cond, {})
    raise kopf.TemporaryError(str(e), delay=delay) from e


def _retry_or_give_up(post: cluster.EventFn, e: Exception, retry: int) -> None:
    """Retry an unreachable or failing (5xx) admin API, up to DELETE_RETRIES attempts."""
    if retry + 1 >= DELETE_RETRIES:
        post("Warning", "ClusterUnreachable", f"{e}: giving up after {retry + 1} attempts")
    else:
        raise kopf.TemporaryError(str(e), delay=RETRY_DELAY) from e


@kopf.on.create(GROUP, "tenants")
@kopf.on.update(GROUP, "tenants")
@kopf.on.resume(GROUP, "tenants")
async def tenant_changed(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _sync(body, memo, "Tenant", retry)


@kopf.timer(GROUP, "tenants", interval=RESOURCE_RESYNC, initial_delay=RESOURCE_RESYNC)
async def tenant_resync(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await _sync(body, memo, "Tenant", int(kwargs.get("retry", 0)))


@kopf.on.delete(GROUP, "tenants")
async def tenant_deleted(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _delete(body, memo, "Tenant", retry)


@kopf.on.create(GROUP, "topics")
@kopf.on.update(GROUP, "topics")
@kopf.on.resume(GROUP, "topics")
async def topic_changed(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _sync(body, memo, "Topic", retry)


@kopf.timer(GROUP, "topics", interval=RESOURCE_RESYNC, initial_delay=RESOURCE_RESYNC)
async def topic_resync(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await _sync(body, memo, "Topic", int(kwargs.get("retry", 0)))


@kopf.on.delete(GROUP, "topics")
async def topic_deleted(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _delete(body, memo, "Topic", retry)


# --- Function ------------------------------------------------------------------------------
async def _function_status(
    kube: Kube, body: kopf.Body, cond: conditions.Condition, extra: Json
) -> None:
    generation = int(body.metadata.get("generation") or 0)
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    metrics.PHASES.set("Function", namespace, name, str(extra.get("phase", cond.reason)))
    status = {
        **extra,
        "conditions": conditions.merge(
            (body.get("status") or {}).get("conditions"),
            [cond],
            now=conditions.now_iso(),
            generation=generation,
        ),
        "observedGeneration": generation,
    }
    await kube.patch_status(fn.API_VERSION, "Function", namespace, name, status)


async def _reconcile_function(body: kopf.Body, memo: kopf.Memo, retry: int) -> None:
    """Apply a Function's objects and write its status; a missing PulsarCluster or ConfigMap
    is waited for (retried), a spec the operator cannot run is reported (phase Failed)."""
    state = _state(memo)
    if body.metadata.get("deletionTimestamp"):
        return
    delay = resources.backoff(retry, first=FIRST_RETRY_DELAY, cap=RETRY_DELAY)
    async with state.lock(body), metrics.reconcile_pass("Function"):
        try:
            fields, reason, message = await functions.reconcile(state.kube, body)
        except functions.NotReady as e:
            cond = conditions.Condition(conditions.READY, False, "WaitingForCluster", str(e))
            await _function_status(state.kube, body, cond, {"phase": "Pending"})
            raise kopf.TemporaryError(f"{e}; retrying in {delay:g}s", delay=delay) from e
        except fn.FunctionSpecError as e:
            cond = conditions.Condition(conditions.READY, False, "InvalidSpec", str(e))
            await _function_status(state.kube, body, cond, {"phase": "Failed"})
            raise kopf.PermanentError(str(e)) from e
        cond = conditions.Condition(conditions.READY, reason == "Running", reason, message)
        await _function_status(state.kube, body, cond, fields)


@kopf.on.create(fn.GROUP, "functions")
@kopf.on.update(fn.GROUP, "functions")
@kopf.on.resume(fn.GROUP, "functions")
async def function_changed(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _reconcile_function(body, memo, retry)


@kopf.timer(fn.GROUP, "functions", interval=FUNCTION_RESYNC, initial_delay=FUNCTION_RESYNC)
async def function_resync(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await _reconcile_function(body, memo, int(kwargs.get("retry", 0)))


@kopf.on.delete(fn.GROUP, "functions", optional=True)
async def function_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Nothing to delete (``optional``): the garbage collector removes the owned objects;
    kopf removes its finalizer (which its status timer needs) after this."""
    _state(memo).forget(body)
    metrics.PHASES.forget("Function", str(body.metadata.namespace), str(body.metadata.name))
