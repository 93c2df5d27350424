"""A topic's subscriptions: list, create at a position, delete, reset, skip, clear, expire,
and whether each is replicated.

Why this module exists: the subscription operations of the admin API as typed calls. What
moves a subscription's cursor (skip, clear backlog, expire) goes through the managed
ledger's public cursor interface (``managed_ledger/api.py`` ``ManagedCursor``); reset goes
through the subscription, which detaches its consumers as a seek does.

A partitioned topic's base name: listing, creating, deleting, clearing, expiring and
resetting by time run on every partition (:mod:`.fanout`), with Pulsar's answers when the
subscription is on none of them; skip and reset to a message id answer 405 as Pulsar's do.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker import enforcement
from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_ops import errors, fanout, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.managed_ledger.api import InitialPosition, ManagedCursor
from magnetar.wire import pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName

LATEST_LEDGER_ID = 2**63 - 1
"""The ledger id of Pulsar's ``MessageId.latest`` (``Long.MAX_VALUE``)."""


def _sub_path(name: str) -> str:
    return f"/subscription/{urllib.parse.quote(name, safe='')}"


async def list_subscriptions(s: Scope, topic: TopicName) -> list[str]:
    """The topic's subscriptions, sorted (a partitioned topic's: those of any partition)."""
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> list[str]:
            return await list_subscriptions(s, part)

        found = await fanout.each(s, topic, n, here, method="GET", suffix="/subscriptions")
        return sorted({name for names in found for name in names})
    return sorted((await scope.loaded(s, topic)).subscriptions.names())


async def _having(s: Scope, topic: TopicName, n: int, name: str) -> list[bool]:
    """For each partition of a partitioned topic, whether subscription ``name`` is on it."""

    async def here(part: TopicName) -> list[str]:
        return await list_subscriptions(s, part)

    found = await fanout.each(s, topic, n, here, method="GET", suffix="/subscriptions")
    return [name in names for names in found]


async def _on_partitions_having(
    s: Scope,
    topic: TopicName,
    n: int,
    name: str,
    here: Callable[[TopicName], Awaitable[Any]],
    *,
    method: str,
    suffix: str,
    missing: str,
) -> None:
    """Run an operation on the partitions holding subscription ``name``; NotFound
    (``missing``) when none does."""
    having = await _having(s, topic, n, name)
    if not any(having):
        raise errors.NotFound(missing)
    for i, held in enumerate(having):
        if held:
            await fanout.each_one(s, topic.partition(i), here, method=method, suffix=suffix)


async def create(s: Scope, topic: TopicName, name: str, *, start: MessageId | None) -> None:
    """Create a durable subscription at ``start`` (None or ``MessageId.latest``: the end;
    a negative ledger id, ``MessageId.earliest``: the beginning). Invalid on a
    non-persistent topic (only clients create those); AlreadyExists when it exists."""
    if not topic.is_persistent:  # Pulsar's answer, word for word
        raise errors.Invalid(
            "Create subscription on non-persistent topic can only be done through client"
        )
    n = await fanout.partition_count(s, topic)
    if n is not None:
        if any(await _having(s, topic, n, name)):
            raise errors.AlreadyExists("Subscription already exists for topic")
        body = None if start is None else {"ledgerId": start.ledger_id, "entryId": start.entry_id}

        async def here(part: TopicName) -> None:
            await create(s, part, name, start=start)

        await fanout.each(s, topic, n, here, method="PUT", suffix=_sub_path(name), body=body)
        return
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
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> None:
            await delete(s, part, name, force=force)

        flag = "true" if force else "false"
        await _on_partitions_having(
            s, topic, n, name, here, method="DELETE",
            suffix=f"{_sub_path(name)}?force={flag}", missing="Subscription not found",
        )  # fmt: skip
        return
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
    n = await fanout.partition_count(s, topic)
    if n is not None:
        if publish_time is None:
            raise errors.NotAllowed("Reset-cursor at position is not allowed for partitioned-topic")

        async def here(part: TopicName) -> None:
            await _reset(s, part, name, publish_time=publish_time)

        suffix = f"{_sub_path(name)}/resetcursor/{publish_time}"
        await fanout.each(s, topic, n, here, method="POST", suffix=suffix)
        return
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
    """Skip the next ``n`` messages of the subscription (405 on a partitioned topic)."""
    await fanout.refuse(s, topic, "Skip messages on a partitioned topic is not allowed")
    loaded = await scope.stored(s, topic, "Skip messages on")
    await cursor(loaded, name).skip(n)


