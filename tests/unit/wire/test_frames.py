"""Framing: round trips, arbitrary chunking, checksums, limits and malformed input."""

from __future__ import annotations

import random
import struct

import pytest

from magnetar.wire import commands, frames, pb
from magnetar.wire.errors import (
    CorruptFrameError,
    CorruptMetadataError,
    FrameTooLargeError,
    UnknownCommandError,
    WireError,
)
from magnetar.wire.frames import Checksum, FrameDecoder
from magnetar.wire.ids import MessageId

from .helpers import command_of_type, metadata

SIMPLE_TYPES = sorted(set(pb.BaseCommand.Type.values()) - commands.PAYLOAD_TYPES)


def decode_all(data: bytes, **kw: int) -> list[frames.Frame]:
    return list(FrameDecoder(**kw).feed(data))  # type: ignore[arg-type]


def raw_frame(cmd_bytes: bytes, rest: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(cmd_bytes) + len(rest), len(cmd_bytes)) + cmd_bytes + rest


def send_frame(seq: int = 1, payload: bytes = b"hello", **kw: object) -> bytes:
    cmd = commands.send(producer_id=7, sequence_id=seq)
    return frames.encode_message(cmd, metadata(seq), payload, **kw)  # type: ignore[arg-type]


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("command_type", SIMPLE_TYPES, ids=commands.type_name)
def test_simple_command_round_trip(command_type: int) -> None:
    cmd = command_of_type(command_type)
    [frame] = decode_all(frames.encode_command(cmd))
    assert frame.type == command_type
    assert frame.command == cmd
    assert frame.body == commands.body(cmd)
    assert frame.payload is None and frame.headers_and_payload is None


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("with_bem", [True, False])
@pytest.mark.parametrize("command_type", sorted(commands.PAYLOAD_TYPES), ids=commands.type_name)
def test_payload_command_round_trip(command_type: int, checksum: bool, with_bem: bool) -> None:
    cmd = command_of_type(command_type)
    md = metadata(3, partition_key="k", num_messages_in_batch=1)
    payload = bytes(range(256)) * 4
    bem = pb.BrokerEntryMetadata(broker_timestamp=123, index=45) if with_bem else None
    hp = frames.encode_headers_and_payload(md, payload, checksum=checksum)
    data = frames.encode_payload_command(cmd, hp, broker_entry_metadata=bem)
    [frame] = decode_all(data)
    assert frame.command == cmd
    assert frame.checksum is (Checksum.VALID if checksum else Checksum.ABSENT)
    assert frame.message_metadata() == md
    assert frame.payload == payload
    assert frame.headers_and_payload == hp  # the stored form passes through unchanged
    assert frame.parsed_broker_entry_metadata() == bem
    assert frame.payload.readonly


def test_encode_parts_equals_joined_and_message_dispatch_is_zero_copy() -> None:
    hp = frames.encode_headers_and_payload(metadata(), b"x" * 100)
    cmd = commands.message(consumer_id=1, message_id=MessageId(3, 4))
    parts = frames.encode_payload_command_parts(cmd, hp)
    assert parts[-1] is hp
    assert b"".join(parts) == frames.encode_payload_command(cmd, hp)


def test_ping_pong_constants() -> None:
    assert decode_all(frames.PING_FRAME)[0].type == pb.BaseCommand.PING
    assert decode_all(frames.PONG_FRAME)[0].type == pb.BaseCommand.PONG
    # a PING without its (empty) body is tolerated
    [frame] = decode_all(raw_frame(pb.BaseCommand(type=pb.BaseCommand.PING).SerializeToString()))
    assert frame.type == pb.BaseCommand.PING


# -- chunking ---------------------------------------------------------------------------------


