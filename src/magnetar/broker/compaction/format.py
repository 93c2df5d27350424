"""The entries of a compacted ledger and the look into a stored entry that compaction needs.

A compacted ledger holds one entry per retained topic entry, in the topic's order, in
Pulsar's ``RawMessage`` layout so the original message id travels with it::

    [u32 id size][MessageIdData][u32 size][headers and payload as stored]

What is retained of an entry (Pulsar's ``TwoPhaseCompactor`` / ``RawBatchConverter``):

* a message's key is its ``partition_key``; a message without one is dropped;
* a message whose payload is empty (size 0 -- the clients send ``null`` values so) is a
  *tombstone*: the key is deleted from the compacted view;
* in a batch each message counts on its own; a batch keeping some of its messages is
  re-built with those only (a batch keeping none is dropped whole). Pulsar keeps the
  dropped ones as empty ``compacted_out`` slots instead, which its Java client skips but the
  C++-based Python client (3.x) hands out as empty messages; re-built batches work with
  both, at the price that the batch indexes of a compacted batch's messages are their
  indexes in the re-built batch (see
  :mod:`magnetar.broker.compaction.cursor` for what that means for batch-index acks).
  Slots already marked ``compacted_out`` are skipped when an entry is looked into.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

from magnetar.managed_ledger.api import Position
from magnetar.wire import batch, compression, frames, pb
from magnetar.wire.errors import CorruptMetadataError

_U32: Final = struct.Struct(">I")

MessageKey = tuple[Position, int]
"""A message of the topic: the entry's position and its batch index (-1: not a batch)."""


def encode_raw(position: Position, data: bytes | memoryview) -> bytes:
    """One compacted-ledger entry: the original position and the stored entry."""
    mid = pb.MessageIdData(ledgerId=position.ledger_id, entryId=position.entry_id)
    raw = mid.SerializeToString()
    return b"".join((_U32.pack(len(raw)), raw, _U32.pack(len(data)), data))


def decode_raw(raw: bytes | memoryview) -> tuple[Position, bytes]:
    """(original position, stored entry) of a compacted-ledger entry."""
    mv = memoryview(raw)
    if len(mv) < 8:
        raise CorruptMetadataError("compacted entry too short")
    (id_size,) = _U32.unpack_from(mv, 0)
    if 8 + id_size > len(mv):
        raise CorruptMetadataError("compacted entry: message id exceeds the entry")
    mid = pb.MessageIdData()
    mid.ParseFromString(bytes(mv[4 : 4 + id_size]))
    (size,) = _U32.unpack_from(mv, 4 + id_size)
    start = 8 + id_size
    if start + size != len(mv):
        raise CorruptMetadataError("compacted entry: payload size does not match")
    return Position(mid.ledgerId, mid.entryId), bytes(mv[start:])


class KeyedMessage(NamedTuple):
    """One message of an entry as compaction sees it."""

    batch_index: int
    key: str | None
    """The partition key; None: the message has none (dropped from the compacted view)."""
    tombstone: bool


class Parsed(NamedTuple):
    metadata: pb.MessageMetadata
    payload: memoryview
    messages: list[KeyedMessage]
    batched: list[batch.BatchedMessage] | None
    """A batch's messages (decompressed), None for a single message."""


def parse(data: bytes | memoryview) -> Parsed:
    """The messages of a stored entry. Raises WireError for an entry that cannot be looked
    into (garbage, a batch compressed with a codec not available here)."""
    _, raw_md, payload = frames.split_headers_and_payload(data)
    md = frames.parse_message_metadata(raw_md)
    if not batch.is_batch(md):
        size = md.uncompressed_size if md.HasField("uncompressed_size") else len(payload)
        key = md.partition_key if md.HasField("partition_key") else None
        return Parsed(md, payload, [KeyedMessage(-1, key, size == 0)], None)
    messages = batch.split_entry(md, payload, decompress_payload=True)
    keyed = [
        KeyedMessage(
            i,
            m.metadata.partition_key if m.metadata.HasField("partition_key") else None,
            m.metadata.payload_size == 0,
        )
        for i, m in enumerate(messages)
        if not m.metadata.compacted_out
    ]
    return Parsed(md, payload, keyed, messages)


def iter_keys(
    position: Position, data: bytes | memoryview
) -> Iterator[tuple[str, MessageKey, bool]]:
    """(key, message, tombstone) of each keyed message of an entry (phase one)."""
    for m in parse(data).messages:
        if m.key is not None:
            yield m.key, (position, m.batch_index), m.tombstone


def retain(
    position: Position, data: bytes | memoryview, latest: dict[str, MessageKey]
) -> bytes | memoryview | None:
    """The entry as the compacted ledger keeps it (``latest``: each live key's last
    message), or None when nothing of it is kept (phase two)."""
    parsed = parse(data)
    if parsed.batched is None:
        (m,) = parsed.messages
        keep = m.key is not None and not m.tombstone and latest.get(m.key) == (position, -1)
        return data if keep else None
    kept = {
        m.batch_index
        for m in parsed.messages
        if m.key is not None and not m.tombstone and latest.get(m.key) == (position, m.batch_index)
    }
    if not kept:
        return None
    if len(kept) == len(parsed.batched):
        return data
    slots = [(m.metadata, m.payload) for i, m in enumerate(parsed.batched) if i in kept]
    body = batch.build_batch(slots)
    md = parsed.metadata
    md.num_messages_in_batch = len(slots)
    md.uncompressed_size = len(body)
    # written back with the codec the producer chose (split_entry could decompress it)
    return frames.encode_headers_and_payload(md, compression.compress(md.compression, body))


def last_batch_index(data: bytes | memoryview) -> int:
    """The id's batch index GET_LAST_MESSAGE_ID gives for a compacted entry: its last
    message not compacted out (Pulsar's ``calculateTheLastBatchIndexInBatch``); -1 for a
    single message or a batch of one."""
    parsed = parse(data)
    if parsed.batched is None or len(parsed.batched) <= 1:
        return -1
    return max((m.batch_index for m in parsed.messages), default=-1)


def publish_time(data: bytes | memoryview) -> int:
    """The publish time (ms) of a stored entry."""
    _, raw_md, _ = frames.split_headers_and_payload(data)
    return frames.parse_message_metadata(raw_md).publish_time
