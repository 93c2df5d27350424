"""A topic's subscriptions: list, create at a position, delete, reset, skip, clear, expire.

Why this module exists: the subscription operations of the admin API as typed calls. What
moves a subscription's cursor (skip, clear backlog, expire) goes through the managed
ledger's public cursor interface (``managed_ledger/api.py`` ``ManagedCursor``); reset goes
through the subscription, which detaches its consumers as a seek does.
"""

from __future__ import annotations

import time

from magnetar.broker import enforcement
from magnetar.broker.contracts import BrokerError
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_ops import errors, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.managed_ledger.api import InitialPosition, ManagedCursor
from magnetar.wire import pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName

LATEST_LEDGER_ID = 2**63 - 1
"""The ledger id of Pulsar's ``MessageId.latest`` (``Long.MAX_VALUE``)."""


async def list_subscriptions(s: Scope, topic: TopicName) -> list[str]:
    """The topic's subscriptions, sorted."""
    return sorted((await scope.loaded(s, topic)).subscriptions.names())


async def create(s: Scope, topic: TopicName, name: str, *, start: MessageId | None) -> None:
    """Create a durable subscription at ``start`` (None or ``MessageId.latest``: the end;
    a negative ledger id, ``MessageId.earliest``: the beginning). Invalid on a
    non-persistent topic (only clients create those); AlreadyExists when it exists."""
    if not topic.is_persistent:  # Pulsar's answer, word for word
        raise errors.Invalid(
            "Create subscription on non-persistent topic can only be done through client"
        )
    loaded = await scope.loaded(s, topic)
    position: InitialPosition | MessageId = InitialPosition.LATEST
    if start is not None and start.ledger_id < 0:
        position = InitialPosition.EARLIEST
    elif start is not None and start.ledger_id != LATEST_LEDGER_ID:
        position = start
    try:
        await loaded.subscriptions.create(name, start=position)
    except BrokerError as err:
        if err.code == pb.NotAllowedError:
            raise errors.AlreadyExists(err.message) from None
        raise


async def delete(s: Scope, topic: TopicName, name: str, *, force: bool) -> None:
    """Delete a subscription (InUse while it has consumers, unless ``force``)."""
    loaded = await scope.loaded(s, topic)
    try:
        await loaded.subscriptions.delete(name, force=force)
    except BrokerError as err:
        if err.code == pb.ConsumerBusy:
            raise errors.InUse(err.message) from None
        raise


async def _reset(
    s: Scope,
    topic: TopicName,
    name: str,
    *,
    message_id: MessageId | None = None,
    publish_time: int | None = None,
) -> None:
    loaded = await scope.stored(s, topic, "Reset cursor on")
    try:
        await loaded.subscriptions.reset(name, message_id=message_id, publish_time=publish_time)
    except BrokerError as err:
        if err.code == pb.SubscriptionNotFound:
            raise errors.NotFound(err.message) from None
        raise


async def reset_to_time(s: Scope, topic: TopicName, name: str, *, publish_time_ms: int) -> None:
    """Reset the subscription to the first message published at or after the time (ms)."""
    await _reset(s, topic, name, publish_time=publish_time_ms)


async def reset_to_message_id(
    s: Scope, topic: TopicName, name: str, *, message_id: MessageId
) -> None:
    """Reset the subscription to a message id."""
    await _reset(s, topic, name, message_id=message_id)


def cursor(loaded: PersistentTopic, name: str) -> ManagedCursor:
    """The durable cursor of subscription ``name`` (NotFound when there is none)."""
    found = loaded.managed_ledger.cursors.get(name)
    if found is None or not found.durable:
        raise errors.NotFound(f"subscription {name} does not exist")
    return found


async def skip(s: Scope, topic: TopicName, name: str, n: int) -> None:
    """Skip the next ``n`` messages of the subscription."""
    loaded = await scope.stored(s, topic, "Skip messages on")
    await cursor(loaded, name).skip(n)


async def clear_backlog(s: Scope, topic: TopicName, name: str) -> None:
    """Acknowledge everything the subscription has not acknowledged."""
    loaded = await scope.stored(s, topic, "Clear backlog on")
    await cursor(loaded, name).clear_backlog()


async def expire(s: Scope, topic: TopicName, name: str | None, *, older_than_s: int) -> None:
    """Acknowledge the messages published more than ``older_than_s`` seconds ago, on one
    subscription (``name``) or on every one (None)."""
    loaded = await scope.stored(s, topic, "Expire messages on")
    cursors = None if name is None else [cursor(loaded, name)]
    cutoff_ms = int((time.time() - older_than_s) * 1000)
    await enforcement.expire(loaded, cutoff_ms=cutoff_ms, cursors=cursors)
