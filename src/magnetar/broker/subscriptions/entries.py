"""What dispatch needs to know about a stored entry, read from its metadata once.

Permits are counted per message, so a batch entry costs ``num_messages_in_batch``; Key_Shared
routes by the entry's key; delayed delivery holds an entry until ``deliver_at_time``; seek by
time compares ``publish_time``. All of it sits in the entry's MessageMetadata, which is parsed
once per entry and kept in a small per-topic cache shared by every subscription -- the payload
itself is never decoded, except to read the first message's key of a batch that carries no
entry-level key (Key_Shared only).
"""

from __future__ import annotations

import logging
import struct
from typing import Final, NamedTuple

from magnetar.broker.subscriptions.hashing import sticky_key_hash
from magnetar.managed_ledger.api import Entry, Position
from magnetar.wire import batch, frames, pb
from magnetar.wire.errors import CorruptMetadataError, WireError

log = logging.getLogger(__name__)

NONE_KEY: Final = b"NONE_KEY"
"""The sticky key of messages without one (Pulsar's ``NONE_KEY``)."""


class EntryMeta(NamedTuple):
    num_messages: int
    """Messages in the entry: the permits it costs (1 unless it is a batch)."""
    is_batch: bool
    publish_time: int
    deliver_at: int | None
    """Absolute ms of delayed delivery, None when not delayed."""
    key_hash: int
    """Pulsar sticky-key hash of the routing key (ordering key, else partition key)."""
    size: int
    txn: tuple[int, int] | None = None
    """(most, least) bits of the transaction that stored it, None outside transactions."""
    marker: int = 0
    """``marker_type`` of a broker marker entry (transaction commit/abort), never delivered."""


_U32: Final = struct.Struct(">I")
_MAGIC_CRC32C: Final = frames.MAGIC_CRC32C.to_bytes(2, "big")


def split_entry(data: bytes | memoryview) -> tuple[memoryview, memoryview]:
    """(metadata, payload) views of a stored entry, *without* verifying its checksum: the
    broker verified it once on SEND and the client verifies it again on MESSAGE; dispatch
    must not pay a crc32c over every payload again."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    p = 6 if mv[:2] == _MAGIC_CRC32C else 0
    if len(mv) < p + 4:
        raise CorruptMetadataError("stored entry too short for its metadata size")
    (size,) = _U32.unpack_from(mv, p)
    end = p + 4 + size
    if end > len(mv):
        raise CorruptMetadataError(f"metadata size {size} exceeds the stored entry")
    return mv[p + 4 : end], mv[end:]


def read_meta(data: bytes | memoryview) -> EntryMeta:
    """Parse the metadata of a stored entry (headers and payload as the producer sent them).

    Garbage is not fatal: the entry is still delivered (the client reports it), counted as
    one message without a key.
    """
    try:
        raw_md, payload = split_entry(data)
        md = frames.parse_message_metadata(raw_md)
        info = batch.entry_info(md)
        key = batch.routing_key(md)
        if key is None and info.is_batch and md.compression == pb.NONE and info.num_messages:
            # a batch without an entry-level key: route it by its first message's key
            first = next(batch.iter_batch(payload), None)
            if first is not None:
                key = batch.routing_key(first.metadata)
    except (WireError, StopIteration) as exc:
        log.warning("entry with unreadable metadata dispatched as one message: %s", exc)
        return EntryMeta(1, False, 0, None, sticky_key_hash(NONE_KEY), len(data))
    return EntryMeta(
        max(info.num_messages, 1) if info.is_batch else 1,
        info.is_batch,
        info.publish_time,
        info.deliver_at_time,
        sticky_key_hash(key if key is not None else NONE_KEY),
        len(data),
        (md.txnid_most_bits, md.txnid_least_bits) if md.HasField("txnid_most_bits") else None,
        md.marker_type,
    )


class EntryMetaCache:
    """Position -> EntryMeta for the entries dispatch touched recently (FIFO eviction)."""

    def __init__(self, capacity: int = 32768) -> None:
        self.capacity = capacity
        self._items: dict[Position, EntryMeta] = {}

    def get(self, entry: Entry) -> EntryMeta:
        meta = self._items.get(entry.position)
        if meta is None:
            meta = read_meta(entry.data)
            items = self._items
            if len(items) >= self.capacity:
                del items[next(iter(items))]
            items[entry.position] = meta
        return meta

    def lookup(self, position: Position) -> EntryMeta | None:
        return self._items.get(position)

    def clear(self) -> None:
        self._items.clear()
