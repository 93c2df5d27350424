"""Namespace and bundle unload on a two-broker etcd cluster (issue 26), under producers and
consumers of the official client: a bundle unload sent to a broker that does not own the
bundle is redirected (307) to its owner, which closes the bundle's topics and gives up the
bundle; a namespace unload through either broker unloads every bundle on its owner. Clients
reconnect through lookup and nothing receipted is lost."""

from __future__ import annotations

import itertools
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


def _owner(brokers: tuple[BrokerProc, ...], topic: str) -> tuple[BrokerProc, str]:
    """The broker owning ``topic`` and the owner's own HTTP URL: with workers, one worker of
    that broker; its shared port could hand a call to the other, which redirects."""
    rest = topic.removeprefix("persistent://")
    status, body, _ = _http(f"{brokers[0].http_url}/lookup/v2/topic/persistent/{rest}")
    assert status == 200, body
    url = str(json.loads(body)["httpUrl"])
    return next(b for b in brokers if b.serves(url)), url


class Flow:
    """A producer and a consumer on each of ``TOPICS`` through one client, producing until
    stopped; ``check`` then drains and asserts every receipted message was received."""

    def __init__(self, service_url: str) -> None:
        self.client = pulsar.Client(service_url, operation_timeout_seconds=30)
        self.receipted: dict[str, set[int]] = {t: set() for t in TOPICS}
        self.received: dict[str, set[int]] = {t: set() for t in TOPICS}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.drained = threading.Event()
        self.consumers = {t: self.client.subscribe(t, "s") for t in TOPICS}
        self.producers = {t: self.client.create_producer(t, batching_enabled=False) for t in TOPICS}
        self.threads = [threading.Thread(target=self._produce)]
        self.threads += [threading.Thread(target=self._consume, args=(t,)) for t in TOPICS]
        for th in self.threads:
            th.start()

    def _produce(self) -> None:
        i = 0
        while not self.stop.is_set():
            for t, p in self.producers.items():

                def done(res: pulsar.Result, _: pulsar.MessageId, t: str = t, i: int = i) -> None:
                    if res == pulsar.Result.Ok:
                        with self.lock:
                            self.receipted[t].add(i)

                p.send_async(str(i).encode(), done)
            i += 1
            time.sleep(0.01)

    def _consume(self, t: str) -> None:
        c = self.consumers[t]
        deadline = None
        while not (self.drained.is_set() and self.received[t] >= self.receipted[t]):
            if self.drained.is_set():
                deadline = deadline or time.monotonic() + 60
                if time.monotonic() > deadline:
                    return
            try:
                msg = c.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            self.received[t].add(int(msg.data()))
            c.acknowledge(msg)

    def goes_on(self, what: str) -> None:
        """Every producer gets 20 more receipts."""
        counts = {t: len(r) for t, r in self.receipted.items()}
        wait_until(
            lambda: all(len(self.receipted[t]) > counts[t] + 20 for t in TOPICS),
            timeout=60,
            what=f"producers going on {what}",
        )

    def check(self) -> None:
        self.stop.set()
        self.threads[0].join(timeout=60)
        for p in self.producers.values():
            p.flush()
        self.drained.set()
        for th in self.threads[1:]:
            th.join(timeout=120)
        for t in TOPICS:
            assert self.receipted[t] <= self.received[t], f"{t}: receipted but not received"

    def close(self) -> None:
        self.stop.set()
        self.drained.set()
        self.client.close()


def _bundle_of(via: BrokerProc, topic: str) -> str:
    rest = topic.removeprefix("persistent://")
    status, body, _ = _http(f"{via.http_url}/lookup/v2/topic/persistent/{rest}/bundle")
    assert status == 200, body
    return body.decode()


