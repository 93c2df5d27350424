"""Batched entries: splitting, building, quick metadata reads and batch-index ack sets.

A producer batch is stored as *one* entry and stays one entry end to end; the broker only
looks inside when semantics require it (Key_Shared routing per message, delayed delivery,
batch-index acks, compaction) -- that is what this module is for. Payload layout of a batch
(after decompression)::

    repeated { [u32 size][SingleMessageMetadata][payload_size bytes] }

An entry is a batch when its MessageMetadata *has* num_messages_in_batch (the clients'
rule), even if it holds a single message. Compression applies to the whole batch payload;
nothing here decompresses unless asked (``decompress=True``); every codec of Pulsar's is
available (wire/compression.py).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, NamedTuple, TypeAlias

from google.protobuf.message import DecodeError

from magnetar.wire import compression as compression_codecs
from magnetar.wire import pb
from magnetar.wire.errors import (
    CompressedPayloadError,
    CorruptBatchError,
    CorruptMetadataError,
    UnsupportedCompressionError,
)
from magnetar.wire.frames import Buffer, parse_message_metadata

_U32: Final = struct.Struct(">I")
_MASK64: Final = (1 << 64) - 1


class BatchedMessage(NamedTuple):
    """One message of a batch: its metadata and a view of its payload bytes."""

    metadata: pb.SingleMessageMetadata
    payload: memoryview


class EntryInfo(NamedTuple):
    """The MessageMetadata fields the broker needs per entry, read in one parse."""

    producer_name: str
    sequence_id: int
    #: last sequence id covered by the entry (== sequence_id unless the batch set it)
    highest_sequence_id: int
    publish_time: int
    num_messages: int
    is_batch: bool
    compression: pb.CompressionType.ValueType
    #: absolute ms for delayed delivery, None when not delayed
    deliver_at_time: int | None
    is_chunk: bool


def entry_info(metadata: pb.MessageMetadata | Buffer) -> EntryInfo:
    """Read publish time, sequence ids, message count... from MessageMetadata (raw bytes
    are parsed; CorruptMetadataError on garbage)."""
    md = metadata if isinstance(metadata, pb.MessageMetadata) else parse_message_metadata(metadata)
    seq = md.sequence_id
    return EntryInfo(
        md.producer_name,
        seq,
        max(seq, md.highest_sequence_id),
        md.publish_time,
        md.num_messages_in_batch,
        md.HasField("num_messages_in_batch"),
        md.compression,
        md.deliver_at_time if md.HasField("deliver_at_time") else None,
        md.HasField("uuid") and md.num_chunks_from_msg > 1,
    )


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def iter_batch(payload: Buffer) -> Iterator[BatchedMessage]:
    """Split an uncompressed batch payload; payload views share the input's memory."""
    mv = payload if isinstance(payload, memoryview) else memoryview(payload).toreadonly()
    end = len(mv)
    p = 0
    unpack = _U32.unpack_from
    while p < end:
        if end - p < 4:
            raise CorruptBatchError(f"truncated message size at offset {p}")
        (size,) = unpack(mv, p)
        meta_end = p + 4 + size
        if meta_end > end:
            raise CorruptBatchError(f"message metadata size {size} at offset {p} exceeds batch")
        smd = pb.SingleMessageMetadata()
        try:
            smd.ParseFromString(mv[p + 4 : meta_end])  # type: ignore[arg-type]  # upb: any buffer
        except DecodeError as exc:
            raise CorruptBatchError(f"bad message metadata at offset {p}: {exc}") from None
        payload_size = smd.payload_size
        data_end = meta_end + payload_size
        if payload_size < 0 or data_end > end:
            raise CorruptBatchError(f"payload size {payload_size} at offset {p} exceeds batch")
        yield BatchedMessage(smd, mv[meta_end:data_end])
        p = data_end


def parse_batch(payload: Buffer, *, count: int | None = None) -> list[BatchedMessage]:
    """All messages of an uncompressed batch; with ``count`` (num_messages_in_batch) the
    number found must match."""
    messages = list(iter_batch(payload))
    if count is not None and len(messages) != count:
        raise CorruptBatchError(f"batch holds {len(messages)} messages, metadata says {count}")
    return messages


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, Buffer]]) -> bytes:
    """Build a batch payload; each metadata's payload_size is set from its payload (the
    metadata objects passed in are updated)."""
    parts: list[Buffer] = []
    for smd, data in messages:
        smd.payload_size = len(data)
        meta = smd.SerializeToString()
        parts.append(_U32.pack(len(meta)))
        parts.append(meta)
        parts.append(data)
    return b"".join(parts)


Decompressor: TypeAlias = Callable[[Buffer, int], bytes]
"""``(payload, uncompressed size) -> bytes`` of one codec; raises ValueError or OSError on
a payload that does not decompress."""


