"""Partitioned topics: their record in the metadata store (create, grow, read, delete).

Why this module exists: a partitioned topic is a record holding its partition count
(``docs/metadata.md``); its partitions are ordinary topics, which several brokers may own.
Changes are compare-and-set on the record, so concurrent admins cannot lose an update.
"""

from __future__ import annotations

import json

from magnetar.broker import policies
from magnetar.broker.topic_ops import errors, scope, stats, topics
from magnetar.broker.topic_ops.scope import Scope
from magnetar.metadata import api
from magnetar.wire.topics import PARTITION_SUFFIX, TopicDomain, TopicName


async def list_partitioned(s: Scope, *, domain: TopicDomain, tenant: str, ns: str) -> list[str]:
    """The partitioned topics of a namespace (full names, sorted)."""
    tenant, ns = await scope.namespace(s.service, tenant, ns)
    found = await policies.partitioned_topics(s.service.store, tenant, ns, domain.value)
    return sorted(f"{domain.value}://{tenant}/{ns}/{t}" for t in found)


def _record(partitions: int) -> bytes:
    return json.dumps({"format": 1, "partitions": partitions}).encode()


async def create(s: Scope, topic: TopicName, partitions: int) -> None:
    """Create a partitioned topic with ``partitions`` partitions (AlreadyExists when it, or
    a non-partitioned topic of that name, exists)."""
    if topic.is_partition or PARTITION_SUFFIX in topic.local_name:
        raise errors.InvalidName("Partitioned Topic Name should not contain '-partition-'")
    svc = s.service
    if await scope.exists(svc, topic):
        raise errors.AlreadyExists(f"a non-partitioned topic {topic.full_name} already exists")
    try:
        await svc.store.put(
            scope.partitioned_key(topic), _record(partitions), expected_version=api.NOT_EXISTS
        )
    except api.BadVersionError:
        raise errors.AlreadyExists(f"partitioned topic {topic.full_name} already exists") from None
    svc.policies_changed()


async def partition_count(s: Scope, topic: TopicName) -> int:
    """The number of partitions; 0 when the topic is not partitioned."""
    found = await scope.partitions(s.service, topic)
    return found[0] if found else 0


async def update(s: Scope, topic: TopicName, partitions: int) -> None:
    """Grow a partitioned topic to ``partitions`` (Invalid when that does not grow it)."""
    svc = s.service
    found = await scope.partitions(svc, topic)
    if found is None:
        raise errors.NotFound(f"partitioned topic {topic.full_name} does not exist")
    current, version = found
    if partitions <= current:
        raise errors.Invalid(
            f"partitions can only grow: {topic.full_name} has {current}, asked {partitions}"
        )
    try:
        await svc.store.put(
            scope.partitioned_key(topic), _record(partitions), expected_version=version
        )
    except api.BadVersionError:
        raise errors.Conflict("partitions changed concurrently; retry") from None
    svc.policies_changed()


async def delete(s: Scope, topic: TopicName, *, force: bool) -> None:
    """Delete a partitioned topic, its partitions (on their owners) and its topic-level
    policies; InUse, before deleting anything, while a partition has producers or
    consumers (unless ``force``)."""
    svc = s.service
    found = await scope.partitions(svc, topic)
    if found is None:
        raise errors.NotFound(f"partitioned topic {topic.full_name} does not exist")
    parts = [topic.partition(i) for i in range(found[0])]
    if not force:  # refuse before deleting anything
        for part_stats in (await stats.partition_stats(s, parts)).values():
            if stats.busy(part_stats):
                raise errors.InUse(
                    f"topic {topic.full_name} has active producers or consumers (use force)"
                )
    for part in parts:
        if await scope.exists(svc, part) or await scope.served_elsewhere(svc, part):
            await topics.delete_on_owner(s, part, force=True)
    await svc.store.delete(scope.partitioned_key(topic))
    await topics.delete_policies(svc, topic)