async def clear_backlog(s: Scope, topic: TopicName, name: str) -> None:
    """Acknowledge everything the subscription has not acknowledged."""
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> None:
            await clear_backlog(s, part, name)

        await _on_partitions_having(
            s, topic, n, name, here, method="POST", suffix=f"{_sub_path(name)}/skip_all",
            missing=f"Subscription {name} not found for topic {topic.full_name}",
        )  # fmt: skip
        return
    loaded = await scope.stored(s, topic, "Clear backlog on")
    await cursor(loaded, name).clear_backlog()


async def expire(s: Scope, topic: TopicName, name: str | None, *, older_than_s: int) -> None:
    """Acknowledge the messages published more than ``older_than_s`` seconds ago, on one
    subscription (``name``) or on every one (None); 0 expires nothing, as in Pulsar."""
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> None:
            await expire(s, part, name, older_than_s=older_than_s)

        if name is None:
            suffix = f"/all_subscription/expireMessages/{older_than_s}"
            await fanout.each(s, topic, n, here, method="POST", suffix=suffix)
            return
        await _on_partitions_having(
            s, topic, n, name, here, method="POST",
            suffix=f"{_sub_path(name)}/expireMessages/{older_than_s}",
            missing=f"Subscription {name} not found for topic {topic.full_name}",
        )  # fmt: skip
        return
    loaded = await scope.stored(s, topic, "Expire messages on")
    cursors = None if name is None else [cursor(loaded, name)]
    if older_than_s == 0:
        return  # a TTL of 0 expires nothing (Pulsar's MessageImpl.isEntryExpired)
    cutoff_ms = int((time.time() - older_than_s) * 1000)
    await enforcement.expire(loaded, cutoff_ms=cutoff_ms, cursors=cursors)


def _status_path(name: str) -> str:
    return f"{_sub_path(name)}/replicatedSubscriptionStatus"


async def _subscription(
    s: Scope, topic: TopicName, name: str
) -> tuple[PersistentTopic, Subscription]:
    """The topic, loaded here, and its subscription ``name``, with Pulsar's 404s."""
    svc = s.service
    if not (await scope.exists(svc, topic) or await scope.declared_partition(svc, topic)):
        raise errors.NotFound(f"Topic {topic.full_name} not found")
    loaded = await scope.stored(s, topic, "Replicated subscriptions on")
    subs = loaded.subscriptions
    sub = subs.subscription(name) if isinstance(subs, TopicSubscriptionsImpl) else None
    if sub is None:
        raise errors.NotFound(f"Subscription {name} not found for topic {topic.full_name}")
    return loaded, sub


async def replicated_status(s: Scope, topic: TopicName, name: str) -> dict[str, bool]:
    """Whether subscription ``name`` is replicated (docs/geo-replication.md), by topic (each
    partition of a partitioned topic), as Pulsar answers."""
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> dict[str, bool]:
            return await replicated_status(s, part, name)

        out: dict[str, bool] = {}
        for found in await fanout.each(s, topic, n, here, method="GET", suffix=_status_path(name)):
            out.update(found)
        return out
    _, sub = await _subscription(s, topic, name)
    return {topic.full_name: sub.replicated}


async def set_replicated(s: Scope, topic: TopicName, name: str, *, enabled: bool) -> None:
    """Make subscription ``name`` replicated, or not (on each partition of a partitioned
    topic), as a consumer's ``replicate_subscription_state`` does."""
    if not topic.is_persistent:  # Pulsar's answer, word for word
        raise errors.NotAllowed(
            "Cannot enable/disable replicated subscriptions on non-persistent topics"
        )
    n = await fanout.partition_count(s, topic)
    if n is not None:

        async def here(part: TopicName) -> None:
            await set_replicated(s, part, name, enabled=enabled)

        await fanout.each(s, topic, n, here, method="POST", suffix=_status_path(name), body=enabled)
        return
    loaded, sub = await _subscription(s, topic, name)
    await sub.set_replicated(enabled)
    if enabled and loaded.replicated_subscriptions is not None:
        loaded.replicated_subscriptions.ensure_running()
