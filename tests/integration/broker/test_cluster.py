"""Cluster form (issue 4, acceptance 3): etcd + 3 bookies (E=3/Wq=2/Aq=2) + 1 broker, each
its own process; a bookie is SIGKILLed while a producer publishes, and nothing that got a
send receipt is lost. Run against a broker of one process and one of two worker processes
(``--workers 2``, issue 24)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd


@pytest.fixture(params=[1, 2], ids=["workers-1", "workers-2"])
def cluster(
    own_etcd: EtcdServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[list[BookieProc], BrokerProc]]:
    bookies = [BookieProc(own_etcd.url, tmp_path) for _ in range(3)]
    broker: BrokerProc | None = None
    try:
        for b in bookies:
            b.start()
        broker = BrokerProc(
            own_etcd.url,
            tmp_path,
            ensemble=(3, 2, 2),
            extra_args=["--workers", str(request.param)],
        ).start()
        yield bookies, broker
    finally:
        if broker is not None:
            broker.stop()
        for b in bookies:
            b.stop()


def test_bookie_killed_while_producing_loses_nothing_receipted(
    cluster: tuple[list[BookieProc], BrokerProc],
) -> None:
    bookies, broker = cluster
    topic = "cluster-crash"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        # a durable subscription keeps the data (no retention: unsubscribed data is trimmed)
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            max_pending_messages=500,
            block_if_queue_full=True,
            send_timeout_millis=0,  # never give up: the client resends until receipted
        )
        receipts: dict[bytes, tuple[int, int]] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                payload = b"c-%06d" % i
                i += 1

                def done(res: pulsar.Result, mid: pulsar.MessageId, p: bytes = payload) -> None:
                    if res == pulsar.Result.Ok:
                        with lock:
                            receipts[p] = (mid.ledger_id(), mid.entry_id())

                producer.send_async(payload, done)
                if i % 200 == 0:
                    time.sleep(0.01)  # paces the producer (200 in flight at a time)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        wait_until(lambda: len(receipts) >= 200, timeout=30, what="receipts before the kill")
        before_kill = len(receipts)
        bookies[0].kill()
        time.sleep(3.0)  # the outage lasts 3 s: a chosen duration, not a wait for a state
        bookies[0].restart()  # E=3 needs three bookies for new ledgers
        wait_until(
            lambda: len(receipts) >= before_kill + 200,
            timeout=60,
            what="publishing resumed after the bookie died",
        )
        stop.set()
        thread.join(timeout=30)
        producer.flush()
        assert before_kill > 0
        assert len(receipts) > before_kill, "publishing resumed after the bookie died"

        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        stored: dict[bytes, tuple[int, int]] = {}
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=15_000)
            stored[msg.data()] = (msg.message_id().ledger_id(), msg.message_id().entry_id())
        missing = set(receipts) - set(stored)
        assert not missing, f"{len(missing)} receipted messages lost"
        for payload, position in receipts.items():
            assert stored[payload] == position
    finally:
        client.close()
