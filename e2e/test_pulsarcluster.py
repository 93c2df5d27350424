"""The PulsarCluster suite on the local cluster (issue 12, acceptance point 2).

`helm install` of the chart with helm/magnetar/ci/values-cluster-proxy.yaml (operator, a
PulsarCluster of 3 etcd members, 3 bookies with separate journal and ledger claims, 2
brokers and a proxy on NodePorts, and the chart's MinIO as its offload target) from the
locally built images, then, from the host (this machine is the node; the proxy's NodePorts
are on the cluster bridge's address):

* the host disk has room below the bookies' read-only threshold (checked first: the suite
  fails at once naming the usage and the threshold instead of bookies going read-only);
* the cluster turns Ready with every pod Running and every claim Bound, and OffloadReady
  True from the operator's probe of the in-cluster MinIO;
* messages over several ledgers are offloaded through the proxy's admin API (`magnetar
  admin topics offload`), internalStats shows them offloaded with objects in the MinIO
  bucket, the bookie copies are deleted after the (5 s) lag, and a fresh consumer from
  earliest receives every message byte-identical, read back from MinIO (issue 14);
* Tenant and Topic resources applied with kubectl are visible through `magnetar admin`;
* the official Python client produces 10,000 messages through the proxy, all consumed;
* Prometheus on the host scrapes every broker, bookie, etcd member, the proxy and the
  operator through the chart's ServiceMonitor/PodMonitor, and after a workload every panel
  of every shipped dashboard has data (e2e/observability_k8s.py, issue 23);
* a bookie pod deleted mid-publish loses no receipted message;
* the owning broker's pod deleted mid-publish loses none, and the client reconnects;
* a version (image) change rolls the bookies one at a time, then the brokers, with a
  producer running, and loses nothing receipted;
* bookies 3 -> 4 -> 2 with E = Wq = 2: each removed bookie is decommissioned before the
  replicas drop past it (the order of the operator's events), every ledger's every
  fragment is on 2 distinct live bookies afterwards, and every message reads back;
* (full form) a bookie roll with a 1 s lost-bookie delay and the recovery workers held to
  32 KiB/s waits, after a restart, for zero under-replicated ledgers (WaitingForReplication
  between RollingBookie events): the restarted bookie's ledgers are still being copied when
  it is back;
* a bookie's volume removed (its PV and directory gone, its claim Lost, the pod deleted)
  under nodeLossPolicy Replace: decommissioned, replaced by a fresh bookie with new claims,
  and every fragment again on 2 distinct live bookies;
* a second PulsarCluster with spec.tls, spec.auth and a proxy (e2e/secured.py) turns
  Ready, its processes serve the certificates of their Secrets, a client on the host
  produces and consumes through the proxy over TLS (hostname verified) with a token, and a
  Tenant and a Topic reconcile through the operator's authenticated admin API;
* (full form) a Function resource (issue 28) runs the exclamation function as pods, scales
  2 -> 3, loses no input when an instance's pod is deleted mid-stream, and leaves nothing
  when deleted (e2e/functions_k8s.py);
* (full form) a second PulsarCluster and a namespace replicated both ways (issue 25): with the
  owning broker's pod deleted mid-stream, each side receives every receipted message of both
  producers exactly once (e2e/georep_k8s.py);
* `helm uninstall` alone (its pre-delete hook deletes the Tenants/Topics and the
  PulsarCluster while the operator runs; reclaimPolicy Delete) leaves no claim, no volume
  directory and no object; `cluster.sh down` leaves nothing on the machine.

Run: `make test-e2e` (root, Go, Docker with `make images` built). ``MAGNETAR_E2E_REDUCED=1``
runs the reduced form (install, the offload, the dashboards on Prometheus, one bookie kill,
one roll, the secured cluster, uninstall).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pulsar
import pytest
import yaml
from tests.support.wait import wait_until

from e2e import functions_k8s, georep_k8s, observability_k8s, secured, spark_k8s
from e2e.localcluster import (
    ROOT,
    SCRIPT,
    Cluster,
    Site,
    cluster_env,
    default_disk_usage_threshold,
    down_and_check,
    http_ok,
    local_cluster,
    pod_ready,
)
from magnetar import __version__
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import keys, open_store

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NS = "magnetar-e2e"
NAME = "e2e"
VALUES = ROOT / "helm/magnetar/ci/values-cluster-proxy.yaml"
PROXY_PULSAR, PROXY_HTTP = 30650, 30080  # the NodePorts in VALUES
ROLL_VERSION = f"{__version__}-roll"
MINIO = "magnetar-minio"  # the chart's MinIO (release "magnetar"): Deployment, Service, Secret
MINIO_IMAGE = f"magnetar/minio:{__version__}"
REDUCED = os.environ.get("MAGNETAR_E2E_REDUCED") == "1"
full_only = pytest.mark.skipif(REDUCED, reason="MAGNETAR_E2E_REDUCED=1: the reduced form")


@dataclass
class Installed:
    c: Cluster
    helm: Path
    service_url: str
    admin_url: str
    timings: dict[str, float] = field(default_factory=dict)

    def pods(self, component: str | None = None) -> list[dict[str, Any]]:
        args = ["-n", NS, "get", "pods", "-o", "json"]
        if component:
            args += ["-l", f"app.kubernetes.io/component={component}"]
        items: list[dict[str, Any]] = json.loads(self.c.k(*args))["items"]
        return items

    def site(self) -> Site:
        return Site(
            self.c,
            NS,
            NAME,
            self.service_url,
            self.admin,
            lambda client, topic, prefix: Publisher(client, topic, prefix=prefix),
            self.timings,
        )

    def admin(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", self.admin_url, *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, f"magnetar admin {' '.join(args)}: {out.stderr}"
        return out.stdout


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def bookie_disk_threshold() -> float:
    """The bookies' diskUsageThreshold in VALUES, or the bookies' default."""
    spec = yaml.safe_load(VALUES.read_text())["cluster"]["spec"]
    config = (spec.get("bookies") or {}).get("config") or {}
    return float(config.get("diskUsageThreshold", default_disk_usage_threshold()))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with local_cluster(
        cleanup_namespaces=(NS, spark_k8s.NAMESPACE, secured.NS, georep_k8s.NS),
        disk_threshold=bookie_disk_threshold(),
    ) as c:
        yield c


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[Installed]:
    c = cluster
    env = cluster_env()
    helm = ROOT / ".cache/k8s-bin" / f"helm-{env['HELM_VERSION']}" / "helm"
    if not helm.exists():
        pytest.skip("helm is not built: make k8s-tools")
    if subprocess.run(["docker", "image", "inspect", MINIO_IMAGE], capture_output=True).returncode:
        pytest.skip(f"image {MINIO_IMAGE} is not built: run `make minio images`")
    # a running cluster may predate the image (cluster.sh up loads it when built)
    subprocess.run(["bash", str(SCRIPT), "load", MINIO_IMAGE], check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    # no --set: the default image names are the ones `make images` builds (issue 29)
    cmd = [
        str(helm), "--kubeconfig", str(c.kubeconfig), "install", "magnetar",
        str(ROOT / "helm/magnetar"), "-n", NS, "--create-namespace", "-f", str(VALUES),
        "--wait", "--timeout", "300s",
    ]  # fmt: skip
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=360)
    inst = Installed(
        c, helm, f"pulsar://{c.gateway}:{PROXY_PULSAR}", f"http://{c.gateway}:{PROXY_HTTP}"
    )
    try:
        c.k("-n", NS, "wait", f"pulsarcluster/{NAME}", "--for=condition=Ready",
            "--timeout=600s", timeout=620)  # fmt: skip
        inst.timings["ready_after_install"] = time.monotonic() - t0
        print(f"PulsarCluster Ready {inst.timings['ready_after_install']:.1f}s after helm install")
        yield inst
    finally:  # a safety net when a test failed before the uninstall test: helm uninstall
        # (its pre-delete hook deletes the PulsarCluster); should the hook fail, the cluster
        # is deleted directly while the operator still runs, and the release again
        helm_uninstall = [
            str(helm), "--kubeconfig", str(c.kubeconfig), "uninstall", "magnetar", "-n", NS,
            "--ignore-not-found", "--wait", "--timeout", "300s",
        ]  # fmt: skip
        done = subprocess.run(helm_uninstall, capture_output=True, timeout=330, check=False)
        if done.returncode != 0:
            subprocess.run(
                [str(c.kubectl), "--kubeconfig", str(c.kubeconfig), "-n", NS, "delete",
                 "pulsarcluster", NAME, "--ignore-not-found", "--timeout=180s"],
                capture_output=True, timeout=200, check=False,
            )  # fmt: skip
            subprocess.run(
                [*helm_uninstall[:-1], "120s", "--no-hooks"],
                capture_output=True,
                timeout=150,
                check=False,
            )


class Publisher(threading.Thread):
    """Sends numbered messages with send_async until stopped; records what was receipted."""

    def __init__(self, client: pulsar.Client, topic: str, *, prefix: str) -> None:
        super().__init__(name=f"publisher-{prefix}", daemon=True)
        self.producer = client.create_producer(
            topic,
            batching_enabled=False,
            block_if_queue_full=True,
            max_pending_messages=500,
            send_timeout_millis=120_000,
        )
        self.prefix = prefix
        self.sent = 0
        self.receipted: set[str] = set()
        self.failed: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def run(self) -> None:
        i = 0
        while not self._stop_event.is_set():
            payload = f"{self.prefix}-{i}"
            self.producer.send_async(payload.encode(), self._callback(payload))
            self.sent = i = i + 1
            time.sleep(0.002)

    def _callback(self, payload: str) -> Any:
        def done(res: pulsar.Result, _msg_id: Any) -> None:
            with self._lock:
                if res == pulsar.Result.Ok:
                    self.receipted.add(payload)
                else:
                    self.failed[payload] = str(res)

        return done

    def count(self) -> int:
        with self._lock:
            return len(self.receipted)

    def finish(self) -> None:
        self._stop_event.set()
        self.join(30)
        self.producer.flush()
        wait_until(
            lambda: self.count() + len(self.failed) >= self.sent, timeout=180, what="receipts"
        )
        self.producer.close()


def received_all(consumer: pulsar.Consumer, wanted: set[str], *, timeout: float = 180) -> set[str]:
    """Receive (and acknowledge) until every payload in ``wanted`` came, or the timeout."""
    got: set[str] = set()
    deadline = time.monotonic() + timeout
    while not wanted <= got and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=5000)
        except pulsar.Timeout:
            continue
        got.add(msg.data().decode())
        consumer.acknowledge(msg)
    return got


def kill_mid_publish(inst: Installed, pod_of: Callable[[str], dict[str, Any]], prefix: str) -> None:
    """Publish; after 1,000 receipts delete the pod ``pod_of(topic)`` names; keep publishing until
    its replacement is Ready and 1,000 more receipts came; every receipted message arrives."""
    client = pulsar.Client(inst.service_url, operation_timeout_seconds=120)
    topic = f"persistent://public/default/{prefix}-{int(time.time())}"
    try:
        consumer = client.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        pub = Publisher(client, topic, prefix=prefix)
        pub.start()
        wait_until(lambda: pub.count() >= 1000, timeout=120, what="1,000 receipts")
        victim = pod_of(topic)
        old_uid = victim["metadata"]["uid"]
        component = victim["metadata"]["labels"]["app.kubernetes.io/component"]
        t0 = time.monotonic()
        inst.c.k("-n", NS, "delete", "pod", victim["metadata"]["name"], "--wait=false")

        def replaced() -> bool:
            pods = inst.pods(component)
            fresh = [p["metadata"]["uid"] != old_uid and pod_ready(p) for p in pods]
            running = all(p["status"]["phase"] == "Running" for p in pods)
            return all(fresh) and running and len(pods) >= (3 if component == "bookie" else 2)

        wait_until(replaced, timeout=300, interval=1, what=f"{component} replaced and Ready")
        inst.timings[f"{prefix}_replaced"] = time.monotonic() - t0
        at = pub.count()
        wait_until(lambda: pub.count() >= at + 1000, timeout=180, what="1,000 more receipts")
        pub.finish()
        got = received_all(consumer, pub.receipted)
        lost = pub.receipted - got
        print(
            f"{prefix}: sent {pub.sent}, receipted {len(pub.receipted)}, failed "
            f"{len(pub.failed)}, received {len(got)}, lost {len(lost)}; "
            f"{component} replaced in {inst.timings[f'{prefix}_replaced']:.1f}s"
        )
        assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}"
        consumer.close()
    finally:
        client.close()


# --- the tests, in order: one installed cluster ---------------------------------------------


def _of_job(pod: dict[str, Any]) -> bool:
    return any(o.get("kind") == "Job" for o in pod["metadata"].get("ownerReferences") or [])


def test_ready_with_every_pod_running(installed: Installed) -> None:
    # the chart's hook Jobs (the MinIO bucket's) have finished; helm deletes them, their pods
    # may linger a moment
    pods = [p for p in installed.pods() if not _of_job(p)]
    by_component: dict[str, int] = {}
    for p in pods:
        assert p["status"]["phase"] == "Running", p["metadata"]["name"]
        comp = p["metadata"]["labels"].get("app.kubernetes.io/component", "operator")
        by_component[comp] = by_component.get(comp, 0) + 1
    assert by_component == {
        "etcd": 3, "bookie": 3, "broker": 2, "proxy": 1, "operator": 1, "minio": 1,
    }, by_component  # fmt: skip
    pvcs = json.loads(installed.c.k("-n", NS, "get", "pvc", "-o", "json"))["items"]
    names = sorted(p["metadata"]["name"] for p in pvcs)
    assert names == sorted(
        [f"data-{NAME}-etcd-{i}" for i in range(3)]
        + [f"journal-{NAME}-bookie-{i}" for i in range(3)]
        + [f"ledgers-{NAME}-bookie-{i}" for i in range(3)]
        + [MINIO]
    )
    assert {p["status"]["phase"] for p in pvcs} == {"Bound"}
    pc = json.loads(installed.c.k("-n", NS, "get", "pulsarcluster", NAME, "-o", "json"))
    assert pc["status"]["proxy"]["summary"] == "1/1"
    conditions = {c["type"]: c for c in pc["status"]["conditions"]}
    # the operator wrote, read back and deleted a probe object in the chart's MinIO
    offload = conditions["OffloadReady"]
    assert (offload["status"], offload["reason"]) == ("True", "ProbeSucceeded"), offload
    assert pc["spec"]["offload"]["endpoint"] == f"http://{MINIO}.{NS}.svc:9000"
    assert http_ok(f"{installed.admin_url}/status.html"), "the proxy's health through its NodePort"


# --- offload to the chart's MinIO (issue 14) --------------------------------------------------

OFFLOAD_MESSAGE = 16 * 1024
OFFLOAD_MESSAGES = 300
"""4.7 MiB of random payloads: four 1 MiB ledgers (VALUES' managedLedgerMaxSizePerLedgerMbytes)
closed, the rest in the current one."""


def minio_s3(inst: Installed) -> tuple[Any, str]:
    """A boto3 client for the chart's MinIO -- its pod's address on the cluster bridge, the
    keys of the Secret the chart generated -- and the cluster's offload bucket."""
    secret = json.loads(inst.c.k("-n", NS, "get", "secret", MINIO, "-o", "json"))["data"]
    (pod,) = [p for p in inst.pods("minio") if not _of_job(p) and pod_ready(p)]
    pc = json.loads(inst.c.k("-n", NS, "get", "pulsarcluster", NAME, "-o", "json"))
    s3 = boto3.session.Session().client(
        "s3",
        endpoint_url=f"http://{pod['status']['podIP']}:9000",
        region_name="us-east-1",
        aws_access_key_id=base64.b64decode(secret["AWS_ACCESS_KEY_ID"]).decode(),
        aws_secret_access_key=base64.b64decode(secret["AWS_SECRET_ACCESS_KEY"]).decode(),
        config=botocore.config.Config(s3={"addressing_style": "path"}),
    )
    return s3, str(pc["spec"]["offload"]["bucket"])


def bucket_keys(s3: Any, bucket: str) -> set[str]:
    found: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="ledgers/"):
        found.update(o["Key"] for o in page.get("Contents", []))
    return found


