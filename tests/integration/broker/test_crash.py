"""Crash safety of standalone: SIGKILL after producing and acknowledging, restart on the same
data directory, and check what survived (issue 4, acceptance 2).

* every message that got a send receipt is still stored (a reader from earliest sees all);
* no unacknowledged message is lost for the durable subscription;
* what comes back beyond the unacknowledged half was acknowledged within the cursor-persist
  window before the kill (``ManagedLedgerConfig.cursor_persist_interval_s``, plus the
  client's 100 ms ack grouping and scheduling slack).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pulsar

from magnetar.managed_ledger.api import ManagedLedgerConfig
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

N = 10_000
PERSIST_WINDOW_S = ManagedLedgerConfig().cursor_persist_interval_s
ACK_GROUPING_S = 0.1
SLACK_S = 0.5


def _produce(client: pulsar.Client, topic: str, n: int) -> dict[bytes, tuple[int, int]]:
    """Send n messages, return payload -> (ledger, entry) of every receipted one."""
    producer = client.create_producer(
        topic, max_pending_messages=2000, block_if_queue_full=True, batching_enabled=False
    )
    receipts: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()

    def callback(payload: bytes) -> object:
        def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            if res == pulsar.Result.Ok:
                with lock:
                    receipts[payload] = (mid.ledger_id(), mid.entry_id())

        return done

    for i in range(n):
        payload = b"crash-%05d" % i
        producer.send_async(payload, callback(payload))
    producer.flush()
    wait_until(lambda: len(receipts) >= n, timeout=60, what=f"{n} receipts")
    return receipts


def test_sigkill_standalone_keeps_receipted_and_unacked(tmp_path: Path) -> None:
    proc = StandaloneProc(tmp_path / "data").start()
    topic = "crash-topic"
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(
            topic,
            "durable",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )
        receipts = _produce(client, topic, N)
        assert len(receipts) == N

        received: list[pulsar.Message] = []
        while len(received) < N:
            received.append(consumer.receive(timeout_millis=20_000))
        rng = random.Random(4)
        to_ack = rng.sample(received, N // 2)
        acked_at: dict[bytes, float] = {}
        early, late_acks = to_ack[: N * 2 // 5], to_ack[N * 2 // 5 :]
        for msg in early:  # acknowledged well before the kill: must never come back
            consumer.acknowledge(msg)
            acked_at[msg.data()] = time.monotonic()
        # the early acks become older than the persist window before the late ones: the
        # window is the promise under test (at most its last second of acks lost), so the
        # elapsed time is the input here, not a wait for a state
        time.sleep(PERSIST_WINDOW_S * 2 + ACK_GROUPING_S + SLACK_S)
        for i, msg in enumerate(late_acks):  # inside the window: may come back
            consumer.acknowledge(msg)
            acked_at[msg.data()] = time.monotonic()
            if i % 100 == 0:
                time.sleep(0.01)  # spreads the late acks over the window
        killed_at = time.monotonic()
        proc.kill()
        client.close()
        unacked = set(receipts) - set(acked_at)

        proc.restart()
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored: dict[bytes, tuple[int, int]] = {}
            while reader.has_message_available():
                msg = reader.read_next(timeout_millis=10_000)
                stored[msg.data()] = (msg.message_id().ledger_id(), msg.message_id().entry_id())
            assert stored == receipts, "every receipted message, at its receipted position"

            consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
            redelivered: set[bytes] = set()
            while True:
                try:
                    msg = consumer.receive(timeout_millis=3_000)
                except pulsar.Timeout:
                    break
                redelivered.add(msg.data())
                consumer.acknowledge(msg)
        finally:
            client.close()
        assert unacked <= redelivered, f"{len(unacked - redelivered)} unacked messages lost"
        extra = redelivered - unacked
        window = PERSIST_WINDOW_S + ACK_GROUPING_S + SLACK_S
        late = {p for p in extra if killed_at - acked_at[p] > window}
        assert not {m.data() for m in early} & redelivered
        assert not late, (
            f"{len(late)} messages acknowledged more than {window:.1f}s before the kill "
            f"came back (of {len(extra)} redelivered beyond the unacked half)"
        )
    finally:
        proc.stop()
