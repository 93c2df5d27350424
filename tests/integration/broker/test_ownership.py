"""Ownership and lookup across brokers: two broker processes on etcd share
the bundles of ``public/default``; lookups Redirect to the least-loaded broker for unowned
bundles and Connect to the owner otherwise; when a broker dies its bundles move to the
survivor and producers carry on through lookup."""

from __future__ import annotations

import json
import threading

import pulsar
import pytest

from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd


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
        # an owner's URL is one of a broker's (a worker's own port, with workers)
        holders = {t: [p for p in (a, b) if p.serves(url)] for t, url in owners.items()}
        assert all(len(h) == 1 for h in holders.values()), holders
        on_b = [t for t in topics if holders[t] == [b]]
        assert 0 < len(on_b) < len(topics), "bundles are spread"

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
        try:
            wait_until(lambda: all(sent[t] > 1 for t in on_b), timeout=30, what="publishing")
            b.kill()
            wait_until(
                lambda: all(a.serves(_owner(a, t)) for t in on_b),
                timeout=30,
                what="the survivor owning the dead broker's bundles",
            )
            moved = dict(sent)
            wait_until(
                lambda: all(sent[t] > moved[t] for t in on_b),
                timeout=30,
                what="publishing resumed on every moved topic",
            )
        finally:
            stop.set()
            thread.join(timeout=30)
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