def ledgers_in_metadata(inst: Installed, ledger_ids: list[int]) -> list[int]:
    """Of ``ledger_ids``, those whose ledger metadata still exists in the cluster's etcd
    (reached at its pods' addresses on the cluster bridge); a deleted ledger has none."""
    ips = [p["status"]["podIP"] for p in inst.pods("etcd")]
    url = "etcd://" + ",".join(f"{ip}:2379" for ip in ips)

    async def check() -> list[int]:
        store = await open_store(url)
        try:
            return [lid for lid in ledger_ids if await store.get(keys.ledger(lid)) is not None]
        finally:
            await store.close()

    return asyncio.run(check())


def test_offload_to_the_charts_minio_and_read_back(installed: Installed) -> None:
    """Several ledgers offloaded through the proxy's admin API to the in-cluster MinIO, their
    bookie copies deleted after the lag, and every message read back byte-identical."""
    topic = f"persistent://public/default/offload-{int(time.time())}"
    data = [os.urandom(OFFLOAD_MESSAGE) for _ in range(OFFLOAD_MESSAGES)]
    s3, bucket = minio_s3(installed)
    client = pulsar.Client(installed.service_url, operation_timeout_seconds=120)
    t0 = time.monotonic()
    try:
        # a subscription keeps the messages on the topic until the read-back
        keep = client.subscribe(topic, "keep")
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, send_timeout_millis=120_000
        )
        ids: dict[int, Any] = {}
        failed: dict[int, str] = {}

        def receipt(i: int) -> Callable[[pulsar.Result, Any], None]:
            def done(res: pulsar.Result, msg_id: Any) -> None:
                if res == pulsar.Result.Ok:
                    ids[i] = msg_id
                else:
                    failed[i] = str(res)

            return done

        for i, payload in enumerate(data):
            producer.send_async(payload, receipt(i))
        producer.flush()
        wait_until(lambda: len(ids) + len(failed) == len(data), timeout=180, what="receipts")
        assert not failed, f"{len(failed)} sends failed, e.g. {sorted(failed.items())[:3]}"
        installed.timings["offload_produce"] = time.monotonic() - t0
        last = ids[len(data) - 1]

        # every closed ledger before the last message's, through `magnetar admin` (the proxy)
        t1 = time.monotonic()
        installed.admin("topics", "offload", topic, "-m", f"{last.ledger_id()}:{last.entry_id()}")

        def status() -> dict[str, Any]:
            out: dict[str, Any] = json.loads(
                installed.admin("-o", "json", "topics", "offload-status", topic)
            )
            return out

        wait_until(
            lambda: status()["status"] in ("SUCCESS", "ERROR"), timeout=180, interval=1,
            what="the offload to finish",
        )  # fmt: skip
        final = status()
        assert final["status"] == "SUCCESS", final
        installed.timings["offload"] = time.monotonic() - t1

        def ledgers() -> list[dict[str, Any]]:
            stats = json.loads(installed.admin("-o", "json", "topics", "stats-internal", topic))
            out: list[dict[str, Any]] = stats["ledgers"]
            return out

        listed = ledgers()
        closed = [lg for lg in listed if lg["ledgerId"] < last.ledger_id()]
        assert len(closed) >= 3, listed
        before_last = sum(1 for m in ids.values() if m.ledger_id() < last.ledger_id())
        assert sum(lg["entries"] for lg in closed) == before_last, listed
        assert all(lg["offloaded"] for lg in closed), listed
        assert not any(lg["offloaded"] for lg in listed if lg["ledgerId"] >= last.ledger_id())
        in_bucket = bucket_keys(s3, bucket)
        for lg in closed:
            loc = lg["offloadLocation"]
            assert loc["complete"] is True and loc["bucket"] == bucket, loc
            assert {loc["dataKey"], loc["indexKey"]} <= in_bucket, (loc, sorted(in_bucket))
        assert final["firstUnoffloadedMessage"]["ledgerId"] == last.ledger_id(), final

        # the bookie copies go after the deletion lag: recorded, and the ledgers' metadata gone
        t2 = time.monotonic()
        wait_until(
            lambda: all(
                lg["offloadLocation"]["bookieDeleted"]
                for lg in ledgers()
                if lg["ledgerId"] < last.ledger_id()
            ),
            timeout=120, interval=1, what="the bookie copies deleted after the lag",
        )  # fmt: skip
        installed.timings["offload_bookie_copies_deleted"] = time.monotonic() - t2
        offloaded = [lg["ledgerId"] for lg in closed]
        assert ledgers_in_metadata(installed, offloaded) == [], "bookie ledgers still exist"

        # a fresh subscription from earliest: the closed ledgers can only come from MinIO now
        t3 = time.monotonic()
        consumer = client.subscribe(
            topic, "from-earliest", initial_position=pulsar.InitialPosition.Earliest
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 180
        while len(got) < len(data) and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=5000)
            except pulsar.Timeout:
                continue
            got.append(msg.data())
            consumer.acknowledge(msg)
        installed.timings["offload_read_back"] = time.monotonic() - t3
        assert len(got) == len(data), f"received {len(got)} of {len(data)}"
        bad = [i for i, (a, b) in enumerate(zip(got, data, strict=True)) if a != b]
        assert not bad, f"{len(bad)} messages differ, the first at {bad[0]}"
        print(
            f"offload: {len(data)} x {OFFLOAD_MESSAGE // 1024} KiB over {len(closed)} offloaded "
            f"ledgers; produce {installed.timings['offload_produce']:.1f}s, offload "
            f"{installed.timings['offload']:.1f}s, bookie copies gone after "
            f"{installed.timings['offload_bookie_copies_deleted']:.1f}s, read back "
            f"{installed.timings['offload_read_back']:.1f}s"
        )
        consumer.close()
        keep.close()
    finally:
        client.close()


