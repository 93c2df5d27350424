"""Smoke tests of the images `make images` builds (scripts/images/build.sh), run in Docker:

* the broker image as ``magnetar standalone``, ports published on 127.0.0.1 only: the
  official Python client produces and consumes through it;
* the bookie image, configured by a mounted bookkeeper.conf (``--config``), against an etcd
  on a loopback port (``--network host``): it registers under /bookies/available;
* the broker image as ``magnetar broker --config broker.conf`` over that bookie: the
  official client produces and consumes through it;
* the operator image imports its kopf handlers;
* the MinIO image (the chart's optional offload target) serves S3 to boto3, as the
  offloader and the chart's bucket Job use it;
* the Spark image runs the example pipeline (spark-submit, local mode) against a standalone
  on a loopback port, and the host checks the totals.

Both check the process runs as uid 10001. Skipped, naming what is missing, when Docker
cannot run or the images are not built. Containers are removed by name at the end. About
10 s with the images built (`make test-images` builds them first: ~1 min cold, with the
Debian base ~2 min).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from magnetar import __version__
from magnetar.metadata import keys, open_store
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.procs import LOOPBACK, free_port
from tests.support.roundtrip import produce_and_consume
from tests.support.wait import wait_until

PREFIX = "magnetar"
UID = "10001"


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=check
    )


def image(name: str) -> str:
    """The built image's name, or a skip naming what is missing."""
    if shutil.which("docker") is None:
        pytest.skip("no docker client: run `make images` (scripts/images/docker.sh installs it)")
    info = docker("info", "--format", "{{.ServerVersion}}", check=False)
    if info.returncode != 0:
        pytest.skip(f"no Docker daemon answers ({info.stderr.strip()[:200]}): run `make images`")
    ref = f"{PREFIX}/{name}:{__version__}"
    if docker("image", "inspect", ref, check=False).returncode != 0:
        pytest.skip(f"image {ref} is not built: run `make images`")
    return ref


