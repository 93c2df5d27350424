"""Topic compaction, administered: start one and read its status (Pulsar's
``triggerCompaction`` and ``compactionStatus``).

Why this module exists: the admin routes (``broker/admin/topic_routes/compaction.py``) stay HTTP
only; the compaction itself is ``broker/compaction/``. A partitioned topic is compacted
partition by partition, each on the broker owning it (asked through :class:`~.scope.Peers`).
"""

from __future__ import annotations

from typing import Any

from magnetar.broker.compaction.service import AlreadyRunningError
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_ops import errors, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.wire.topics import TopicName

OPERATION = "Compaction of"
"""How a refusal names the operation (Pulsar's wording for a non-persistent topic)."""


def _compaction(loaded: PersistentTopic) -> Any:
    if loaded.compaction is None:
        raise errors.NotAllowed(f"{loaded.full_name}: compaction is not available")
    return loaded.compaction


async def trigger(s: Scope, topic: TopicName) -> None:
    """Start a compaction of the topic; :class:`~.errors.Conflict` while one runs. A
    partitioned topic: one per partition, a partition already compacting left to finish."""
    scope.needs_storage(topic, OPERATION)
    svc = s.service
    partitions = None if topic.is_partition else await svc.policies.partitions(topic)
    if partitions:
        for i in range(partitions):
            await _trigger_partition(s, topic.partition(i))
        return
    loaded = await scope.stored(s, topic, OPERATION)
    try:
        _compaction(loaded).trigger()
    except AlreadyRunningError:
        raise errors.Conflict("Compaction already in progress") from None


async def _trigger_partition(s: Scope, part: TopicName) -> None:
    owner = await scope.owner_elsewhere(s.service, part)
    if owner is not None:
        await s.peers.compact(owner, part)
        return
    loaded = await s.service.get_topic(part, create=False)
    if isinstance(loaded, PersistentTopic) and loaded.compaction is not None:
        try:
            loaded.compaction.trigger()
        except AlreadyRunningError:
            pass  # that partition is being compacted already


async def status(s: Scope, topic: TopicName) -> dict[str, Any]:
    """The last compaction's LongRunningProcessStatus (``status``: NOT_RUN, RUNNING,
    SUCCESS or ERROR; ``lastError``)."""
    loaded = await scope.stored(s, topic, OPERATION)
    answer: dict[str, Any] = _compaction(loaded).status_json()
    return answer


def internal_stats(loaded: PersistentTopic) -> dict[str, Any]:
    """The managed ledger's internal stats with Pulsar's ``compactedLedger``."""
    ml: Any = loaded.managed_ledger
    out: dict[str, Any] = ml.internal_stats()
    if loaded.compaction is not None:
        out["compactedLedger"] = loaded.compaction.view.internal_stats()
    return out
