"""Polling and kubelet stand-ins for the k8s suite (``eventually`` instead of sleeps)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.wait import wait_until

T = TypeVar("T")
GROUP, VERSION = "magnetar.dev", "v1alpha1"


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def eventually(
    fn: Callable[[], T], *, timeout: float = 30, interval: float = 0.25, what: str = ""
) -> T:
    """:func:`tests.support.wait.wait_until` with the API server's transient answers
    (ApiException, a missing key) counted as "not yet"."""
    return wait_until(
        fn,
        timeout=timeout,
        interval=interval,
        what=what,
        retry_on=(AssertionError, ApiException, KeyError),
    )


def crd_established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


class CR:
    """Our custom resources in one namespace, as plain dicts."""

    def __init__(self, api: client.ApiClient, namespace: str, *, group: str = GROUP) -> None:
        self.api = client.CustomObjectsApi(api)
        self.ns = namespace
        self.group = group

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.api.create_namespaced_custom_object(
            self.group, VERSION, self.ns, plural, body
        )
        return out

    def get(self, plural: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.api.get_namespaced_custom_object(
            self.group, VERSION, self.ns, plural, name
        )
        return out

    def patch(self, plural: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.api.patch_namespaced_custom_object(
            self.group, VERSION, self.ns, plural, name, body
        )
        return out

    def delete(self, plural: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(self.group, VERSION, self.ns, plural, name)

    def exists(self, plural: str, name: str) -> bool:
        try:
            self.get(plural, name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def events(
    api: client.ApiClient, namespace: str, *, reason: str | None = None
) -> list[client.CoreV1Event]:
    items = client.CoreV1Api(api).list_namespaced_event(namespace).items
    out = [e for e in items if reason is None or e.reason == reason]
    return sorted(
        out,
        key=lambda e: (
            e.first_timestamp or e.event_time or e.metadata.creation_timestamp,
            e.metadata.resource_version,
        ),
    )


@dataclass(frozen=True)
class PodEvent:
    t: float
    kind: str  # created | ready | gone
    name: str
    uid: str


class FakeKubelet:
    """Plays kubelet for pods that no node runs: marks each pod Ready ``delay`` s after it
    appears and records a timeline of created/ready/gone, so tests can check rollout order."""

    def __init__(self, core: client.CoreV1Api, namespace: str, *, delay: float) -> None:
        self.core, self.ns, self.delay = core, namespace, delay
        self.timeline: list[PodEvent] = []
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._seen: dict[str, tuple[str, float]] = {}  # uid -> (name, first seen)
        self._ready: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except ApiException:
                pass
            self._stop.wait(0.1)

    def _tick(self) -> None:
        now = time.monotonic()
        pods = self.core.list_namespaced_pod(self.ns).items
        live = set()
        for pod in pods:
            uid, name = pod.metadata.uid, pod.metadata.name
            live.add(uid)
            if uid not in self._seen:
                self._seen[uid] = (name, now)
                self.timeline.append(PodEvent(now, "created", name, uid))
            if (
                uid not in self._ready
                and pod.metadata.deletion_timestamp is None
                and not self.paused.is_set()
                and now - self._seen[uid][1] >= self.delay
            ):
                self.core.patch_namespaced_pod_status(name, self.ns, ready_status())
                self._ready.add(uid)
                self.timeline.append(PodEvent(time.monotonic(), "ready", name, uid))
        for uid, (name, _) in list(self._seen.items()):
            if uid not in live:
                del self._seen[uid]
                self.timeline.append(PodEvent(now, "gone", name, uid))


def ready_status() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conds = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {"status": {"phase": "Running", "conditions": conds, "podIP": "10.244.0.10"}}