@full_only
def test_tenant_and_topic_visible_through_admin(installed: Installed) -> None:
    docs = []
    for name in ("tenant.yaml", "topic.yaml"):
        text = (ROOT / "crds/examples" / name).read_text()
        docs.append(text.replace("clusterRef: {name: dev}", f"clusterRef: {{name: {NAME}}}"))
    installed.c.k("-n", NS, "apply", "-f", "-", stdin="\n---\n".join(docs))
    for kind, name in (("tenant", "acme"), ("topic", "acme-orders-created")):
        installed.c.k("-n", NS, "wait", f"{kind}/{name}", "--for=condition=Ready",
                      "--timeout=180s", timeout=200)  # fmt: skip
    assert "acme" in installed.admin("tenants", "list")
    namespaces = installed.admin("namespaces", "list", "acme")
    assert "acme/orders" in namespaces and "acme/events" in namespaces
    topics = installed.admin("topics", "list-partitioned-topics", "acme/orders")
    assert "persistent://acme/orders/created" in topics
    policies = json.loads(installed.admin("-o", "json", "namespaces", "policies", "acme/orders"))
    assert policies["message_ttl_in_seconds"] == 86400


@full_only
def test_ten_thousand_messages_through_the_proxy(installed: Installed) -> None:
    client = pulsar.Client(installed.service_url, operation_timeout_seconds=60)
    topic = f"persistent://public/default/bulk-{int(time.time())}"
    try:
        consumer = client.subscribe(topic, "all")
        producer = client.create_producer(topic, block_if_queue_full=True)
        t0 = time.monotonic()
        receipts: list[pulsar.Result] = []
        for i in range(10_000):
            producer.send_async(f"m{i}".encode(), lambda res, _id: receipts.append(res))
        producer.flush()
        wait_until(lambda: len(receipts) == 10_000, timeout=120, what="10,000 receipts")
        assert set(receipts) == {pulsar.Result.Ok}
        got = received_all(consumer, {f"m{i}" for i in range(10_000)})
        installed.timings["10k"] = time.monotonic() - t0
        print(f"10,000 messages produced and consumed in {installed.timings['10k']:.1f}s")
        assert len(got) == 10_000
    finally:
        client.close()


