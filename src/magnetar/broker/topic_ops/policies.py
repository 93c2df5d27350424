"""Topic-level policies: values of a topic (or partitioned topic) that override its
namespace's (``docs/metadata.md``: one JSON record per topic).

Why this module exists: reading and changing one field of that record by compare-and-set,
for the admin API, with the broker's policy cache dropped after a change. A partition's
policies are its partitioned topic's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from magnetar.broker.topic_ops import errors, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.metadata import api, keys
from magnetar.wire.topics import TopicName

FIELDS = (
    "message_ttl_in_seconds",
    "retention_policies",
    "deduplicationEnabled",
    "compaction_threshold",
    "max_producers_per_topic",
    "max_consumers_per_topic",
    "offloadPolicies",
    "replication_clusters",
    "backLogQuotaMap",
)
"""The fields a topic may set, named as the namespace's Policies fields they override."""


def _key(topic: TopicName) -> str:
    return keys.topic_policies(topic.tenant, topic.namespace, topic.domain.value, topic.local_name)


async def _owner_of_policies(s: Scope, topic: TopicName) -> TopicName:
    """The topic whose record holds ``topic``'s policies (a partition's: its partitioned
    topic); NotFound when neither exists."""
    svc = s.service
    base = topic.base_name if topic.is_partition else topic
    if await scope.partitions(svc, base) is None and not await scope.exists(svc, topic):
        raise errors.NotFound(f"topic {topic.full_name} does not exist")
    return base


def _check_field(field: str) -> None:
    if field not in FIELDS:
        raise ValueError(f"{field!r} is not a topic policy (one of {', '.join(FIELDS)})")


async def get(s: Scope, topic: TopicName, field: str) -> Any:
    """The topic's own value of ``field`` (None: unset, the namespace's applies)."""
    _check_field(field)
    base = await _owner_of_policies(s, topic)
    record = await s.service.store.get(_key(base))
    data = json.loads(record.value) if record else {}
    return data.get(field)


async def set_(
    s: Scope,
    topic: TopicName,
    field: str,
    value: Any,
    *,
    check: Callable[[Any], Any] | None = None,
) -> None:
    """Set the topic's own ``field`` to ``value``; ``check`` (raising for an illegal value,
    returning the value to store) runs once the topic is known to exist."""
    _check_field(field)
    base = await _owner_of_policies(s, topic)
    if check is not None:
        value = check(value)
    await _change(s, base, lambda d: d.__setitem__(field, value))


async def update(s: Scope, topic: TopicName, field: str, change: Callable[[Any], Any]) -> None:
    """Replace the topic's own ``field`` with ``change(current)`` (current: None when unset;
    a result of None unsets it), by compare-and-set."""
    _check_field(field)
    base = await _owner_of_policies(s, topic)

    def apply(data: dict[str, Any]) -> None:
        value = change(data.get(field))
        if value is None:
            data.pop(field, None)
        else:
            data[field] = value

    await _change(s, base, apply)


async def remove(s: Scope, topic: TopicName, field: str) -> None:
    """Unset the topic's own ``field`` (the namespace's applies again)."""
    _check_field(field)
    base = await _owner_of_policies(s, topic)
    await _change(s, base, lambda d: d.pop(field, None))


async def _change(s: Scope, topic: TopicName, change: Callable[[dict[str, Any]], None]) -> None:
    svc = s.service
    key = _key(topic)
    for _ in range(10):
        record = await svc.store.get(key)
        data = json.loads(record.value) if record else {}
        change(data)
        try:
            await svc.store.put(
                key,
                json.dumps(data).encode(),
                expected_version=record.version if record else api.NOT_EXISTS,
            )
        except api.BadVersionError:
            continue
        svc.policies_changed()
        return
    raise errors.Conflict("topic policies changed concurrently; retry")