def stream() -> tuple[bytes, list[pb.BaseCommand]]:
    cmds: list[pb.BaseCommand] = []
    parts: list[bytes] = []
    for i, t in enumerate(SIMPLE_TYPES * 2):
        cmd = command_of_type(t, seed=i)
        cmds.append(cmd)
        parts.append(frames.encode_command(cmd))
        if i % 5 == 0:
            parts.append(send_frame(i, bytes([i % 256]) * (i * 37)))
            cmds.append(commands.send(producer_id=7, sequence_id=i))
    return b"".join(parts), cmds


def test_byte_by_byte() -> None:
    data, cmds = stream()
    decoder = FrameDecoder()
    out = [f.command for i in range(len(data)) for f in decoder.feed(data[i : i + 1])]
    assert out == cmds
    assert decoder.buffered == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_chunks(seed: int) -> None:
    rng = random.Random(seed)
    data, cmds = stream()
    decoder = FrameDecoder()
    out: list[frames.Frame] = []
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 2, 3, 5, 7, 64, 500, 4096, 100_000])
        chunk = data[pos : pos + n]
        if rng.random() < 0.3:
            chunk = memoryview(bytearray(chunk))  # type: ignore[assignment]
        out.extend(decoder.feed(chunk))
        pos += n
    assert [f.command for f in out] == cmds
    for f in out:
        if f.type == pb.BaseCommand.SEND:
            assert f.checksum is Checksum.VALID
            assert f.payload is not None
            assert len(f.payload) == f.command.send.sequence_id * 37


def test_whole_frames_in_a_bytes_chunk_are_views_of_it() -> None:
    data = send_frame(payload=b"p" * 1000) * 2
    [a, b] = decode_all(data)
    assert a.payload is not None and a.payload.obj is data and b.payload.obj is data  # type: ignore[union-attr]


def test_mutable_input_is_copied() -> None:
    buf = bytearray(send_frame(payload=b"abc"))
    [frame] = FrameDecoder().feed(buf)
    buf[:] = b"\0" * len(buf)
    assert frame.payload == b"abc"


def test_undrained_data_is_kept_for_the_next_feed() -> None:
    a, b = frames.encode_command(commands.pong()), frames.encode_command(commands.ping())
    decoder = FrameDecoder()
    decoder.feed(a + b[:3])  # iterator dropped without being consumed
    assert decoder.buffered == len(a) + 3
    out = list(decoder.feed(b[3:]))
    assert [f.type for f in out] == [pb.BaseCommand.PONG, pb.BaseCommand.PING]
    assert decoder.next_frame() is None


# -- checksums --------------------------------------------------------------------------------


def test_checksum_mismatch_is_reported_per_frame_and_the_stream_continues() -> None:
    bad = bytearray(send_frame(1, b"payload"))
    bad[-1] ^= 0xFF
    data = bytes(bad) + send_frame(2, b"payload")
    first, second = decode_all(data)
    assert first.checksum is Checksum.MISMATCH
    assert first.command.send.sequence_id == 1
    assert second.checksum is Checksum.VALID


def test_checksum_mismatch_with_broken_sizes_still_yields_the_command() -> None:
    good = send_frame(1, b"payload")
    cmd_size = struct.unpack_from(">I", good, 4)[0]
    meta_size_at = 8 + cmd_size + 6
    bad = bytearray(good)
    bad[meta_size_at : meta_size_at + 4] = b"\xff\xff\xff\xff"
    [frame] = decode_all(bytes(bad))
    assert frame.checksum is Checksum.MISMATCH
    assert frame.metadata is None and frame.payload is None
    with pytest.raises(CorruptMetadataError):
        frame.message_metadata()


def test_checksum_absent_and_unverified() -> None:
    [frame] = decode_all(send_frame(checksum=False))
    assert frame.checksum is Checksum.ABSENT
    bad = bytearray(send_frame())
    bad[-1] ^= 1
    [frame] = FrameDecoder(verify_checksum=False).feed(bytes(bad))
    assert frame.checksum is Checksum.UNVERIFIED


def test_checksum_is_crc32c_castagnoli() -> None:
    assert frames.crc32c(b"123456789") == 0xE3069283
    assert frames.crc32c(memoryview(b"x123456789")[1:]) == 0xE3069283