def test_unloads_move_bundles_and_lose_nothing(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = brokers
    status, body, _ = _http(
        f"{a.http_url}/admin/v2/namespaces/{NS}", "PUT", b'{"bundles": {"numBundles": 4}}'
    )
    assert status == 204, body
    flow = Flow(a.service_url)
    try:
        flow.goes_on("at first")
        # one bundle, asked of the broker that does not own it: 307 to the owner
        topic = TOPICS[0]
        owner, owner_url = _owner(brokers, topic)
        other = b if owner is a else a
        bundle = _bundle_of(a, topic)
        path = f"/admin/v2/namespaces/{NS}/{bundle}/unload"
        status, body, location = _http(other.http_url + path, "PUT")
        assert status == 307, body
        assert location.startswith(owner_url), location
        status, body, _ = _http(owner_url + path, "PUT")
        assert status == 204, body
        assert f"bundle {NS}/{bundle} unloaded" in owner.log()
        flow.goes_on("after the bundle unload")
        # the whole namespace, through each broker in turn
        for via in (a, b):
            status, body, _ = _http(f"{via.http_url}/admin/v2/namespaces/{NS}/unload", "PUT")
            assert status == 204, body
            flow.goes_on("after the namespace unload")
        assert sum(proc.log().count(f"bundle {NS}/") for proc in brokers) >= 3
        flow.check()
    finally:
        flow.close()


def test_splits_under_load_lose_nothing(brokers: tuple[BrokerProc, BrokerProc]) -> None:
    """One bundle split in the middle through the broker that does not own it (307 to the
    owner, which keeps serving both halves: clients see nothing), then one half split
    between the middle two of its topics and unloaded; the layout is the namespace's new
    boundaries, each topic's bundle-range is one of them, and nothing receipted is lost."""
    a, b = brokers
    status, body, _ = _http(
        f"{a.http_url}/admin/v2/namespaces/{NS}", "PUT", b'{"bundles": {"numBundles": 1}}'
    )
    assert status == 204, body
    flow = Flow(a.service_url)
    try:
        flow.goes_on("at first")
        full = "0x00000000_0xffffffff"
        owner, owner_url = _owner(brokers, TOPICS[0])
        other = b if owner is a else a
        path = f"/admin/v2/namespaces/{NS}/{full}/split"
        status, body, location = _http(other.http_url + path, "PUT")
        assert status == 307 and location.startswith(owner_url), (status, body)
        status, body, _ = _http(owner_url + path, "PUT")
        assert status == 204, body
        flow.goes_on("after the split")
        status, body, _ = _http(f"{other.http_url}/admin/v2/namespaces/{NS}/bundles")
        assert json.loads(body)["boundaries"] == ["0x00000000", "0x7fffffff", "0xffffffff"]

        half = _bundle_of(a, TOPICS[0])
        assert half in ("0x00000000_0x7fffffff", "0x7fffffff_0xffffffff")
        query = "?splitAlgorithmName=topic_count_equally_divide&unload=true"
        status, body, _ = _http(
            f"{_owner(brokers, TOPICS[0])[1]}/admin/v2/namespaces/{NS}/{half}/split{query}",
            "PUT",
        )
        assert status == 204, body
        flow.goes_on("after the second split and its unload")
        status, body, _ = _http(f"{a.http_url}/admin/v2/namespaces/{NS}/bundles")
        boundaries = json.loads(body)["boundaries"]
        assert len(boundaries) == 4, boundaries
        ranges = {f"{lo}_{hi}" for lo, hi in itertools.pairwise(boundaries)}
        assert {_bundle_of(b, t) for t in TOPICS} <= ranges
        flow.check()
    finally:
        flow.close()

    bad = f"{a.http_url}/admin/v2/namespaces/{NS}/{full}/split"
    assert _http(bad, "PUT")[0] == 412  # not a bundle any more
    unknown = f"{a.http_url}/admin/v2/namespaces/{NS}/{boundaries[0]}_{boundaries[1]}/split"
    assert _http(unknown + "?splitAlgorithmName=nope", "PUT")[0] == 412


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