def decompress(
    payload: Buffer,
    compression: int,
    uncompressed_size: int,
    *,
    codecs: Mapping[int, Decompressor] | None = None,
) -> bytes | Buffer:
    """Undo an entry's compression (NONE returns the input unchanged) with Pulsar's codecs
    (wire/compression.py), or with the ones ``codecs`` gives instead (the Spark reader's,
    from pyarrow). CorruptBatchError when the payload does not decompress to the size its
    metadata announces, UnsupportedCompressionError for a codec Pulsar does not have."""
    if compression == pb.NONE:
        return payload
    known = compression in _KNOWN_CODECS
    name = (
        pb.CompressionType.Name(pb.CompressionType.ValueType(compression)) if known else compression
    )
    if not known:
        raise UnsupportedCompressionError(f"compression {name} is not available")
    try:
        if codecs is not None and compression in codecs:
            out = codecs[compression](payload, uncompressed_size)
        else:
            out = compression_codecs.decompress(compression, payload, uncompressed_size)
    except (ValueError, OSError) as exc:
        raise CorruptBatchError(f"{name} payload does not decompress: {exc}") from None
    if len(out) != uncompressed_size:
        raise CorruptBatchError(f"decompressed {len(out)} bytes, metadata says {uncompressed_size}")
    return out


_KNOWN_CODECS: Final = frozenset(pb.CompressionType.values())


def split_entry(
    metadata: pb.MessageMetadata, payload: Buffer, *, decompress_payload: bool = False
) -> list[BatchedMessage]:
    """The messages of one stored entry, whether batched or not.

    A non-batched entry yields one message whose SingleMessageMetadata is derived from the
    entry metadata (keys, properties, event time, sequence id). Compressed entries need
    ``decompress_payload=True``; otherwise CompressedPayloadError.
    """
    if metadata.compression != pb.NONE:
        if not decompress_payload:
            name = pb.CompressionType.Name(metadata.compression)
            raise CompressedPayloadError(f"entry payload is {name}-compressed")
        payload = decompress(payload, metadata.compression, metadata.uncompressed_size)
    if is_batch(metadata):
        return parse_batch(payload, count=metadata.num_messages_in_batch)
    mv = payload if isinstance(payload, memoryview) else memoryview(payload).toreadonly()
    smd = pb.SingleMessageMetadata(payload_size=len(mv))
    smd.properties.extend(metadata.properties)
    for name in (
        "partition_key",
        "partition_key_b64_encoded",
        "ordering_key",
        "event_time",
        "null_value",
        "null_partition_key",
    ):
        if metadata.HasField(name):  # type: ignore[arg-type]  # names shared by both types
            setattr(smd, name, getattr(metadata, name))
    smd.sequence_id = metadata.sequence_id
    return [BatchedMessage(smd, mv)]


def highest_sequence_id(metadata: pb.MessageMetadata, payload: Buffer) -> int:
    """The highest sequence id an entry holds: the metadata's ``highest_sequence_id`` when
    the producer set it (the Java client), else, for a batch, its last message's own
    ``sequence_id`` (the C++-based clients number each message of a batch), else the first
    id plus the batch's size less one; for a single message its ``sequence_id``. Raises
    WireError subclasses for a batch that does not split."""
    first = metadata.sequence_id
    if metadata.highest_sequence_id > first:
        return int(metadata.highest_sequence_id)
    if not is_batch(metadata) or metadata.num_messages_in_batch <= 1:
        return int(first)
    last: pb.SingleMessageMetadata | None = None
    for message in split_entry(metadata, payload, decompress_payload=True):
        last = message.metadata
    if last is not None and last.HasField("sequence_id") and last.sequence_id >= first:
        return int(last.sequence_id)
    return int(first + metadata.num_messages_in_batch - 1)


def routing_key(metadata: pb.MessageMetadata | pb.SingleMessageMetadata) -> bytes | None:
    """The key Key_Shared routes by: ordering_key, else partition_key (base64-decoded when
    flagged so), else None (no key)."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        key = metadata.partition_key
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(key, validate=True)
            except (binascii.Error, ValueError):
                raise CorruptMetadataError("partition key flagged base64 is not base64") from None
        return key.encode()
    return None


# -- batch-index ack sets -----------------------------------------------------------------
# MessageIdData.ack_set / CommandMessage.ack_set: a java.util.BitSet as little-endian signed
# 64-bit words; bit i set = message i of the batch is NOT yet acknowledged.


def ack_set_from_unacked(unacked: Iterable[int]) -> list[int]:
    """Words of a bit set with the given batch indexes set (trailing zero words trimmed)."""
    bits = 0
    for index in unacked:
        if index < 0:
            raise ValueError(f"negative batch index {index}")
        bits |= 1 << index
    words: list[int] = []
    while bits:
        word = bits & _MASK64
        words.append(word - (1 << 64) if word >> 63 else word)
        bits >>= 64
    return words


def unacked_from_ack_set(words: Iterable[int]) -> list[int]:
    """The batch indexes whose bit is set, ascending."""
    out: list[int] = []
    for k, word in enumerate(words):
        word &= _MASK64
        base = 64 * k
        while word:
            low = word & -word
            out.append(base + low.bit_length() - 1)
            word ^= low
    return out


def full_ack_set(batch_size: int) -> list[int]:
    """Ack set of a batch with nothing acknowledged yet (all ``batch_size`` bits set)."""
    return ack_set_from_unacked(range(batch_size))
