"""Stored messages seen by an administrator: the last message id, peeking at a subscription.

Why this module exists: both read entries of the managed ledger and parse their metadata;
the admin API turns the results into Pulsar's JSON and ``X-Pulsar-*`` headers.
"""

from __future__ import annotations

import dataclasses

from magnetar.broker.topic_ops import errors, scope, subscriptions
from magnetar.broker.topic_ops.scope import Scope
from magnetar.managed_ledger.api import Entry, Position
from magnetar.wire import pb
from magnetar.wire.batch import decompress
from magnetar.wire.frames import parse_message_metadata, split_headers_and_payload
from magnetar.wire.topics import TopicName


@dataclasses.dataclass(frozen=True)
class LastMessageId:
    """Pulsar's ``lastMessageId``: entry -1 when the topic is empty; the last batch index
    (and the batch's size) when the last entry is a batch, else -1 and 0."""

    ledger_id: int
    entry_id: int
    partition_index: int
    batch_index: int
    batch_size: int


@dataclasses.dataclass(frozen=True)
class PeekedMessage:
    """One stored entry as peeking answers it: its position, its metadata and its payload
    (uncompressed; a batch whole)."""

    position: Position
    metadata: pb.MessageMetadata
    payload: bytes


async def last_message_id(s: Scope, topic: TopicName) -> LastMessageId:
    """The last stored message's id."""
    loaded = await scope.stored(s, topic, "Get the last message id of")
    ml = loaded.managed_ledger
    lce = ml.last_confirmed_entry
    batch_index, batch_size = -1, 0
    if lce.entry_id >= 0:
        _, meta, _ = split_headers_and_payload((await ml.read_entry(lce)).data)
        md = parse_message_metadata(meta)
        if md.HasField("num_messages_in_batch"):
            batch_size = md.num_messages_in_batch
            batch_index = batch_size - 1
    return LastMessageId(
        ledger_id=lce.ledger_id,
        entry_id=lce.entry_id,
        partition_index=loaded.name.partition_index,
        batch_index=batch_index,
        batch_size=batch_size,
    )


async def peek(s: Scope, topic: TopicName, subscription: str, n: int) -> PeekedMessage:
    """The ``n``-th (from 1) entry the subscription has not acknowledged (NotFound past the
    last one)."""
    loaded = await scope.stored(s, topic, "Peek messages on")
    cursor = subscriptions.cursor(loaded, subscription)
    ml = loaded.managed_ledger
    start = ml.next_position(cursor.mark_delete_position)
    counted = 0
    found: Entry | None = None
    while found is None:
        entries = await ml.read_entries(start, max_entries=min(n - counted, 100))
        if not entries:
            raise errors.NotFound("Message not found")
        for entry in entries:
            if not cursor.is_deleted(entry.position):
                counted += 1
                if counted == n:
                    found = entry
                    break
        start = ml.next_position(entries[-1].position)
    _, meta, payload = split_headers_and_payload(found.data)
    md = parse_message_metadata(meta)
    body = bytes(decompress(payload, md.compression, md.uncompressed_size))
    return PeekedMessage(position=found.position, metadata=md, payload=body)
