"""Ownership and lookup across brokers (DESIGN.md §6): two broker processes on etcd share
the bundles of ``public/default``; lookups Redirect to the least-loaded broker for unowned
bundles and Connect to the owner otherwise; when a broker dies its bundles move to the
survivor and producers carry on through lookup."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.standalone import BrokerProc

pytestmark = pytest.mark.etcd


@pytest.fixture
def two_brokers(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    a = b = None
    try:
        a = BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0).start()
        b = BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0).start()
        time.sleep(1.0)  # both load reports are in
        yield a, b
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.stop()
        bookie.stop()


def _owner(proc: BrokerProc, topic: str) -> str:
    return str(
        json.loads(proc.get(f"/lookup/v2/topic/persistent/public/default/{topic}"))["brokerUrl"]
    )


def test_bundles_spread_and_move_when_a_broker_dies(
    two_brokers: tuple[BrokerProc, BrokerProc],
) -> None:
    a, b = two_brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
    try:
        topics = [f"own-{i}" for i in range(24)]
        for t in topics:  # durable subscriptions keep the data for the final check
            client.subscribe(t, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producers = {
            t: client.create_producer(t, send_timeout_millis=0, batching_enabled=False)
            for t in topics
        }
        for t, p in producers.items():
            p.send(t.encode())
        owners = {t: _owner(a, t) for t in topics}
        assert {t: _owner(b, t) for t in topics} == owners, "both brokers agree on owners"
        assert set(owners.values()) == {a.service_url, b.service_url}, "bundles are spread"

        on_b = [t for t in topics if owners[t] == b.service_url]
        sent: dict[str, int] = {t: 1 for t in topics}
        errors: list[BaseException] = []
        stop = threading.Event()

        def publish() -> None:
            while not stop.is_set():
                for t in on_b:
                    try:
                        producers[t].send(t.encode())
                        sent[t] += 1
                    except Exception as err:
                        errors.append(err)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        time.sleep(0.5)
        b.kill()
        deadline = time.monotonic() + 30
        moved = False
        while time.monotonic() < deadline:
            before = dict(sent)
            time.sleep(1.0)
            if all(_owner(a, t) == a.service_url for t in on_b) and all(
                sent[t] > before[t] for t in on_b
            ):
                moved = True
                break
        stop.set()
        thread.join(timeout=30)
        assert moved, "the survivor took the dead broker's bundles and publishing resumed"
        assert not errors, errors[:3]

        for t in on_b:  # nothing receipted is lost across the move
            reader = client.create_reader(t, pulsar.MessageId.earliest)
            count = 0
            while reader.has_message_available():
                reader.read_next(timeout_millis=10_000)
                count += 1
            reader.close()
            assert count >= sent[t], (t, count, sent[t])
    finally:
        client.close()
