"""Namespace and bundle unload on a two-broker etcd cluster (issue 26), under producers and
consumers of the official client: a bundle unload sent to a broker that does not own the
bundle is redirected (307) to its owner, which closes the bundle's topics and gives up the
bundle; a namespace unload through either broker unloads every bundle on its owner. Clients
reconnect through lookup and nothing receipted is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

NS = "public/unload"
TOPICS = [f"persistent://{NS}/t{i}" for i in range(8)]


@pytest.fixture
def brokers(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    started: list[BrokerProc] = []
    try:
        started += [
            BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0).start()
            for _ in range(2)
        ]
        yield started[0], started[1]
    finally:
        for proc in reversed(started):
            proc.stop()
        bookie.stop()


def _http(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes, str]:
    """(status, body, Location) -- redirects are not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as r:
            return r.status, r.read(), ""
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Location", "")


def _owner(brokers: tuple[BrokerProc, ...], topic: str) -> BrokerProc:
    rest = topic.removeprefix("persistent://")
    status, body, _ = _http(f"{brokers[0].http_url}/lookup/v2/topic/persistent/{rest}")
    assert status == 200, body
    url = json.loads(body)["brokerUrl"]
    return next(b for b in brokers if url.endswith(f":{b.port}"))


def test_unloads_move_bundles_and_lose_nothing(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = brokers
    status, body, _ = _http(
        f"{a.http_url}/admin/v2/namespaces/{NS}", "PUT", b'{"bundles": {"numBundles": 4}}'
    )
    assert status == 204, body
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
    receipted: dict[str, set[int]] = {t: set() for t in TOPICS}
    received: dict[str, set[int]] = {t: set() for t in TOPICS}
    lock = threading.Lock()
    stop = threading.Event()
    drained = threading.Event()
    try:
        consumers = {t: client.subscribe(t, "s") for t in TOPICS}
        producers = {t: client.create_producer(t, batching_enabled=False) for t in TOPICS}

        def produce() -> None:
            i = 0
            while not stop.is_set():
                for t, p in producers.items():

                    def done(
                        res: pulsar.Result, _: pulsar.MessageId, t: str = t, i: int = i
                    ) -> None:
                        if res == pulsar.Result.Ok:
                            with lock:
                                receipted[t].add(i)

                    p.send_async(str(i).encode(), done)
                i += 1
                time.sleep(0.01)

        def consume(t: str) -> None:
            c = consumers[t]
            deadline = None
            while not (drained.is_set() and received[t] >= receipted[t]):
                if drained.is_set():
                    deadline = deadline or time.monotonic() + 60
                    if time.monotonic() > deadline:
                        return
                try:
                    msg = c.receive(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                received[t].add(int(msg.data()))
                c.acknowledge(msg)

        threads = [threading.Thread(target=produce)]
        threads += [threading.Thread(target=consume, args=(t,)) for t in TOPICS]
        for th in threads:
            th.start()
        wait_until(lambda: all(len(r) > 20 for r in receipted.values()), timeout=60, what="flow")

        # one bundle, asked of the broker that does not own it: 307 to the owner
        topic = TOPICS[0]
        owner = _owner(brokers, topic)
        other = b if owner is a else a
        rest = topic.removeprefix("persistent://")
        _, bundle, _ = _http(f"{a.http_url}/lookup/v2/topic/persistent/{rest}/bundle")
        path = f"/admin/v2/namespaces/{NS}/{bundle.decode()}/unload"
        status, body, location = _http(other.http_url + path, "PUT")
        assert status == 307, body
        assert location.startswith(owner.http_url), location
        status, body, _ = _http(owner.http_url + path, "PUT")
        assert status == 204, body
        assert f"bundle {NS}/{bundle.decode()} unloaded" in owner.log()
        before = {t: len(r) for t, r in receipted.items()}
        wait_until(
            lambda: all(len(receipted[t]) > before[t] + 20 for t in TOPICS),
            timeout=60,
            what="producers going on after the bundle unload",
        )

        # the whole namespace, through each broker in turn
        for via in (a, b):
            status, body, _ = _http(f"{via.http_url}/admin/v2/namespaces/{NS}/unload", "PUT")
            assert status == 204, body
            counts = {t: len(r) for t, r in receipted.items()}
            wait_until(
                lambda counts=counts: all(len(receipted[t]) > counts[t] + 20 for t in TOPICS),
                timeout=60,
                what="producers going on after the namespace unload",
            )
        assert sum(proc.log().count(f"bundle {NS}/") for proc in brokers) >= 3

        stop.set()
        threads[0].join(timeout=60)
        for p in producers.values():
            p.flush()
        drained.set()
        for th in threads[1:]:
            th.join(timeout=120)
        for t in TOPICS:
            assert receipted[t] <= received[t], f"{t}: receipted but not received"
    finally:
        stop.set()
        drained.set()
        client.close()


def test_unload_of_what_is_not_there(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    a, _ = brokers
    assert _http(f"{a.http_url}/admin/v2/namespaces/public/nope/unload", "PUT")[0] == 404
    status, _, _ = _http(f"{a.http_url}/admin/v2/namespaces/{NS}", "PUT", b"{}")
    assert status == 204
    path = f"/admin/v2/namespaces/{NS}/0x00000000_0x00000010/unload"
    status, body, _ = _http(a.http_url + path, "PUT")
    assert status == 412 and b"not a bundle" in body, body
    # a bundle nobody owns: nothing to do
    status, body, _ = _http(f"{a.http_url}/admin/v2/namespaces/{NS}/unload", "PUT")
    assert status == 204, body


def test_the_cli_verbs(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    """``magnetar admin namespaces bundles | unload [--bundle]`` and ``topics bundle-range``,
    as pulsar-admin names them."""
    a, b = brokers

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", b.http_url, *argv],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    assert cli("namespaces", "create", NS, "--bundles", "4").returncode == 0
    shown = cli("namespaces", "bundles", NS)
    assert shown.returncode == 0 and "0xc0000000" in shown.stdout, shown
    topic = f"persistent://{NS}/x"
    rng = cli("topics", "bundle-range", topic)
    rest = topic.removeprefix("persistent://")
    _, expected, _ = _http(f"{a.http_url}/lookup/v2/topic/persistent/{rest}/bundle")
    assert rng.returncode == 0 and rng.stdout.strip() == expected.decode(), rng
    assert cli("namespaces", "unload", NS).returncode == 0
    assert cli("namespaces", "unload", NS, "--bundle", expected.decode()).returncode == 0
    bad = cli("namespaces", "unload", NS, "--bundle", "0x1_0x2")
    assert bad.returncode == 2 and "invalid bundle" in bad.stderr, bad