def test_prometheus_scrapes_through_the_charts_monitors(
    installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Prometheus on the host scrapes every broker, bookie, etcd member, the proxy and the
    operator through the chart's ServiceMonitor/PodMonitor (translated as the Prometheus
    Operator does), and every panel of every shipped dashboard has data after a workload
    (e2e/observability_k8s.py). After the offload and the workload tests, before any pod is
    deleted: the offload's series are still the brokers' own."""
    observability_k8s.check(
        installed.c,
        installed.timings,
        base=tmp_path_factory.mktemp("observability"),
        helm=installed.helm,
        values=[VALUES],
        namespace=NS,
        service_url=installed.service_url,
        admin_url=installed.admin_url,
    )


def test_bookie_pod_deleted_mid_publish(installed: Installed) -> None:
    kill_mid_publish(installed, lambda _topic: installed.pods("bookie")[1], "bookie-kill")


@full_only
def test_broker_pod_deleted_mid_publish(installed: Installed) -> None:
    """The broker that owns the topic goes: the client reconnects (through the proxy) to the
    broker that takes the topic over."""

    def owner_pod(topic: str) -> dict[str, Any]:
        url = json.loads(installed.admin("-o", "json", "topics", "lookup", topic))["brokerUrl"]
        ip = str(url).rsplit("/", 1)[-1].split(":")[0]
        return next(p for p in installed.pods("broker") if p["status"].get("podIP") == ip)

    kill_mid_publish(installed, owner_pod, "broker-kill")


def test_version_change_rolls_bookies_then_brokers(installed: Installed) -> None:
    c = installed.c
    for image in ("broker", "bookie"):
        subprocess.run(
            ["docker", "tag", f"magnetar/{image}:{__version__}",
             f"magnetar/{image}:{ROLL_VERSION}"],
            check=True, capture_output=True,
        )  # fmt: skip
    subprocess.run(
        ["bash", str(SCRIPT), "load", f"magnetar/broker:{ROLL_VERSION}",
         f"magnetar/bookie:{ROLL_VERSION}"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    before = {p["metadata"]["uid"] for p in installed.pods()}
    client = pulsar.Client(installed.service_url, operation_timeout_seconds=120)
    topic = f"persistent://public/default/roll-{int(time.time())}"
    try:
        consumer = client.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        pub = Publisher(client, topic, prefix="roll")
        pub.start()
        wait_until(lambda: pub.count() >= 500, timeout=120, what="500 receipts")
        t0 = time.monotonic()
        c.k("-n", NS, "patch", "pulsarcluster", NAME, "--type", "merge",
            "-p", json.dumps({"spec": {"version": ROLL_VERSION}}))  # fmt: skip

        def rolled() -> bool:
            pods = installed.pods("bookie") + installed.pods("broker")
            images = {cont["image"] for p in pods for cont in p["spec"]["containers"]}
            done = images == {f"magnetar/bookie:{ROLL_VERSION}", f"magnetar/broker:{ROLL_VERSION}"}
            return done and len(pods) == 5 and all(pod_ready(p) for p in pods)

        wait_until(rolled, timeout=900, interval=2, what="bookies and brokers rolled")
        c.k("-n", NS, "wait", f"pulsarcluster/{NAME}", "--for=condition=Ready",
            "--timeout=300s", timeout=320)  # fmt: skip
        installed.timings["roll"] = time.monotonic() - t0
        at = pub.count()
        wait_until(lambda: pub.count() >= at + 500, timeout=180, what="500 more receipts")
        pub.finish()
        got = received_all(consumer, pub.receipted)
        lost = pub.receipted - got
        print(
            f"roll: {installed.timings['roll']:.1f}s; sent {pub.sent}, receipted "
            f"{len(pub.receipted)}, failed {len(pub.failed)}, lost {len(lost)}"
        )
        assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}"
    finally:
        client.close()

    bookies = sorted(
        installed.pods("bookie"), key=lambda p: _time(p["metadata"]["creationTimestamp"])
    )
    brokers = installed.pods("broker")
    assert not {p["metadata"]["uid"] for p in bookies + brokers} & before, "every pod replaced"

    def ready_at(p: dict[str, Any]) -> float:
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
        return _time(cond["lastTransitionTime"])

    # one bookie at a time, highest ordinal first: each created after the previous was Ready
    assert [p["metadata"]["name"] for p in bookies] == [f"{NAME}-bookie-{i}" for i in (2, 1, 0)]
    for prev, nxt in itertools.pairwise(bookies):
        assert _time(nxt["metadata"]["creationTimestamp"]) >= ready_at(prev)
    # the brokers only after the last bookie was back
    first_broker = min(_time(p["metadata"]["creationTimestamp"]) for p in brokers)
    assert first_broker >= ready_at(bookies[-1]), "brokers rolled before the bookies were done"


# --- the operator and autorecovery (issue 22): scale-down, roll, lost volume ---------------


def patch_cluster(inst: Installed, spec: dict[str, Any]) -> None:
    inst.c.k("-n", NS, "patch", "pulsarcluster", NAME, "--type", "merge",
             "-p", json.dumps({"spec": spec}))  # fmt: skip


def cluster_events(inst: Installed, reasons: set[str]) -> list[tuple[str, str]]:
    """(reason, message) of the PulsarCluster's events with ``reasons``, oldest first."""
    items = json.loads(inst.c.k("-n", NS, "get", "events", "-o", "json"))["items"]
    items = [e for e in items if e["reason"] in reasons]
    items.sort(
        key=lambda e: (
            e.get("firstTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"],
            int(e["metadata"]["resourceVersion"]),
        )
    )
    return [(e["reason"], e["message"]) for e in items]


