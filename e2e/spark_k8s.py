"""The payments pipeline as a Spark-on-Kubernetes job on the local cluster (issue 16,
acceptance 4), for the PulsarCluster suite: the Spark image loaded into the node,
spark-on-k8s/rbac.yaml and checkpoint-pvc.yaml applied in a namespace of its own,
spark-on-k8s/submit.sh (spark-submit in cluster mode: driver and executors are pods) run
against the cluster's brokers, and the host producing the payments and checking the totals
with the host-side client (src/magnetar/spark/examples/payments_client.py).

Why a module: the suite's module holds the cluster's tests; this is the Spark job's driving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from e2e.localcluster import ROOT, SCRIPT, Cluster
from magnetar import __version__

NAMESPACE = "magnetar-spark"
IMAGE = f"magnetar/spark:{__version__}"
PAYMENTS = 2000


def image_missing() -> str | None:
    ok = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False)
    return None if ok.returncode == 0 else f"image {IMAGE} is not built: run `make images`"


def client(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.spark.examples.payments_client", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def run_payments_job(
    c: Cluster,
    *,
    host_service_url: str,
    admin: Callable[..., str],
    service_url: str,
    admin_url: str,
    timings: dict[str, float],
) -> None:
    reason = image_missing()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    subprocess.run(["bash", str(SCRIPT), "load", IMAGE], check=True, capture_output=True,
                   timeout=900)  # fmt: skip
    timings["spark_image_load"] = time.monotonic() - t0
    ns_doc = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    c.k("apply", "-f", "-", stdin=ns_doc)
    c.k("-n", NAMESPACE, "apply", "-f", str(ROOT / "spark-on-k8s/rbac.yaml"),
        "-f", str(ROOT / "spark-on-k8s/checkpoint-pvc.yaml"))  # fmt: skip

    suffix = str(int(time.time()))
    source = f"persistent://public/default/payments-{suffix}"
    sink = f"persistent://public/default/merchant-totals-{suffix}"
    admin("topics", "create-partitioned-topic", source, "-p", "2")
    sample = ["--count", str(PAYMENTS), "--seed", suffix]
    made = client("produce", "--service-url", host_service_url, "--topic", source, *sample)
    assert made.returncode == 0, made.stderr

    app = f"totals-{suffix}"
    executors: set[str] = set()
    stop = threading.Event()

    def watch() -> None:  # executor pods exist only while the job runs
        while not stop.is_set():
            try:
                out = c.k("-n", NAMESPACE, "get", "pods", "-l", "spark-role=executor",
                          "-o", "name", timeout=30)  # fmt: skip
                executors.update(out.split())
            except (AssertionError, subprocess.TimeoutExpired):
                pass
            stop.wait(1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    env = {
        **os.environ,
        "KUBECONFIG": str(c.kubeconfig),
        "SPARK_NAMESPACE": NAMESPACE,
        "SPARK_IMAGE": IMAGE,
        "SPARK_PULL_POLICY": "Never",
        "SPARK_EXECUTORS": "2",
        "SPARK_APP_NAME": app,
        "MAGNETAR_SERVICE_URL": service_url,
        "MAGNETAR_ADMIN_URL": admin_url,
        "MAGNETAR_SOURCE": source,
        "MAGNETAR_SINK": sink,
    }
    t0 = time.monotonic()
    try:
        submit = subprocess.run(
            ["bash", str(ROOT / "spark-on-k8s/submit.sh")],
            env=env, capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join(30)
    timings["spark_job"] = time.monotonic() - t0
    driver = json.loads(c.k("-n", NAMESPACE, "get", "pod", f"{app}-driver", "-o", "json"))
    phase = driver["status"]["phase"]
    if phase != "Succeeded":
        logs = c.k("-n", NAMESPACE, "logs", f"{app}-driver", "--tail=60", timeout=60)
        raise AssertionError(
            f"driver pod {phase}; spark-submit exit {submit.returncode}:\n"
            f"{submit.stderr[-3000:]}\n--- driver log ---\n{logs}"
        )
    log = c.k("-n", NAMESPACE, "logs", f"{app}-driver", timeout=60)
    assert "finished:" in log, log[-2000:]
    print(
        f"spark job {app}: {timings['spark_job']:.1f}s (image load "
        f"{timings['spark_image_load']:.1f}s), executor pods {sorted(executors)}"
    )
    assert len(executors) >= 1, "no executor pod ran"

    totals = client("totals", "--service-url", host_service_url, "--topic", sink, "--expect",
                    *sample)  # fmt: skip
    assert totals.returncode == 0, totals.stdout[-2000:] + totals.stderr
    print(totals.stdout.splitlines()[-1])


def cleanup(c: Cluster) -> None:
    subprocess.run(
        [str(c.kubectl), "--kubeconfig", str(c.kubeconfig), "delete", "namespace", NAMESPACE,
         "--ignore-not-found", "--timeout=180s"],
        capture_output=True, timeout=200, check=False,
    )  # fmt: skip
