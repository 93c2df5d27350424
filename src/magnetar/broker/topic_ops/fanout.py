"""Operations asked of a partitioned topic's base name, done partition by partition.

Why this module exists: Pulsar accepts a partitioned topic's base name in most topic calls
(list, create and delete subscriptions, clear a backlog, expire, reset by time, unload,
compaction) and runs them on every partition, each on the broker owning it; the calls that
name one position (skip, reset to a message id, peek, examine, get a message by id,
terminate) answer 405 with Pulsar's reason instead. The typed operations ask
:func:`partition_count` first and, for a partitioned topic, hand each partition to
:func:`each`: a partition this broker owns (or nobody does: this broker takes it, as a
lookup would) runs here, another broker's partition is asked of it through
:class:`~.scope.Peers`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker.topic_ops import errors, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.wire.topics import TopicName


async def partition_count(s: Scope, topic: TopicName) -> int | None:
    """The partitions of ``topic`` when it names a partitioned topic (not one of its
    partitions); None otherwise."""
    if topic.is_partition:
        return None
    found = await scope.partitions(s.service, topic)
    return None if found is None else found[0]


async def refuse(s: Scope, topic: TopicName, reason: str) -> None:
    """NotAllowed (Pulsar's 405 with ``reason``) when ``topic`` is a partitioned topic."""
    if await partition_count(s, topic) is not None:
        raise errors.NotAllowed(reason)


async def each(
    s: Scope,
    topic: TopicName,
    partitions: int,
    here: Callable[[TopicName], Awaitable[Any]],
    *,
    method: str,
    suffix: str,
    body: Any = None,
) -> list[Any]:
    """Run an operation on each partition of ``topic``, in partition order: ``here(part)``
    on this broker, or ``method`` ``<partition's admin path><suffix>`` (JSON ``body``) on
    the broker owning the partition. The answers, one per partition (a peer's decoded
    JSON); the first refusal stops the loop and is raised."""
    return [
        await each_one(s, topic.partition(i), here, method=method, suffix=suffix, body=body)
        for i in range(partitions)
    ]


async def each_one(
    s: Scope,
    part: TopicName,
    here: Callable[[TopicName], Awaitable[Any]],
    *,
    method: str,
    suffix: str,
    body: Any = None,
) -> Any:
    """One partition's share of :func:`each`: here, or on the broker owning it."""
    owner = await scope.owner_elsewhere(s.service, part)
    if owner is None:
        return await here(part)
    return await s.peers.topic_call(owner, method, part, suffix, body=body)
