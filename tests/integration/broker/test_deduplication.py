"""Message deduplication with the official client against a real standalone: duplicates are
acknowledged and not stored, ``last_sequence_id`` survives a SIGKILL (snapshot + replay), the
policy switches it on and off, and a producer resending through broker crashes leaves every
sequence id exactly once in the topic."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client.admin import AdminError
from magnetar.wire import batch, commands, frames, pb
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.raw_client import RawClient
from tests.support.roundtrip import send_all
from tests.support.standalone import BrokerProc, StandaloneProc, admin_call
from tests.support.wait import wait_until

NS = "public/dedup"


def _dedup_namespace(http_url: str) -> None:
    admin_call(http_url, "PUT", f"/namespaces/{NS}", {})
    admin_call(http_url, "POST", f"/namespaces/{NS}/deduplication", True)
    # keep what nobody subscribed to: the tests read every stored message back
    infinite = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    admin_call(http_url, "POST", f"/namespaces/{NS}/retention", infinite)


@pytest.fixture
def dedup_standalone(tmp_path: Path) -> Iterator[StandaloneProc]:
    proc = StandaloneProc(tmp_path / "data").start()
    try:
        _dedup_namespace(proc.http_url)
        yield proc
    finally:
        proc.stop()


def _topic(name: str) -> str:
    return f"persistent://{NS}/{name}"


def _drain(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10_000).data())
    reader.close()
    return out


def test_duplicates_are_acknowledged_not_stored(dedup_standalone: StandaloneProc) -> None:
    proc = dedup_standalone
    topic = _topic("dups")
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, producer_name="app-1", batching_enabled=False)
        assert producer.last_sequence_id() == -1
        for i in range(10):
            producer.send(f"m{i}".encode(), sequence_id=i)
        producer.close()
        producer = client.create_producer(topic, producer_name="app-1", batching_enabled=False)
        assert producer.last_sequence_id() == 9
        duplicate = producer.send(b"m5 again", sequence_id=5)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
        stored = producer.send(b"m10", sequence_id=10)
        assert stored.ledger_id() >= 0
        assert _drain(client, topic) == [f"m{i}".encode() for i in range(11)]
        stats = admin_call(proc.http_url, "GET", f"/persistent/{NS}/dups/stats")
        assert isinstance(stats, dict)
        assert stats["deduplicationStatus"] == "Enabled"
        assert "pulsar.dedup" not in stats["subscriptions"]
        internal = admin_call(proc.http_url, "GET", f"/persistent/{NS}/dups/internalStats")
        assert isinstance(internal, dict)
        assert "pulsar.dedup" in internal["cursors"]
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "pulsar.dedup")
    finally:
        client.close()


def test_batches_use_the_highest_sequence_id(dedup_standalone: StandaloneProc) -> None:
    """A batch SEND carrying ``highest_sequence_id`` (the Java client sets it) is recorded
    up to that id; without it (the C++/Python client) up to its last message's own id --
    Pulsar records such a batch by its first id, so a producer reconnecting is told an id
    inside its last batch and an overlapping resend is stored twice."""
    proc = dedup_standalone
    raw = RawClient(proc.port)
    try:
        raw.handshake()
        topic = _topic("raw-batches")
        answer = raw.request(
            commands.producer(topic=topic, producer_id=1, request_id=1, producer_name="java")
        )
        assert answer.command.producer_success.last_sequence_id == -1
        metadata = pb.MessageMetadata(
            producer_name="java", sequence_id=0, publish_time=1, num_messages_in_batch=10
        )
        payload = batch.build_batch(
            (pb.SingleMessageMetadata(payload_size=2), f"{i:02d}".encode()) for i in range(10)
        )
        for first in (0, 10, 0):  # the third is a resend of the first batch
            metadata.sequence_id = first
            send = commands.send(
                producer_id=1, sequence_id=first, num_messages=10, highest_sequence_id=first + 9
            )
            raw.send(frames.encode_message(send, metadata, payload))
            receipt = raw.read().command.send_receipt
            assert (receipt.sequence_id, receipt.highest_sequence_id) == (first, first + 9)
        assert receipt.message_id.entryId == 2**64 - 1  # the resend: a duplicate
        again = raw.request(
            commands.producer(topic=topic, producer_id=2, request_id=2, producer_name="java")
        )
        assert again.type == pb.BaseCommand.ERROR  # still connected as producer 1
        close = pb.BaseCommand(type=pb.BaseCommand.CLOSE_PRODUCER)
        close.close_producer.producer_id, close.close_producer.request_id = 1, 3
        raw.request(close)
        again = raw.request(
            commands.producer(topic=topic, producer_id=3, request_id=4, producer_name="java")
        )
        assert again.command.producer_success.last_sequence_id == 19
    finally:
        raw.close()

    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        topic = _topic("batches")
        producer = client.create_producer(
            topic,
            producer_name="batcher",
            batching_enabled=True,
            batching_max_messages=50,
            batching_max_publish_delay_ms=1000,
        )
        for i in range(200):
            producer.send_async(f"b{i}".encode(), None)
        producer.flush()
        producer.close()
        producer = client.create_producer(topic, producer_name="batcher")
        assert producer.last_sequence_id() == 199
        assert len(_drain(client, topic)) == 200
    finally:
        client.close()


def test_last_sequence_id_survives_sigkill(dedup_standalone: StandaloneProc) -> None:
    """2,500 entries (past two snapshots at the default interval of 1,000) and a kill -9:
    the reloaded topic restores the snapshot, replays the rest, and still drops resends."""
    proc = dedup_standalone
    topic = _topic("crash")
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(
            topic, producer_name="crasher", batching_enabled=False, block_if_queue_full=True
        )
        send_all(producer, [f"c{i}".encode() for i in range(2500)])
    finally:
        client.close()
    proc.kill()
    proc.start()
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, producer_name="crasher", batching_enabled=False)
        assert producer.last_sequence_id() == 2499
        assert producer.send(b"again", sequence_id=2000).entry_id() == -1
        internal = admin_call(proc.http_url, "GET", f"/persistent/{NS}/crash/internalStats")
        assert isinstance(internal, dict)
        snapshot = internal["cursors"]["pulsar.dedup"]
        assert snapshot["properties"]["crasher"] >= 999
        assert len(_drain(client, topic)) == 2500
    finally:
        client.close()


def test_disabling_forgets_and_stores_everything(dedup_standalone: StandaloneProc) -> None:
    proc = dedup_standalone
    topic = _topic("toggle")
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, producer_name="t", batching_enabled=False)
        producer.send(b"one", sequence_id=1)
        producer.close()
        admin_call(proc.http_url, "POST", f"/namespaces/{NS}/deduplication", False)

        def disabled() -> bool:
            stats = admin_call(proc.http_url, "GET", f"/persistent/{NS}/toggle/stats")
            return isinstance(stats, dict) and stats["deduplicationStatus"] == "Disabled"

        wait_until(disabled, timeout=15, what="deduplication turned off on the loaded topic")
        internal = admin_call(proc.http_url, "GET", f"/persistent/{NS}/toggle/internalStats")
        assert isinstance(internal, dict)
        assert "pulsar.dedup" not in internal["cursors"]
        producer = client.create_producer(topic, producer_name="t", batching_enabled=False)
        assert producer.last_sequence_id() == -1
        producer.send(b"one again", sequence_id=1)
        assert _drain(client, topic) == [b"one", b"one again"]
    finally:
        client.close()


@pytest.mark.parametrize("batching", [False, True])
def test_resends_through_broker_crashes_store_each_message_once(
    dedup_standalone: StandaloneProc, batching: bool
) -> None:
    """A named producer publishes 100,000 numbered messages with the client's own resends
    while the broker is SIGKILLed and restarted three times: afterwards the topic holds
    each sequence id exactly once (checked by content)."""
    _publish_through_kills(dedup_standalone, _topic(f"chaos-{batching}"), 100_000, batching)


def test_replayable_source_publishes_each_record_once(
    dedup_standalone: StandaloneProc, tmp_path: Path
) -> None:
    """The effectively-once publisher: a file's lines, the byte offset as sequence id, the
    publisher SIGKILLed twice mid-file and restarted; it resumes after the broker's
    ``last_sequence_id`` and the topic ends with every line exactly once, in order."""
    proc = dedup_standalone
    topic = _topic("file-source")
    lines = [f"record-{i:06d}".encode() for i in range(20_000)]
    source = tmp_path / "records.txt"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    program = Path(__file__).with_name("file_publisher.py")
    argv = [sys.executable, str(program), proc.service_url, topic, str(source)]

    def stored() -> int:
        try:
            stats = admin_call(proc.http_url, "GET", f"/persistent/{NS}/file-source/stats")
        except (OSError, AdminError):  # not there yet
            return 0
        return int(stats["msgInCounter"]) if isinstance(stats, dict) else 0

    for kill_at in (4_000, 11_000):
        publisher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda n=kill_at: stored() >= n, timeout=60, what=f"{kill_at} stored")
        finally:
            publisher.kill()
            publisher.wait(10)
    finished = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr.decode(errors="replace")[-2000:]
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        assert _drain(client, topic) == lines
    finally:
        client.close()


@pytest.mark.etcd
def test_cluster_broker_killed_three_times_stores_each_message_once(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """The same with a broker of an etcd cluster (its own bookie): the broker is SIGKILLed
    and restarted on its address three times while a named producer resends; the new
    incarnation fences the old ledger, restores the snapshot and replays."""
    bookie = BookieProc(own_etcd.url, tmp_path).start()
    broker = BrokerProc(own_etcd.url, tmp_path, ensemble=(1, 1, 1), session_ttl=2.0)
    try:
        broker.start()
        _dedup_namespace(broker.http_url)
        _publish_through_kills(broker, _topic("cluster-chaos"), 20_000, False)
    finally:
        broker.stop()
        bookie.stop()


def _publish_through_kills(
    proc: StandaloneProc | BrokerProc, topic: str, total: int, batching: bool
) -> None:
    """Publish ``total`` numbered messages from a named producer that never gives up, while
    ``proc`` is SIGKILLed and restarted at 1/4, 1/2 and 3/4 of the receipts; then check
    the topic holds each sequence id exactly once, in order."""
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    errors: list[str] = []
    receipts = 0
    lock = threading.Lock()
    enough = threading.Event()

    def done(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        nonlocal receipts
        with lock:
            if res != pulsar.Result.Ok:
                errors.append(str(res))
            receipts += 1
            if receipts in (total // 4, total // 2, 3 * total // 4):
                enough.set()

    try:
        producer = client.create_producer(
            topic,
            producer_name="chaos",
            batching_enabled=batching,
            send_timeout_millis=0,  # never give up: the client resends after reconnecting
            max_pending_messages=2000,
            block_if_queue_full=True,
        )
        sender = threading.Thread(
            target=lambda: [
                producer.send_async(f"{i}".encode(), done, sequence_id=i) for i in range(total)
            ],
            daemon=True,
        )
        sender.start()
        for _ in range(3):
            assert enough.wait(120), f"{receipts} receipts, stuck"
            enough.clear()
            proc.kill()
            proc.start()
        sender.join(120)
        wait_until(lambda: receipts == total, timeout=120, what=f"{total} receipts")
        assert not errors, errors[:5]
    finally:
        client.close()
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        stored = [int(m) for m in _drain(client, topic)]
        assert len(stored) == len(set(stored)), "a sequence id is stored twice"
        assert sorted(stored) == list(range(total))
        assert stored == sorted(stored), "stored out of order"
        producer = client.create_producer(topic, producer_name="chaos")
        if batching:  # the C++ client sends no highest_sequence_id: a batch's first id counts
            assert total - 1000 < producer.last_sequence_id() < total
        else:
            assert producer.last_sequence_id() == total - 1
    finally:
        client.close()


def test_broker_default_turns_it_on_for_every_namespace(tmp_path: Path) -> None:
    """``--deduplication-enabled true`` (brokerDeduplicationEnabled): on where no namespace
    or topic policy says otherwise; a namespace policy still turns it off."""
    proc = StandaloneProc(tmp_path / "data", extra_args=["--deduplication-enabled", "true"])
    proc.start()
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer("default-on", producer_name="p", batching_enabled=False)
        producer.send(b"x", sequence_id=7)
        producer.close()
        producer = client.create_producer("default-on", producer_name="p")
        assert producer.last_sequence_id() == 7
        admin_call(proc.http_url, "PUT", "/namespaces/public/off", {"deduplicationEnabled": False})
        producer = client.create_producer("persistent://public/off/t", producer_name="p")
        producer.send(b"x", sequence_id=7)
        producer.close()
        producer = client.create_producer("persistent://public/off/t", producer_name="p")
        assert producer.last_sequence_id() == -1
    finally:
        client.close()
        proc.stop()


def test_a_batching_producer_resumes_after_a_crash_with_nothing_stored_twice(
    dedup_standalone: StandaloneProc,
) -> None:
    """Batches of 10 from the Python client (no ``highest_sequence_id`` on the wire), the
    last one short (1500..1504), then the broker SIGKILLed. A new producer of the same name
    is told the last id really stored, 1504 -- the last message of the last batch, found
    again by replaying the ledger (Pulsar answers 1500, the batch's first id, and the client
    then numbers its next messages from 1501: 1501..1504 would be stored twice). The
    application re-sends an overlapping range in the same batches, then goes on with the
    client's own numbering: every sequence id is stored exactly once."""
    proc = dedup_standalone
    topic = _topic("batch-crash")
    total, cut = 3000, 1505
    options = {
        "producer_name": "resumer",
        "batching_enabled": True,
        "batching_max_messages": 10,
        "batching_max_publish_delay_ms": 200,
        "block_if_queue_full": True,
    }
    receipted: set[int] = set()
    lock = threading.Lock()

    def receipt(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                with lock:
                    receipted.add(i)

        return done

    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, **options)
        for i in range(cut):
            producer.send_async(str(i).encode(), receipt(i), sequence_id=i)
        wait_until(lambda: len(receipted) == cut, timeout=60, what="every receipt")
        proc.kill()
    finally:
        client.close()
    proc.start()
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, **options)
        assert producer.last_sequence_id() == cut - 1
        for first in range(cut - 25, cut, 10):  # the last batches again, as they were sent
            for i in range(first, min(first + 10, cut)):
                producer.send_async(str(i).encode(), None, sequence_id=i)
            producer.flush()
        for i in range(cut, total):  # numbered by the client from last_sequence_id + 1
            producer.send_async(str(i).encode(), None)
        producer.flush()
        stored = [int(m) for m in _drain(client, topic)]
    finally:
        client.close()
    assert sorted(stored) == list(range(total)), "every sequence id exactly once"