@pytest.fixture
def names() -> Iterator[Callable[[], str]]:
    """Unique container names; each container is removed by its name at the end."""
    made: list[str] = []

    def new() -> str:
        made.append(f"magnetar-smoke-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield new
    for name in made:
        logs = docker("logs", "--tail", "30", name, check=False)
        print(f"--- {name} logs:\n{logs.stdout}{logs.stderr}")
        docker("rm", "-f", "-v", name, check=False)


def running_uid(name: str) -> str:
    return docker("exec", name, "id", "-u").stdout.strip()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def test_standalone_in_the_broker_image_serves_the_official_client(
    names: Callable[[], str],
) -> None:
    ref, container = image("broker"), names()
    # the same port numbers inside and out, so the advertised URLs work from the host
    port, http_port = free_port(), free_port()
    docker(
        "run", "-d", "--name", container,
        "-p", f"{LOOPBACK}:{port}:{port}", "-p", f"{LOOPBACK}:{http_port}:{http_port}",
        ref, "standalone",
        "--data-dir", "/var/lib/magnetar/standalone",
        "--port", str(port), "--http-port", str(http_port),
        "--bind-address", "0.0.0.0", "--advertised-address", LOOPBACK,
    )  # fmt: skip
    wait_until(
        lambda: http_ok(f"http://{LOOPBACK}:{http_port}/admin/v2/brokers/health"),
        timeout=60,
        what="standalone in a container healthy",
    )
    assert running_uid(container) == UID

    produce_and_consume(f"pulsar://{LOOPBACK}:{port}")


def write_conf(directory: Path, name: str, text: str) -> Path:
    """A config file the container's uid 10001 can read through a read-only bind mount."""
    directory.mkdir(mode=0o755, exist_ok=True)
    directory.chmod(0o755)
    path = directory / name
    path.write_text(text)
    path.chmod(0o644)
    return directory


def run_bookie(name: str, ref: str, etcd: EtcdServer, conf_dir: Path) -> tuple[int, int]:
    """The bookie image on the host network, configured by a mounted bookkeeper.conf."""
    port, http_port = free_port(), free_port()
    write_conf(
        conf_dir,
        "bookkeeper.conf",
        f"metadataServiceUri=etcd:http://{etcd.endpoint}\n"
        f"bookiePort={port}\n"
        f"httpServerPort={http_port}\n"
        "journalDirectories=/var/lib/magnetar/journal\n"
        "ledgerDirectories=/var/lib/magnetar/ledgers\n",
    )
    docker(
        "run", "-d", "--name", name, "--network", "host",
        "-v", f"{conf_dir}:/etc/magnetar:ro",
        ref, "bookie", "--config", "/etc/magnetar/bookkeeper.conf",
        "--bind-address", LOOPBACK, "--advertised-address", LOOPBACK,
    )  # fmt: skip
    wait_until(
        lambda: http_ok(f"http://{LOOPBACK}:{http_port}/health"),
        timeout=60,
        what="bookie in a container healthy",
    )
    return port, http_port


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    if not etcd_available():
        pytest.skip("etcd is not installed (Debian's etcd-server)")
    server = EtcdServer(tmp_path / "etcd").start()
    yield server
    server.stop()


def test_bookie_image_registers_in_etcd(
    names: Callable[[], str], tmp_path: Path, etcd: EtcdServer
) -> None:
    ref, container = image("bookie"), names()
    port, http_port = run_bookie(container, ref, etcd, tmp_path / "conf")
    assert running_uid(container) == UID

    async def registration() -> dict[str, object] | None:
        store = await open_store(etcd.url)
        try:
            record = await store.get(keys.bookie_available(f"{LOOPBACK}:{port}"))
            return None if record is None else dict(json.loads(record.value))
        finally:
            await store.close()

    info = asyncio.run(registration())
    assert info is not None, "the bookie is not under /bookies/available"
    assert (info["httpPort"], info["readOnly"]) == (http_port, False), info


def test_broker_and_bookie_images_form_a_cluster(
    names: Callable[[], str], tmp_path: Path, etcd: EtcdServer
) -> None:
    """``magnetar broker --config broker.conf`` in the broker image, over a bookie container
    and etcd: the official client produces and consumes through it."""
    bookie_ref, broker_ref = image("bookie"), image("broker")
    container, container2 = names(), names()
    run_bookie(container, bookie_ref, etcd, tmp_path / "bookie-conf")
    port, http_port = free_port(), free_port()
    conf_dir = write_conf(
        tmp_path / "broker-conf",
        "broker.conf",
        f"metadataStoreUrl=etcd:http://{etcd.endpoint}\n"
        "clusterName=smoke\n"
        f"brokerServicePort={port}\n"
        f"webServicePort={http_port}\n"
        f"bindAddress={LOOPBACK}\n"
        f"advertisedAddress={LOOPBACK}\n"
        "managedLedgerDefaultEnsembleSize=1\n"
        "managedLedgerDefaultWriteQuorum=1\n"
        "managedLedgerDefaultAckQuorum=1\n",
    )
    docker(
        "run", "-d", "--name", container2, "--network", "host",
        "-v", f"{conf_dir}:/etc/magnetar/conf:ro",
        broker_ref, "broker", "--config", "/etc/magnetar/conf/broker.conf",
    )  # fmt: skip
    wait_until(
        lambda: http_ok(f"http://{LOOPBACK}:{http_port}/admin/v2/brokers/health"),
        timeout=60,
        what="broker in a container healthy",
    )
    assert running_uid(container2) == UID
    produce_and_consume(f"pulsar://{LOOPBACK}:{port}")


def test_operator_image_imports_its_handlers(names: Callable[[], str]) -> None:
    ref, container = image("operator"), names()
    out = docker(
        "run", "--name", container, "--entrypoint", "python3", ref, "-c",
        "import os, magnetar_operator.handlers, kopf; print(os.getuid())",
    )  # fmt: skip
    assert out.stdout.strip() == UID
    help_text = docker("run", "--rm", ref, "--help").stdout
    assert "kopf run" in help_text


def test_minio_image_serves_s3(names: Callable[[], str]) -> None:
    """magnetar/minio with credentials from the environment (as the chart passes them): a
    bucket is created and an object written, listed, read back and deleted with boto3."""
    import boto3

    ref, container = image("minio"), names()
    port = free_port()
    user, password = "smoke-user", uuid.uuid4().hex
    docker(
        "run", "-d", "--name", container, "-p", f"{LOOPBACK}:{port}:9000",
        "-e", f"MINIO_ROOT_USER={user}", "-e", f"MINIO_ROOT_PASSWORD={password}", ref,
    )  # fmt: skip
    wait_until(
        lambda: http_ok(f"http://{LOOPBACK}:{port}/minio/health/ready"),
        timeout=60,
        what="MinIO in a container ready",
    )
    assert running_uid(container) == UID
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://{LOOPBACK}:{port}",
        region_name="us-east-1",
        aws_access_key_id=user,
        aws_secret_access_key=password,
    )
    s3.create_bucket(Bucket="offload")
    body = uuid.uuid4().bytes * 1000
    s3.put_object(Bucket="offload", Key="ledger-1/data", Body=body)
    listed = s3.list_objects_v2(Bucket="offload")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("ledger-1/data", len(body))]
    assert s3.get_object(Bucket="offload", Key="ledger-1/data")["Body"].read() == body
    s3.delete_object(Bucket="offload", Key="ledger-1/data")
    assert "Contents" not in s3.list_objects_v2(Bucket="offload")


def test_spark_image_runs_the_payments_pipeline(names: Callable[[], str], tmp_path: Path) -> None:
    """The Spark image's Java, pyspark and magnetar, as uid 10001: the example app
    (/opt/spark-apps/payments.py) through spark-submit in local mode, against a standalone
    on a loopback port (``--network host``); the host checks the totals it wrote."""
    from datetime import UTC, datetime, timedelta

    import pulsar

    from magnetar.spark.examples import payments_client as pc
    from tests.support.standalone import StandaloneProc

    ref, container = image("spark"), names()
    proc = StandaloneProc(tmp_path / "data").start()
    try:
        start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        rows = pc.sample(300, seed=5, start=start)
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
        try:
            source = "persistent://public/default/image-payments"
            sink = "persistent://public/default/image-totals"
            pc.produce(client, source, [*rows, pc.closing(start + timedelta(minutes=10))])
            out = docker(
                "run", "--name", container, "--network", "host", ref,
                "spark-submit", "--master", "local[1]",
                "--conf", f"spark.driver.host={LOOPBACK}",
                "--conf", f"spark.driver.bindAddress={LOOPBACK}",
                "--conf", "spark.ui.enabled=false",
                "/opt/spark-apps/payments.py",
                "--service-url", proc.service_url, "--admin-url", proc.http_url,
                "--source", source, "--sink", sink, "--checkpoint", "/tmp/checkpoint",
                timeout=300, check=False,
            )  # fmt: skip
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
            assert "finished:" in out.stdout
            assert pc.as_totals(pc.read_results(client, sink)) == pc.expected_totals(rows)
        finally:
            client.close()
    finally:
        proc.stop()
    uid = docker("run", "--rm", ref, "id", "-u").stdout.strip()
    assert uid == UID
    java = docker("run", "--rm", ref, "java", "-version", check=False)
    assert 'version "17' in java.stderr, java.stderr