def bookies_condition(inst: Installed) -> dict[str, Any]:
    pc = json.loads(inst.c.k("-n", NS, "get", "pulsarcluster", NAME, "-o", "json"))
    conds = pc.get("status", {}).get("conditions") or []
    found: dict[str, Any] = next(c for c in conds if c["type"] == "BookiesReady")
    return found


def bookie_states(inst: Installed) -> dict[str, dict[str, Any]]:
    """Bookie id -> its entry in ``magnetar admin bookies list``."""
    doc = json.loads(inst.admin("--output", "json", "bookies", "list"))
    return {b["bookieId"]: b for b in doc["bookies"]}


def fragments_short(inst: Installed) -> list[str]:
    """Every fragment of every ledger in the cluster's etcd that is not on Wq (2) distinct
    live (rw) bookies, described."""
    live = {b for b, info in bookie_states(inst).items() if info["state"] == "rw"}
    ips = [p["status"]["podIP"] for p in inst.pods("etcd")]
    url = "etcd://" + ",".join(f"{ip}:2379" for ip in ips)

    async def scan() -> list[str]:
        store = await open_store(url)
        bad: list[str] = []
        try:
            async for record in store.scan_all(keys.LEDGERS):
                try:
                    meta = LedgerMetadata.from_json(record.value)
                except (ValueError, KeyError, TypeError):
                    continue
                bad += [
                    f"{record.key}@{f.first_entry_id}: {list(f.ensemble)}"
                    for f in meta.fragments
                    if len(set(f.ensemble)) < 2 or not set(f.ensemble) <= live
                ]
        finally:
            await store.close()
        return bad

    return asyncio.run(scan())


