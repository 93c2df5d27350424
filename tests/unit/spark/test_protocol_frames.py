"""The protocol read loop's frame reader (``protocol_read._Link``, a blocking connection of
the client layer) on a socket pair: a
MESSAGE's stored message comes out as its own bytes with or without a checksum section and
after a broker entry metadata section, PINGs are answered, commands of unknown types are
skipped, and garbage or a cut frame loses the connection."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from magnetar.spark import protocol_read as pr
from magnetar.wire import commands, frames, pb, session, urls
from magnetar.wire.ids import MessageId

_C = pb.BaseCommand


@pytest.fixture
def pair() -> Iterator[tuple[pr._Link, socket.socket]]:
    ours, theirs = socket.socketpair()
    link = pr._Link.__new__(pr._Link)
    link.address, link.proxy_to, link.where = urls.Address("test", 0), None, "test"
    link.session = session.ClientSession(client_version="test")  # (PINGs answered)
    link.sock, link.stream, link.timed_out = ours, ours.makefile("rb"), False
    try:
        yield link, theirs
    finally:
        link.close()
        theirs.close()


def _stored(payload: bytes) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    return struct.pack(">I", meta.ByteSize()) + meta.SerializeToString() + payload


def _message(consumer_id: int = 1) -> pb.BaseCommand:
    return commands.message(consumer_id=consumer_id, message_id=MessageId(3, 4))


def _next(link: pr._Link) -> pr._Frame | None:
    return link.next_entry(time.monotonic() + 5)


def test_a_message_with_a_checksum(pair: tuple[pr._Link, socket.socket]) -> None:
    link, peer = pair
    stored = _stored(b"value" * 1000)
    peer.sendall(frames.encode_payload_command(_message(), frames.encode_headers_and_payload(
        pb.MessageMetadata.FromString(stored[4 : 4 + struct.unpack(">I", stored[:4])[0]]),
        b"value" * 1000,
    )))  # fmt: skip
    frame = _next(link)
    assert frame is not None and frame.type == _C.MESSAGE
    assert frame.stored == stored and type(frame.stored) is bytes
    assert frame.crc == frames.crc32c(stored)


def test_a_message_without_a_checksum_or_after_broker_entry_metadata(
    pair: tuple[pr._Link, socket.socket],
) -> None:
    link, peer = pair
    stored = _stored(b"abc")
    peer.sendall(frames.encode_payload_command(_message(), stored))
    frame = _next(link)
    assert frame is not None and frame.stored == stored and frame.crc is None

    with_crc = struct.pack(">HI", frames.MAGIC_CRC32C, frames.crc32c(stored)) + stored
    entry_metadata = pb.BrokerEntryMetadata(index=7, broker_timestamp=9)
    peer.sendall(
        frames.encode_payload_command(_message(), with_crc, broker_entry_metadata=entry_metadata)
    )
    frame = _next(link)
    assert frame is not None and frame.stored == stored and frame.crc == frames.crc32c(stored)


def test_pings_are_answered_and_unknown_commands_skipped(
    pair: tuple[pr._Link, socket.socket],
) -> None:
    link, peer = pair
    unknown = b"\x08\xe7\x07"  # BaseCommand.type = 999, a type this codec does not know
    peer.sendall(
        frames.encode_command(commands.ping())
        + struct.pack(">II", len(unknown) + 4, len(unknown))
        + unknown
        + frames.encode_command(commands.success(5))
    )
    frame = _next(link)
    assert frame is not None and frame.type == _C.SUCCESS and frame.command.success.request_id == 5
    peer.settimeout(5)
    pong = frames.FrameDecoder().feed(peer.recv(64))
    assert [f.type for f in pong] == [_C.PONG]


def test_garbage_a_cut_frame_and_a_timeout_lose_the_link(
    pair: tuple[pr._Link, socket.socket],
) -> None:
    link, peer = pair
    peer.sendall(struct.pack(">II", 1 << 30, 4))  # a size past the limit
    with pytest.raises(pr._Lost, match="undecodable"):
        _next(link)

    ours, theirs = socket.socketpair()
    link.sock, link.stream = ours, ours.makefile("rb")
    theirs.sendall(frames.encode_command(commands.success(5))[:-2])
    assert link.next_entry(time.monotonic() + 0.2) is None  # the frame never completes
    with pytest.raises(pr._Lost, match="timed out"):
        _next(link)  # its start was consumed: the link is not used again
    theirs.close()

    ours, theirs = socket.socketpair()
    link.sock, link.stream, link.timed_out = ours, ours.makefile("rb"), False
    theirs.sendall(frames.encode_command(commands.success(5))[:-2])
    theirs.close()
    with pytest.raises(pr._Lost, match="closed the connection"):
        _next(link)
