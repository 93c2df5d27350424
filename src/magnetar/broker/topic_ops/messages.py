"""Stored messages seen by an administrator: the last message id, peeking at a subscription,
examining the n-th message from either end, reading one message by its id.

Why this module exists: both read entries of the managed ledger and parse their metadata;
the admin API turns the results into Pulsar's JSON and ``X-Pulsar-*`` headers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from magnetar.broker.topic_ops import errors, fanout, scope, subscriptions
from magnetar.broker.topic_ops.scope import Scope
from magnetar.managed_ledger.api import Entry, ManagedLedgerError, Position
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
    last one; 405 on a partitioned topic, as Pulsar)."""
    await fanout.refuse(s, topic, "Peek messages on a partitioned topic is not allowed")
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
    return _peeked(found)


def _peeked(found: Entry) -> PeekedMessage:
    _, meta, payload = split_headers_and_payload(found.data)
    md = parse_message_metadata(meta)
    body = bytes(decompress(payload, md.compression, md.uncompressed_size))
    return PeekedMessage(position=found.position, metadata=md, payload=body)


def _stored_ranges(ml: Any) -> list[tuple[int, int, int]]:
    """(ledger, first entry, last entry) of each ledger's stored entries, oldest first."""
    first, last = ml.first_position, ml.last_confirmed_entry
    out = []
    for ledger in ml.ledgers():
        if ledger.ledger_id < first.ledger_id or ledger.ledger_id > last.ledger_id:
            continue
        lo = first.entry_id if ledger.ledger_id == first.ledger_id else 0
        hi = last.entry_id if ledger.ledger_id == last.ledger_id else ledger.entries - 1
        if hi >= lo:
            out.append((ledger.ledger_id, lo, hi))
    return out


async def examine(s: Scope, topic: TopicName, *, initial: str, n: int) -> PeekedMessage:
    """The ``n``-th (from 1) stored message counted from the oldest (``initial``
    "earliest") or the newest ("latest"), whether acknowledged or not, as Pulsar's
    ``examinemessage``: ``n`` past the end answers the message at that end; Invalid (412,
    Pulsar's reason) when nothing is stored; 405 on a partitioned topic."""
    await fanout.refuse(
        s,
        topic,
        "Examine messages on a partitioned topic is not allowed, please try examine message "
        "on specific topic partition",
    )
    if initial.lower() not in ("earliest", "latest"):
        raise errors.Invalid(f"initialPosition must be earliest or latest, not {initial!r}")
    loaded = await scope.stored(s, topic, "Examine messages on")
    ml: Any = loaded.managed_ledger
    ranges = _stored_ranges(ml)
    total = sum(hi - lo + 1 for _, lo, hi in ranges)
    if total <= 0:
        raise errors.Precondition("Could not examine messages due to the total message is zero")
    index = min(n, total) - 1 if initial.lower() == "earliest" else total - min(n, total)
    for ledger_id, lo, hi in ranges:
        if index <= hi - lo:
            return _peeked(await ml.read_entry(Position(ledger_id, lo + index)))
        index -= hi - lo + 1
    raise errors.NotFound("Message not found")  # the ranges hold ``total`` entries


async def by_id(s: Scope, topic: TopicName, *, ledger_id: int, entry_id: int) -> PeekedMessage:
    """The stored message (a batch whole) at ``ledger_id:entry_id`` (NotFound, Pulsar's
    reason, when there is none; 405 on a partitioned topic)."""
    await fanout.refuse(s, topic, "GetMessageById is not allowed on partitioned-topic")
    loaded = await scope.stored(s, topic, "Get message by id of")
    ml: Any = loaded.managed_ledger
    if not any(lid == ledger_id and lo <= entry_id <= hi for lid, lo, hi in _stored_ranges(ml)):
        raise errors.NotFound("Message id not found")
    try:
        return _peeked(await ml.read_entry(Position(ledger_id, entry_id)))
    except ManagedLedgerError:
        raise errors.NotFound("Message id not found") from None
