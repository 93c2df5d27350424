"""Smoke tests of the images `make images` builds (scripts/images/build.sh), run in Docker:

* the broker image as ``magnetar standalone``, ports published on 127.0.0.1 only: the
  official Python client produces and consumes through it;
* the bookie image, configured by a mounted bookkeeper.conf (``--config``), against an etcd
  on a loopback port (``--network host``): it registers under /bookies/available.

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
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar import __version__
from magnetar.metadata import keys, open_store
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.procs import LOOPBACK, free_port, wait_until

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
def container() -> Iterator[str]:
    """A unique container name; the container is removed by that name at the end."""
    name = f"magnetar-smoke-{uuid.uuid4().hex[:8]}"
    yield name
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


def test_standalone_in_the_broker_image_serves_the_official_client(container: str) -> None:
    ref = image("broker")
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

    client = pulsar.Client(f"pulsar://{LOOPBACK}:{port}", operation_timeout_seconds=30)
    try:
        topic = f"persistent://public/default/smoke-{uuid.uuid4().hex[:6]}"
        consumer = client.subscribe(
            topic, "smoke", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic)
        sent = [f"message-{i}".encode() for i in range(100)]
        for payload in sent:
            producer.send(payload)
        got = []
        for _ in sent:
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent
    finally:
        client.close()


@pytest.mark.skipif(not etcd_available(), reason="etcd is not installed (Debian's etcd-server)")
def test_bookie_image_registers_in_etcd(container: str, tmp_path: Path) -> None:
    ref = image("bookie")
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        port, http_port = free_port(), free_port()
        conf_dir = tmp_path / "conf"
        conf_dir.mkdir(mode=0o755)
        conf = conf_dir / "bookkeeper.conf"
        conf.write_text(
            f"metadataServiceUri=etcd:http://{etcd.endpoint}\n"
            f"bookiePort={port}\n"
            f"httpServerPort={http_port}\n"
            "journalDirectories=/var/lib/magnetar/journal\n"
            "ledgerDirectories=/var/lib/magnetar/ledgers\n"
        )
        conf.chmod(0o644)
        docker(
            "run", "-d", "--name", container, "--network", "host",
            "-v", f"{conf_dir}:/etc/magnetar:ro",
            ref, "bookie", "--config", "/etc/magnetar/bookkeeper.conf",
            "--bind-address", LOOPBACK, "--advertised-address", LOOPBACK,
        )  # fmt: skip
        wait_until(
            lambda: http_ok(f"http://{LOOPBACK}:{http_port}/health"),
            timeout=60,
            what="bookie in a container healthy",
        )
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
    finally:
        etcd.stop()