KEEP = "keep"
"""The durable subscription ``publish`` creates first: without one, what is published is
trimmed at once (no backlog to keep), as in Pulsar."""


def publish(inst: Installed, prefix: str, count: int, size: int = 4096) -> tuple[str, set[str]]:
    """``count`` messages of ``size`` bytes (over several 1 MiB ledgers), all receipted,
    kept for subscription ``KEEP``."""
    client = pulsar.Client(inst.service_url, operation_timeout_seconds=120)
    topic = f"persistent://public/default/{prefix}-{int(time.time())}"
    try:
        client.subscribe(topic, KEEP, initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, batching_enabled=False)
        sent = set()
        for i in range(count):
            body = f"{prefix}-{i}-".encode().ljust(size, b"x")
            producer.send(body)
            sent.add(body.decode())
        producer.close()
    finally:
        client.close()
    return topic, sent


def read_back(inst: Installed, topic: str, wanted: set[str]) -> None:
    client = pulsar.Client(inst.service_url, operation_timeout_seconds=120)
    try:
        consumer = client.subscribe(topic, KEEP)
        got = received_all(consumer, wanted)
        lost = wanted - got
        assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:3]}"
    finally:
        client.close()


def test_bookie_scale_down_decommissions_first(installed: Installed) -> None:
    inst = installed
    patch_cluster(inst, {"bookies": {"replicas": 4}})
    wait_until(
        lambda: len([p for p in inst.pods("bookie") if pod_ready(p)]) == 4
        and bookies_condition(inst)["status"] == "True",
        timeout=300, interval=2, what="4 bookies Ready",
    )  # fmt: skip
    topic, sent = publish(inst, "scale-down", 1500)
    t0 = time.monotonic()
    patch_cluster(inst, {"bookies": {"replicas": 2}})

    def done() -> bool:
        pods = inst.pods("bookie")
        cond = bookies_condition(inst)
        return len(pods) == 2 and all(pod_ready(p) for p in pods) and cond["status"] == "True"

    wait_until(done, timeout=900, interval=3, what="bookies 4 -> 2")
    inst.timings["scale_down_4_2"] = time.monotonic() - t0
    steps = [
        (r, m.split(":")[0])
        for r, m in cluster_events(inst, {"DecommissioningBookie", "ScalingBookies"})
        if r != "ScalingBookies" or "-> 3 (target 2)" in m or "-> 2 (target 2)" in m
    ]
    assert steps[-4:] == [
        ("DecommissioningBookie", f"{NAME}-bookie-3"),
        ("ScalingBookies", "bookies 4 -> 3 (target 2)"),
        ("DecommissioningBookie", f"{NAME}-bookie-2"),
        ("ScalingBookies", "bookies 3 -> 2 (target 2)"),
    ], steps
    states = bookie_states(inst)
    for i in (2, 3):
        (entry,) = [b for b in states.values() if b["bookieId"].startswith(f"{NAME}-bookie-{i}.")]
        assert entry["state"] == "decommissioned", entry
    assert not fragments_short(inst)
    read_back(inst, topic, sent)

    def claims_deleted() -> bool:
        # the claims go in the operator's pass after the pod is gone
        claims = inst.c.k("-n", NS, "get", "pvc", "-o", "name").split()
        return not [c for c in claims if c.endswith((f"{NAME}-bookie-3", f"{NAME}-bookie-2"))]

    wait_until(claims_deleted, timeout=120, interval=2, what="removed bookies' claims deleted")
    print(f"bookies 4 -> 2 in {inst.timings['scale_down_4_2']:.1f}s")
    # back to 3 for the tests after (a fresh bookie-2)
    patch_cluster(inst, {"bookies": {"replicas": 3}})
    wait_until(
        lambda: len([p for p in inst.pods("bookie") if pod_ready(p)]) == 3
        and bookies_condition(inst)["status"] == "True",
        timeout=300, interval=2, what="3 bookies again",
    )  # fmt: skip


