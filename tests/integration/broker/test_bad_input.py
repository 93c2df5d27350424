"""Bad input on raw sockets: each bad connection gets the right error or is closed, alone,
while a healthy official-client producer on another connection keeps publishing."""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.wire import commands, frames, pb
from tests.support.raw_client import RawClient
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until


class HealthyProducer:
    """An official-client producer publishing in a loop on its own connection."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=15)
        self.producer = self.client.create_producer(topic, send_timeout_millis=10_000)
        self.sent = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.send(b"healthy-%d" % self.sent)
                self.sent += 1
            except Exception as err:
                self.errors.append(err)
            time.sleep(0.005)  # paces the healthy producer

    def assert_progress(self) -> None:
        before = self.sent
        wait_until(lambda: self.sent >= before + 5, what="the healthy producer's progress")
        assert not self.errors, self.errors

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()


@pytest.fixture(scope="module")
def healthy(standalone: StandaloneProc) -> Iterator[HealthyProducer]:
    h = HealthyProducer(standalone.service_url, "healthy-neighbour")
    try:
        yield h
    finally:
        h.stop()
        assert not h.errors, h.errors


@pytest.fixture
def raw(standalone: StandaloneProc, healthy: HealthyProducer) -> Iterator[RawClient]:
    r = RawClient(standalone.port)
    try:
        yield r
    finally:
        r.close()
        healthy.assert_progress()


def _create_producer(raw: RawClient, topic: str, producer_id: int = 1) -> str:
    raw.command(commands.partitioned_metadata(topic=topic, request_id=1))
    assert raw.read().type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE
    raw.command(commands.lookup(topic=topic, request_id=2))
    assert raw.read().command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
    raw.command(commands.producer(topic=topic, producer_id=producer_id, request_id=3))
    frame = raw.read()
    assert frame.type == pb.BaseCommand.PRODUCER_SUCCESS, frame.command
    return str(frame.command.producer_success.producer_name)


def _send_frame(producer_id: int, sequence_id: int, name: str, payload: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    return frames.encode_message(
        commands.send(producer_id=producer_id, sequence_id=sequence_id), md, payload
    )


def test_handshake_announces_version_and_size(standalone: StandaloneProc, raw: RawClient) -> None:
    connected = raw.handshake()
    assert connected.server_version
    assert connected.protocol_version == commands.PROTOCOL_VERSION
    assert connected.max_message_size == 5 * 1024 * 1024
    raw.command(commands.ping())
    assert raw.read().type == pb.BaseCommand.PONG
    older = RawClient(standalone.port, protocol_version=20)
    try:
        assert older.handshake().protocol_version == 20  # min(client's 20, ours)
    finally:
        older.close()


def test_random_bytes_close_the_connection(raw: RawClient) -> None:
    # random, but not a frame size the broker accepts: one time in a thousand or so the
    # first four bytes of random data announce a frame of up to the limit, and the broker
    # rightly waits for the rest of it
    data = os.urandom(8192)
    while struct.unpack(">I", data[:4])[0] <= frames.DEFAULT_MAX_FRAME_SIZE:
        data = os.urandom(8192)
    raw.send(data)
    assert raw.closed_by_peer()


def test_random_bytes_after_handshake(raw: RawClient) -> None:
    raw.handshake()
    raw.send(b"\x00\x00\x00\x10" + os.urandom(16) + os.urandom(4096))
    assert raw.closed_by_peer()


def test_command_before_connect_closes(raw: RawClient) -> None:
    raw.command(commands.lookup(topic="t", request_id=1))
    assert raw.closed_by_peer()


def test_frame_over_the_size_limit(raw: RawClient) -> None:
    raw.handshake()
    raw.send(struct.pack(">II", 64 * 1024 * 1024, 10))
    assert raw.closed_by_peer()


def test_sizes_that_lie(raw: RawClient) -> None:
    raw.handshake()
    body = commands.ping().SerializeToString()
    raw.send(struct.pack(">II", 4 + len(body), 1000) + body)  # command size > frame
    assert raw.closed_by_peer()


def test_frame_too_small_to_hold_a_command(raw: RawClient) -> None:
    raw.handshake()
    raw.send(struct.pack(">I", 2) + b"\x00\x00")
    assert raw.closed_by_peer()


def test_unknown_command_type_gets_error_then_close(raw: RawClient) -> None:
    raw.handshake()
    body = b"\x08\xe7\x07"  # BaseCommand.type = 999
    raw.send(struct.pack(">II", 4 + len(body), len(body)) + body)
    frame = raw.read()
    assert frame.type == pb.BaseCommand.ERROR
    assert raw.closed_by_peer()


@pytest.mark.parametrize(
    "name",
    [
        "persistent://public/default/bad name",
        "persistent://public/default/a/b",
        "bogus://public/default/t",
        "public/default",
        "",
        "persistent://pub lic/default/t",
    ],
)
def test_invalid_topic_names(raw: RawClient, name: str) -> None:
    raw.handshake()
    raw.command(commands.lookup(topic=name, request_id=7))
    r = raw.read().command.lookupTopicResponse
    assert (r.response, r.error, r.request_id) == (
        pb.CommandLookupTopicResponse.Failed,
        pb.InvalidTopicName,
        7,
    )
    raw.command(commands.partitioned_metadata(topic=name, request_id=8))
    m = raw.read().command.partitionMetadataResponse
    assert (m.response, m.error) == (
        pb.CommandPartitionedTopicMetadataResponse.Failed,
        pb.InvalidTopicName,
    )
    raw.command(commands.producer(topic=name, producer_id=1, request_id=9))
    e = raw.read().command.error
    assert (e.error, e.request_id) == (pb.InvalidTopicName, 9)
    # the connection is still fine
    raw.command(commands.ping())
    assert raw.read().type == pb.BaseCommand.PONG


def test_send_on_unknown_producer_closes(raw: RawClient) -> None:
    raw.handshake()
    raw.send(_send_frame(42, 0, "nobody", b"payload"))
    assert raw.closed_by_peer()


def test_checksum_mismatch_is_a_send_error_for_that_message(raw: RawClient, topic: str) -> None:
    raw.handshake()
    name = _create_producer(raw, topic)
    bad = bytearray(_send_frame(1, 0, name, b"payload-0"))
    bad[-1] ^= 0xFF
    raw.send(bytes(bad))
    err = raw.read().command.send_error
    assert (err.sequence_id, err.error) == (0, pb.ChecksumError)
    raw.send(_send_frame(1, 1, name, b"payload-1"))
    receipt = raw.read().command.send_receipt
    assert receipt.sequence_id == 1 and receipt.message_id.entryId == 0


def test_raw_receipts_in_order(raw: RawClient, topic: str) -> None:
    raw.handshake()
    name = _create_producer(raw, topic)
    raw.send(b"".join(_send_frame(1, i, name, b"p%d" % i) for i in range(200)))
    receipts = [raw.read().command.send_receipt for _ in range(200)]
    assert [r.sequence_id for r in receipts] == list(range(200))
    assert [r.message_id.entryId for r in receipts] == list(range(200))


def test_a_truncated_frame_then_disconnect(raw: RawClient, topic: str) -> None:
    raw.handshake()
    name = _create_producer(raw, topic)
    frame = _send_frame(1, 0, name, b"x" * 1000)
    raw.send(frame[: len(frame) // 2])
    raw.close()
