"""Batched payloads, quick metadata reads, routing keys and batch-index ack sets."""

from __future__ import annotations

import base64
import random
import struct
import zlib

import pytest

from magnetar.wire import batch, compression, pb
from magnetar.wire.errors import (
    CompressedPayloadError,
    CorruptBatchError,
    CorruptMetadataError,
    UnsupportedCompressionError,
)

from .helpers import metadata


def sample(n: int = 3) -> tuple[bytes, list[tuple[pb.SingleMessageMetadata, bytes]]]:
    msgs = [
        (pb.SingleMessageMetadata(partition_key=f"k{i}", sequence_id=i, event_time=i), b"m" * i)
        for i in range(n)
    ]
    return batch.build_batch(msgs), msgs


def test_build_and_parse_round_trip() -> None:
    data, msgs = sample(5)
    parsed = batch.parse_batch(data, count=5)
    assert [(m.metadata, bytes(m.payload)) for m in parsed] == msgs
    assert all(m.metadata.payload_size == len(m.payload) for m in parsed)
    assert parsed[3].payload.obj is data or parsed[3].payload.readonly  # a view, not a copy


def test_count_mismatch_and_truncation() -> None:
    data, _ = sample(3)
    with pytest.raises(CorruptBatchError):
        batch.parse_batch(data, count=4)
    for cut in range(1, len(data)):
        with pytest.raises(CorruptBatchError):
            batch.parse_batch(data[:cut], count=3)


def test_garbage_raises_only_batch_errors() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        blob = rng.randbytes(rng.randint(0, 40))
        if rng.random() < 0.5:
            blob = struct.pack(">I", rng.randint(0, 20)) + blob
        try:
            batch.parse_batch(blob)
        except CorruptBatchError:
            pass
    with pytest.raises(CorruptBatchError):
        batch.parse_batch(struct.pack(">I", 2) + b"\xff\xff")


def test_entry_info() -> None:
    md = metadata(10, num_messages_in_batch=4, highest_sequence_id=13, deliver_at_time=99)
    info = batch.entry_info(md.SerializeToString())
    assert info.sequence_id == 10 and info.highest_sequence_id == 13
    assert info.num_messages == 4 and info.is_batch and info.deliver_at_time == 99
    assert info.publish_time == md.publish_time and info.producer_name == "producer-1"
    single = batch.entry_info(metadata(2))
    assert single.num_messages == 1 and not single.is_batch and single.deliver_at_time is None
    assert single.highest_sequence_id == 2 and not single.is_chunk
    chunk = batch.entry_info(metadata(2, uuid="u", num_chunks_from_msg=3, chunk_id=0))
    assert chunk.is_chunk
    with pytest.raises(CorruptMetadataError):
        batch.entry_info(b"\xff\xff\xff")


def test_split_entry_batched_plain_and_compressed() -> None:
    data, msgs = sample(3)
    md = metadata(1, num_messages_in_batch=3)
    assert len(batch.split_entry(md, data)) == 3
    plain = metadata(1, partition_key="pk", ordering_key=b"ok")
    plain.properties.add(key="a", value="b")
    [one] = batch.split_entry(plain, b"body")
    assert one.payload == b"body" and one.metadata.partition_key == "pk"
    assert one.metadata.ordering_key == b"ok" and one.metadata.properties[0].key == "a"
    zmd = metadata(1, num_messages_in_batch=3, compression=pb.ZLIB, uncompressed_size=len(data))
    packed = zlib.compress(data)
    with pytest.raises(CompressedPayloadError):
        batch.split_entry(zmd, packed)
    assert [bytes(m.payload) for m in batch.split_entry(zmd, packed, decompress_payload=True)] == [
        p for _, p in msgs
    ]
    for codec in (pb.LZ4, pb.ZSTD, pb.SNAPPY):
        cmd = metadata(1, num_messages_in_batch=3, compression=codec, uncompressed_size=len(data))
        packed = compression.compress(codec, data)
        assert packed != data
        got = batch.split_entry(cmd, packed, decompress_payload=True)
        assert [bytes(m.payload) for m in got] == [p for _, p in msgs]
        with pytest.raises(CorruptBatchError):
            batch.decompress(packed[: len(packed) // 2], codec, len(data))
    with pytest.raises(CorruptBatchError):
        batch.decompress(b"not zlib", pb.ZLIB, 10)
    with pytest.raises(CorruptBatchError):
        batch.decompress(zlib.compress(b"abc"), pb.ZLIB, 10)


def test_decompress_with_a_codec_given_by_the_caller() -> None:
    def reverse(payload: object, size: int) -> bytes:  # (a codec only this test knows)
        data = bytes(payload)  # type: ignore[call-overload]
        if not data.startswith(b"!"):
            raise ValueError("not reversed")
        return data[:0:-1]

    codecs = {pb.LZ4: reverse}
    assert batch.decompress(b"!cba", pb.LZ4, 3, codecs=codecs) == b"abc"
    with pytest.raises(CorruptBatchError, match="LZ4 payload does not decompress: not reversed"):
        batch.decompress(b"abc", pb.LZ4, 3, codecs=codecs)
    with pytest.raises(CorruptBatchError, match="decompressed 2 bytes, metadata says 3"):
        batch.decompress(b"!ba", pb.LZ4, 3, codecs=codecs)
    assert batch.decompress(compression.compress(pb.ZSTD, b"abc"), pb.ZSTD, 3, codecs=codecs) == (
        b"abc"
    )  # the codecs not given are Pulsar's own
    with pytest.raises(UnsupportedCompressionError, match="compression 99 is not available"):
        batch.decompress(b"x", 99, 1)


def test_routing_key() -> None:
    assert batch.routing_key(pb.SingleMessageMetadata(payload_size=0)) is None
    assert batch.routing_key(pb.SingleMessageMetadata(partition_key="k")) == b"k"
    both = pb.SingleMessageMetadata(partition_key="k", ordering_key=b"o")
    assert batch.routing_key(both) == b"o"
    b64 = metadata(1, partition_key=base64.b64encode(b"\x00\x01").decode(),
                   partition_key_b64_encoded=True)  # fmt: skip
    assert batch.routing_key(b64) == b"\x00\x01"
    with pytest.raises(CorruptMetadataError):
        batch.routing_key(metadata(1, partition_key="!!", partition_key_b64_encoded=True))


def test_ack_sets_match_java_bitset_words() -> None:
    assert batch.full_ack_set(3) == [7]
    assert batch.full_ack_set(64) == [-1]
    assert batch.full_ack_set(65) == [-1, 1]
    assert batch.ack_set_from_unacked([]) == []
    assert batch.ack_set_from_unacked([63]) == [-(2**63)]
    rng = random.Random(3)
    for _ in range(200):
        idx = sorted(rng.sample(range(300), rng.randint(0, 40)))
        assert batch.unacked_from_ack_set(batch.ack_set_from_unacked(idx)) == idx
    with pytest.raises(ValueError):
        batch.ack_set_from_unacked([-1])
