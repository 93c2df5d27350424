"""Autorecovery and decommission under a broker and the official client (issue 22,
acceptance 1 and 2): etcd, five bookies, a broker writing E3/Wq2/Aq2, and a
``magnetar autorecovery`` process.

* a bookie SIGKILLed and never restarted: its ledgers are re-replicated within a bounded
  wait (no ledger names it, no mark left), then a second bookie is killed and every receipted
  message still reads back, compared by content;
* ``magnetar admin bookies decommission`` of a live bookie while a producer runs: nothing
  receipted is lost, no ledger references it at the end, and the bookie restarted at the same
  address with an empty disk gets a new identity and serves.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import keys, open_store
from tests.conftest import etcd_url
from tests.support.autorecovery import AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd


@dataclass
class Cluster:
    url: str
    bookies: dict[str, BookieProc]
    broker: BrokerProc
    recovery: AutorecoveryProc
    base: Path


@pytest.fixture
def cluster(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[Cluster]:
    url = etcd_url(own_etcd, timeout=5.0)
    procs: list[Any] = []
    try:
        bookies = {}
        for _ in range(5):
            b = BookieProc(url, tmp_path).start()
            procs.append(b)
            bookies[b.bookie_id] = b
        broker = BrokerProc(url, tmp_path, ensemble=(3, 2, 2), session_ttl=5.0).start()
        procs.append(broker)
        recovery = AutorecoveryProc(url, tmp_path).start()
        procs.append(recovery)
        yield Cluster(url, bookies, broker, recovery, tmp_path)
    finally:
        for p in reversed(procs):
            p.stop()


def on_store(url: str, fn: Any) -> Any:
    async def go() -> Any:
        store = await open_store(url)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def ledgers_on(url: str, bookie_id: str) -> list[int]:
    async def scan(store: Any) -> list[int]:
        out = []
        async for r in store.scan_all(keys.LEDGERS):
            meta = LedgerMetadata.from_json(r.value)
            if any(bookie_id in f.ensemble for f in meta.fragments):
                out.append(meta.ledger_id)
        return out

    found: list[int] = on_store(url, scan)
    return found


def marked(url: str) -> list[int]:
    async def scan(store: Any) -> list[int]:
        return [m.ledger_id for m in await ur.marks(store)]

    found: list[int] = on_store(url, scan)
    return found


def admin(cluster: Cluster, *args: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", cluster.broker.http_url,
         "--output", "json", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


def internal_stats(cluster: Cluster, topic: str) -> Any:
    return admin(cluster, "topics", "stats-internal", topic)


def produce(client: pulsar.Client, topic: str, first: int, count: int) -> list[bytes]:
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
    sent = []
    for i in range(first, first + count):
        data = f"message-{i:05d}-".encode() * 8
        producer.send(data)  # returns once receipted
        sent.append(data)
    producer.close()
    return sent


def consume_all(client: pulsar.Client, topic: str, expected: int) -> list[bytes]:
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    try:
        while len(got) < expected:
            msg = consumer.receive(timeout_millis=30_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
    finally:
        consumer.close()
    return got


def current_ensemble(cluster: Cluster, topic: str) -> tuple[str, ...]:
    ledger_id = internal_stats(cluster, topic)["ledgers"][-1]["ledgerId"]

    async def read(store: Any) -> tuple[str, ...]:
        record = await store.get(keys.ledger(ledger_id))
        ensemble: tuple[str, ...] = LedgerMetadata.from_json(record.value).last_fragment.ensemble
        return ensemble

    found: tuple[str, ...] = on_store(cluster.url, read)
    return found


def test_killed_bookie_is_rereplicated_then_a_second_loss_loses_nothing(cluster: Cluster) -> None:
    topic = "persistent://public/default/autorecovery-kill"
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=60)
    try:
        sent = produce(client, topic, 0, 300)
        victim = current_ensemble(cluster, topic)[0]
        cluster.bookies[victim].kill()
        sent += produce(client, topic, 300, 300)  # the broker's writer changes its ensemble
        assert ledgers_on(cluster.url, victim), "the victim held ledgers before the repair"
        wait_until(
            lambda: not ledgers_on(cluster.url, victim) and not marked(cluster.url),
            timeout=120,
            interval=1.0,
            what=f"every ledger moved off the killed bookie {victim}",
        )
        stats = internal_stats(cluster, topic)
        assert all(not ledger["underReplicated"] for ledger in stats["ledgers"])
        assert admin(cluster, "bookies", "list-underreplicated") == []
        unknown = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url",
             cluster.broker.http_url, "bookies", "decommission", "10.9.9.9:3181"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert unknown.returncode == 1
        assert "404" in unknown.stderr and "bookie 10.9.9.9:3181" in unknown.stderr
        listed = {b["bookieId"]: b for b in admin(cluster, "bookies", "list")["bookies"]}
        assert listed[victim]["state"] == "gone"

        load = {b: len(ledgers_on(cluster.url, b)) for b in cluster.bookies if b != victim}
        second = max(load, key=lambda b: load[b])
        cluster.bookies[second].kill()
        got = consume_all(client, topic, len(sent))
        assert got == sent

        # internalStats reads the marks: with the workers stopped, a marked ledger shows it.
        cluster.recovery.stop()
        ledger_id = internal_stats(cluster, topic)["ledgers"][0]["ledgerId"]

        async def mark(store: Any) -> None:
            await ur.mark(store, ledger_id, [second])

        on_store(cluster.url, mark)
        flags = {
            ledger["ledgerId"]: ledger["underReplicated"]
            for ledger in internal_stats(cluster, topic)["ledgers"]
        }
        assert flags[ledger_id] is True
        assert not any(v for k, v in flags.items() if k != ledger_id)
        assert admin(cluster, "bookies", "list-underreplicated")[0]["ledgerId"] == ledger_id
    finally:
        client.close()


class _Including:
    """Placement that puts ``bookie`` first in every ensemble (to prove it serves)."""

    def __init__(self, bookie: str) -> None:
        self.bookie = bookie

    def new_ensemble(self, bookies: Any, size: int, *, exclude: Any = ()) -> tuple[str, ...]:
        others = [b.bookie_id for b in bookies if b.bookie_id != self.bookie]
        return (self.bookie, *others[: size - 1])

    def replace(self, bookies: Any, ensemble: Any, index: int, *, exclude: Any = ()) -> str:
        raise AssertionError("no replacement expected")


def test_decommission_under_a_producer(cluster: Cluster) -> None:
    topic = "persistent://public/default/autorecovery-decommission"
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=60)
    sent: list[bytes] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer_loop() -> None:
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, send_timeout_millis=60_000
            )
            i = 0
            while not stop.is_set():
                data = f"decommission-{i:05d}-".encode() * 8
                producer.send(data)
                sent.append(data)
                i += 1
            producer.close()
        except BaseException as err:  # reported by the test thread
            errors.append(err)

    try:
        sent += produce(client, topic, 0, 200)
        leaving = current_ensemble(cluster, topic)[1]
        old_cookie = on_store(cluster.url, lambda s: s.get(keys.bookie_cookie(leaving)))
        thread = threading.Thread(target=producer_loop)
        thread.start()
        gauge = f'autorecovery_decommission_ledgers_remaining{{bookie="{leaving}"}}'
        remaining: list[float] = []

        def watch_progress() -> None:  # the auditor's gauge, while it exists
            while not stop.is_set():
                text = cluster.recovery.metrics()
                remaining.extend(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith(gauge)
                )
                stop.wait(0.1)

        watcher = threading.Thread(target=watch_progress)
        watcher.start()
        try:
            started = admin(cluster, "bookies", "decommission", leaving)
            assert started["state"] == "decommissioning"
            listed = {b["bookieId"]: b for b in admin(cluster, "bookies", "list")["bookies"]}
            assert listed[leaving]["state"] == "decommissioning"
            wait_until(
                lambda: (
                    admin(cluster, "bookies", "decommission-status", leaving)["state"]
                    == "decommissioned"
                ),
                timeout=120,
                interval=1.0,
                what=f"{leaving} decommissioned",
            )
        finally:
            stop.set()
            thread.join(timeout=120)
            watcher.join(timeout=30)
        assert not errors, errors
        assert remaining and remaining[-1] == 0, remaining  # progress, down to none left
        assert gauge not in cluster.recovery.metrics()  # gone once decommissioned
        status = admin(cluster, "bookies", "decommission-status", leaving)
        assert status["ledgersReferencing"] == 0
        assert not ledgers_on(cluster.url, leaving)
        assert on_store(cluster.url, lambda s: s.get(keys.bookie_cookie(leaving))) is None
        assert consume_all(client, topic, len(sent)) == sent
    finally:
        client.close()

    again = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", cluster.broker.http_url,
         "bookies", "decommission", leaving],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 1 and "409" in again.stderr, again.stderr
    assert "already decommissioned" in again.stderr

    # The node comes back with an empty disk at the same address: a new identity, serving.
    proc = cluster.bookies[leaving]
    proc.stop()
    shutil.rmtree(proc.data_dir)
    proc.start()
    wait_until(
        lambda: (
            {b["bookieId"]: b for b in admin(cluster, "bookies", "list")["bookies"]}[leaving][
                "state"
            ]
            == "rw"
        ),
        timeout=30,
        what=f"{leaving} back read-write",
    )
    new_cookie = on_store(cluster.url, lambda s: s.get(keys.bookie_cookie(leaving)))
    assert (
        json.loads(new_cookie.value)["instance_id"] != json.loads(old_cookie.value)["instance_id"]
    )

    async def serve(store: Any) -> list[tuple[int, bytes]]:
        client = LedgerClient(store, placement=_Including(leaving))
        try:
            handle = await client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
            for i in range(10):
                await handle.add_entry(b"fresh-%d" % i)
            await handle.close()
            reread = await client.open(handle.ledger_id)
            assert reread.metadata.last_fragment.ensemble == (leaving,)
            return await reread.read(0, 9)
        finally:
            await client.close()

    assert [d for _, d in on_store(cluster.url, serve)] == [b"fresh-%d" % i for i in range(10)]