def test_split_headers_and_payload() -> None:
    md = metadata()
    hp = frames.encode_headers_and_payload(md, b"body")
    status, meta, payload = frames.split_headers_and_payload(hp)
    assert status is Checksum.VALID and payload == b"body"
    assert frames.parse_message_metadata(meta) == md
    assert frames.split_headers_and_payload(hp[6:])[0] is Checksum.ABSENT
    corrupted = bytearray(hp)
    corrupted[-1] ^= 1
    assert frames.split_headers_and_payload(bytes(corrupted))[0] is Checksum.MISMATCH
    with pytest.raises(CorruptMetadataError):
        frames.split_headers_and_payload(b"\x00\x00\x00\x09abc")


# -- limits and malformed input ---------------------------------------------------------------


def test_too_large_is_detected_from_the_size_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLargeError) as info:
        list(decoder.feed(struct.pack(">I", 1001)))
    assert info.value.size == 1001 and info.value.limit == 1000 and info.value.fatal
    with pytest.raises(FrameTooLargeError):  # sticky
        list(decoder.feed(b"more"))


def test_too_large_split_header() -> None:
    decoder = FrameDecoder()
    assert list(decoder.feed(b"\x7f\xff")) == []
    with pytest.raises(FrameTooLargeError):
        list(decoder.feed(b"\xff\xff"))


def test_default_limit_accepts_a_5_mib_message_with_headers() -> None:
    payload = b"x" * frames.DEFAULT_MAX_MESSAGE_SIZE
    [frame] = decode_all(send_frame(payload=payload))
    assert frame.payload is not None and len(frame.payload) == len(payload)
    assert frames.DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024 + 10 * 1024


PING = pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()).SerializeToString()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (struct.pack(">I", 0), CorruptFrameError),  # totalSize < 4
        (struct.pack(">I", 3) + b"abc", CorruptFrameError),
        (struct.pack(">II", 6, 50) + b"ab", CorruptFrameError),  # cmdSize > total
        (raw_frame(b"\xff\xff\xff\xff"), CorruptFrameError),  # garbage protobuf
        (raw_frame(b""), CorruptFrameError),  # no type
        (raw_frame(b"\x12\x00"), CorruptFrameError),  # connect body, no type
        (raw_frame(b"\x08\x06"), CorruptFrameError),  # SEND without its body
        (raw_frame(PING, b"extra"), CorruptFrameError),  # trailing bytes
        (raw_frame(pb.BaseCommand(type=6, send=pb.CommandSend()).SerializeToString()),
         CorruptFrameError),  # SEND without payload
        (raw_frame(pb.BaseCommand(type=6, send=pb.CommandSend()).SerializeToString(),
                   b"\x0e\x02\x00"), CorruptFrameError),  # truncated bem header
        (raw_frame(pb.BaseCommand(type=6, send=pb.CommandSend()).SerializeToString(),
                   b"\x0e\x02\x00\x00\x00\x09ab"), CorruptFrameError),  # bem too long
        (raw_frame(pb.BaseCommand(type=6, send=pb.CommandSend()).SerializeToString(),
                   b"\x0e\x01\x00"), CorruptFrameError),  # truncated checksum header
        (raw_frame(pb.BaseCommand(type=6, send=pb.CommandSend()).SerializeToString(),
                   b"\x00\x00\x00\x09ab"), CorruptFrameError),  # metadata size too long
        (raw_frame(b"\x08\x63"), UnknownCommandError),
        (raw_frame(b"\x08\xe8\x07\x12\x00"), UnknownCommandError),  # type 1000
    ],
)  # fmt: skip
def test_malformed_frames(data: bytes, error: type[WireError]) -> None:
    with pytest.raises(error):
        decode_all(data)