@full_only
def test_bookie_roll_waits_for_zero_under_replicated(installed: Installed) -> None:
    """A roll restarts a bookie only when no ledger is under-replicated: the restarted
    bookie's ledgers, marked by the auditor while it was gone (a 1 s lost-bookie delay, an
    audit every 0.5 s), are still being copied when it is back, because the recovery workers
    are held to 32 KiB/s (``replicationRateByBytes``; a copy begun finishes), so the
    operator waits (WaitingForReplication) before the next restart."""
    inst = installed
    # first roll: every bookie audits every 0.5 s with a 1 s lost-bookie delay (a restarted
    # bookie's ledgers are marked, and a copy begun, before it is back), and its recovery
    # worker copies at most 32 KiB/s: its first 1 MiB ledger at once, the next 32 s later
    rolled_once = len(cluster_events(inst, {"RollingBookie"}))
    slow = {"lostBookieRecoveryDelay": "1", "replicationRateByBytes": str(32 << 10)}
    patch_cluster(inst, {"bookies": {"config": slow, "extraArgs": ["--audit-interval=0.5"]}})

    def settled(n_rolls: int) -> bool:
        pods = inst.pods("bookie")
        return (
            len(cluster_events(inst, {"RollingBookie"})) >= n_rolls
            and len(pods) == 3
            and all(pod_ready(p) for p in pods)
            and bookies_condition(inst)["status"] == "True"
        )

    wait_until(lambda: settled(rolled_once + 3), timeout=900, interval=3, what="first roll")
    # closed 1 MiB ledgers (VALUES), each a 32 s copy at that rate
    topic, sent = publish(inst, "roll-ur", 1500)
    before = len(cluster_events(inst, {"RollingBookie", "WaitingForReplication"}))
    # second roll: it also lifts the limit, so each bookie is unthrottled once restarted (the
    # first restart's copies are made by the two bookies still throttled)
    patch_cluster(inst, {"bookies": {"config": {"replicationRateByBytes": None}}})
    wait_until(lambda: settled(rolled_once + 6), timeout=900, interval=3, what="second roll")
    seen = cluster_events(inst, {"RollingBookie", "WaitingForReplication"})[before:]
    order = [r for r, _ in seen]
    print("roll order:", order)
    rolls = [i for i, r in enumerate(order) if r == "RollingBookie"]
    assert len(rolls) == 3, seen
    # between consecutive restarts the operator waited for the auditor's marks to clear
    assert any("WaitingForReplication" in order[a:b] for a, b in itertools.pairwise(rolls)), seen
    wait_until(lambda: not fragments_short(inst), timeout=300, interval=3,
               what="every fragment on 2 live bookies")  # fmt: skip
    read_back(inst, topic, sent)


def test_lost_bookie_volume_is_replaced(installed: Installed) -> None:
    inst = installed
    patch_cluster(inst, {"bookies": {"nodeLossPolicy": "Replace"}})
    topic, sent = publish(inst, "lost-volume", 1500)
    victim = f"{NAME}-bookie-1"
    old_uid = next(p for p in inst.pods("bookie") if p["metadata"]["name"] == victim)["metadata"][
        "uid"
    ]
    claim = json.loads(inst.c.k("-n", NS, "get", "pvc", f"ledgers-{victim}", "-o", "json"))
    pv_name = claim["spec"]["volumeName"]
    pv = json.loads(inst.c.k("get", "pv", pv_name, "-o", "json"))
    path = (pv["spec"].get("hostPath") or pv["spec"].get("local") or {}).get("path")
    # the volume goes: its PV object (finalizer removed, as when the disk's node is gone)
    # and its directory, then the pod
    inst.c.k("patch", "pv", pv_name, "--type", "json",
             "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')  # fmt: skip
    inst.c.k("delete", "pv", pv_name, "--wait=false")
    if path:
        subprocess.run(["rm", "-rf", path], check=False)
    inst.c.k("-n", NS, "delete", "pod", victim, "--wait=false")
    t0 = time.monotonic()

    def replaced() -> bool:
        pods = inst.pods("bookie")
        fresh = [p for p in pods if p["metadata"]["name"] == victim]
        return (
            bool(fresh)
            and fresh[0]["metadata"]["uid"] != old_uid
            and len(pods) == 3
            and all(pod_ready(p) for p in pods)
            and bookies_condition(inst)["status"] == "True"
            and any(r == "ReplacingBookie" for r, _ in cluster_events(inst, {"ReplacingBookie"}))
        )

    wait_until(replaced, timeout=900, interval=3, what="lost bookie replaced")
    inst.timings["lost_volume_replaced"] = time.monotonic() - t0
    new_claim = json.loads(inst.c.k("-n", NS, "get", "pvc", f"ledgers-{victim}", "-o", "json"))
    assert new_claim["spec"]["volumeName"] != pv_name
    reasons = [r for r, _ in cluster_events(inst, {"DecommissioningBookie", "ReplacingBookie"})]
    assert reasons[-2:] == ["DecommissioningBookie", "ReplacingBookie"], reasons
    wait_until(lambda: not fragments_short(inst), timeout=300, interval=3, what="Wq copies")
    read_back(inst, topic, sent)
    print(f"lost volume: replaced in {inst.timings['lost_volume_replaced']:.1f}s")


@full_only
def test_spark_pipeline_as_a_spark_on_k8s_job(installed: Installed) -> None:
    """The payments pipeline (spark-on-k8s/submit.sh, cluster mode: driver and executors are
    pods of the Spark image) reads payments the host produced through the proxy from the
    brokers' Service, and the host reads per-merchant totals matching them."""
    pc = json.loads(installed.c.k("-n", NS, "get", "pulsarcluster", NAME, "-o", "json"))
    try:
        spark_k8s.run_payments_job(
            installed.c,
            host_service_url=installed.service_url,
            admin=installed.admin,
            service_url=pc["status"]["serviceUrl"],
            admin_url=pc["status"]["adminUrl"],
            timings=installed.timings,
        )
    finally:
        spark_k8s.cleanup(installed.c)


def test_secured_cluster_tls_and_tokens(installed: Installed) -> None:
    """A second PulsarCluster with spec.tls and spec.auth, reconciled by the same operator
    in its own namespace (e2e/secured.py): Ready, the processes serve their Secrets'
    certificates, a TLS + token client from the host, Tenant/Topic through the
    authenticated admin API; in the full form also a certificate renewal reaching the broker."""
    secured.check(installed.c, installed.timings, rotation=not REDUCED)


@full_only
def test_function_resource_runs_as_pods(installed: Installed) -> None:
    """Issue 28, acceptance 5 (e2e/functions_k8s.py): a Function resource runs as pods,
    replicas 2 -> 3 scales its StatefulSet, an instance's pod deleted mid-stream loses no
    input, deleting the Function leaves nothing."""
    functions_k8s.check(installed.site())


@full_only
def test_two_pulsarclusters_replicate_both_ways(installed: Installed) -> None:
    """Issue 25, acceptance 5 (e2e/georep_k8s.py): a second PulsarCluster, a namespace
    replicated both ways, the owning broker's pod deleted mid-stream: each side receives every
    receipted message of both producers exactly once."""
    georep_k8s.check(installed.site())


def test_uninstall_and_cluster_down_leave_nothing(installed: Installed) -> None:
    c = installed.c
    pvcs = json.loads(c.k("-n", NS, "get", "pvc", "-o", "json"))["items"]
    dirs = [
        Path(
            json.loads(c.k("get", "pv", p["spec"]["volumeName"], "-o", "json"))["spec"]["local"][
                "path"
            ]
        )
        for p in pvcs
    ]
    assert dirs and all(d.is_dir() for d in dirs)
    # `helm uninstall` alone: its pre-delete hook deletes the Tenants/Topics managed through
    # the cluster (applied with kubectl in the full form), then the PulsarCluster, while the
    # operator still runs (their finalizers are its; the cluster's deletes the claims)
    t0 = time.monotonic()
    out = subprocess.run(
        [str(installed.helm), "--kubeconfig", str(c.kubeconfig), "uninstall", "magnetar",
         "-n", NS, "--wait", "--timeout", "300s"],
        capture_output=True, text=True, timeout=330, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    installed.timings["helm_uninstall"] = time.monotonic() - t0
    print(f"helm uninstall took {installed.timings['helm_uninstall']:.1f}s")
    assert not c.k("-n", NS, "get", "pvc", "-o", "name").strip(), "claims deleted (Delete policy)"
    wait_until(lambda: not any(d.exists() for d in dirs), timeout=120, what="volumes removed")

    def remaining() -> list[str]:
        kinds = (
            "all,configmaps,pvc,pdb,pulsarclusters,tenants,topics,functions,hpa,jobs,"
            "serviceaccounts,roles,rolebindings"
        )
        names = c.k("-n", NS, "get", kinds, "-o", "name").split()
        defaults = ("configmap/kube-root-ca.crt", "serviceaccount/default")
        return [o for o in names if o not in defaults]

    try:  # the operator pod may still be terminating
        wait_until(lambda: not remaining(), timeout=90, interval=1, what="nothing left")
    except TimeoutError:
        raise AssertionError(f"left behind: {remaining()}") from None
    assert not c.k("get", "pv", "-o", "name").strip(), "no PersistentVolume left"
    c.k("delete", "namespace", NS, "--timeout=120s", timeout=150)
    print("timings:", json.dumps({k: round(v, 1) for k, v in installed.timings.items()}))
    if c.started_here:
        down_and_check(c)