def test_unknown_command_is_not_fatal() -> None:
    data = raw_frame(b"\x08\x63") + frames.PONG_FRAME
    decoder = FrameDecoder()
    with pytest.raises(UnknownCommandError) as info:
        list(decoder.feed(data))
    assert info.value.command_type == 99 and not info.value.fatal
    assert [f.type for f in decoder.frames()] == [pb.BaseCommand.PONG]


def test_frames_before_an_error_are_yielded_first() -> None:
    data = frames.PING_FRAME + frames.PONG_FRAME + raw_frame(b"\xff\xff")
    seen: list[int] = []
    decoder = FrameDecoder()
    with pytest.raises(CorruptFrameError):
        for frame in decoder.feed(data):
            seen.append(frame.type)  # noqa: PERF401  # a loop: the point is stream order
    assert seen == [pb.BaseCommand.PING, pb.BaseCommand.PONG]
    with pytest.raises(CorruptFrameError):
        decoder.next_frame()
    with pytest.raises(CorruptFrameError):
        decoder.push(b"x")


def _check_only_wire_errors(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_size=64 * 1024)
    try:
        for i in range(0, len(data), chunk):
            for frame in decoder.feed(data[i : i + chunk]):
                if frame.metadata is not None:
                    try:
                        frame.message_metadata()
                    except CorruptMetadataError:
                        pass
                frame.parsed_broker_entry_metadata()
    except UnknownCommandError:
        pass
    except WireError:
        pass


def test_fuzz_random_bytes_raise_only_codec_errors() -> None:
    rng = random.Random(0xC0DEC)
    for _ in range(3000):
        n = rng.choice([1, 4, 8, 12, 30, 200])
        data = rng.randbytes(n)
        if rng.random() < 0.7:  # plausible sizes so the parser gets past the header
            body = rng.randbytes(rng.randint(0, 60))
            cut = rng.randint(0, len(body))
            data = struct.pack(">II", len(body) + 4, cut) + body
        try:
            _check_only_wire_errors(data, rng.choice([1, 3, len(data) or 1]))
        except CorruptMetadataError:
            pass


def test_fuzz_mutated_valid_frames_raise_only_codec_errors() -> None:
    rng = random.Random(42)
    data, _ = stream()
    base = data[:4000]
    for _ in range(1500):
        mutated = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        if rng.random() < 0.2:
            del mutated[rng.randrange(len(mutated)) :]
        try:
            _check_only_wire_errors(bytes(mutated), rng.choice([1, 7, 512, len(mutated) or 1]))
        except CorruptMetadataError:
            pass


_EDGES = [0, 1, 127, 128, 255, 16_383, 16_384, 2**21, 2**35 + 7, 2**63 - 1]


@pytest.mark.parametrize("seed", range(4))
def test_send_receipt_encoded_directly_is_the_protobuf_encoding(seed: int) -> None:
    """``encode_send_receipt`` writes the bytes ``commands.send_receipt`` would serialize to,
    for every field's varint length, the duplicate id (-1:-1) and a highest sequence id of
    its own; the decoder reads it back as that command."""
    rng = random.Random(seed)
    cases = [(v, v, v, v, v) for v in _EDGES] + [(3, 9, -1, -1, 9), (0, 5, 7, 8, 12)]
    cases += [tuple(rng.choice(_EDGES) for _ in range(5)) for _ in range(200)]
    for pid, seq, lid, eid, highest in cases:
        want = frames.encode_command(
            commands.send_receipt(
                producer_id=pid,
                sequence_id=seq,
                message_id=MessageId(lid, eid),
                highest_sequence_id=highest,
            )
        )
        got = frames.encode_send_receipt(pid, seq, lid, eid, highest)
        assert got == want, (pid, seq, lid, eid, highest)
        (frame,) = list(FrameDecoder().feed(got))
        r = frame.command.send_receipt
        assert (r.producer_id, r.sequence_id, r.highest_sequence_id) == (pid, seq, highest)
        assert MessageId.from_proto(r.message_id)[:2] == (lid, eid)
