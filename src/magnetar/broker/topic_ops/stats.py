"""Topic stats, internal stats and partitioned stats in Pulsar's JSON shapes.

Why this module exists: the stats of one topic come from the topic itself, the internal stats
from its managed ledger (completed with the fields Pulsar's scripts read), and the stats of a
partitioned topic are summed over partitions that several brokers may own.
"""

from __future__ import annotations

import datetime
from typing import Any

from magnetar.broker.service import BrokerService
from magnetar.broker.topic import NonPersistentTopic, PersistentTopic
from magnetar.broker.topic_ops import compaction, errors, fanout, scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.ledger import underreplication
from magnetar.metadata import api
from magnetar.wire.topics import TopicName


async def stats(s: Scope, topic: TopicName) -> dict[str, Any]:
    """Topic stats (rates, counters, storage, publishers, subscriptions)."""
    return (await scope.loaded(s, topic)).stats()


async def internal_stats(s: Scope, topic: TopicName) -> dict[str, Any]:
    """The managed ledger's internal stats (ledgers, cursors)."""
    loaded = await scope.loaded(s, topic)
    if isinstance(loaded, NonPersistentTopic):
        return non_persistent_internal_stats(loaded)
    assert isinstance(loaded, PersistentTopic)
    out = complete_internal_stats(compaction.internal_stats(loaded))
    await mark_under_replicated(s.service.store, out)
    return out


async def mark_under_replicated(store: api.MetadataStore, internal: dict[str, Any]) -> None:
    """Set each ledger's (and the compacted ledger's) ``underReplicated`` from the auditor's
    marks (magnetar.ledger.underreplication): true while a ledger waits for re-replication."""
    marked = {m.ledger_id for m in await underreplication.marks(store)}
    for ledger in internal.get("ledgers", []):
        ledger["underReplicated"] = int(ledger.get("ledgerId", -1)) in marked
    compacted = internal.get("compactedLedger")
    if isinstance(compacted, dict):
        compacted["underReplicated"] = int(compacted.get("ledgerId", -1)) in marked


async def backlog(s: Scope, topic: TopicName) -> dict[str, Any]:
    """Pulsar's PersistentOfflineTopicStats (``GET .../backlog``): the stored entries, the
    data ledgers and each durable cursor's backlog -- the subscriptions' and the
    replicators' (``pulsar.repl.<cluster>``) alike."""
    loaded = await scope.loaded(s, topic)
    if not isinstance(loaded, PersistentTopic):
        raise errors.NotAllowed("backlog is only available for persistent topics")
    ml = loaded.managed_ledger
    cursors = {name: c for name, c in ml.cursors.items() if c.durable}
    return {
        "storageSize": ml.total_size,
        "totalMessages": ml.number_of_entries,
        "messageBacklog": max((c.backlog() for c in cursors.values()), default=0),
        "brokerName": s.service.config.broker_id,
        "topicName": topic.full_name,
        "dataLedgerDetails": [
            {
                "entries": info.entries,
                "ledgerId": info.ledger_id,
                "size": info.size,
                "timestamp": info.timestamp_ms,
            }
            for info in ml.ledgers()
        ],
        "cursorDetails": {
            name: {"cursorBacklog": c.backlog(), "cursorLedgerId": c.stats().cursor_ledger_id}
            for name, c in sorted(cursors.items())
        },
        "statGeneratedAt": datetime.datetime.now(datetime.UTC).isoformat(),
    }


_EMPTY_CURSOR: dict[str, Any] = {
    "markDeletePosition": None, "readPosition": None, "waitingReadOp": False,
    "pendingReadOps": 0, "messagesConsumedCounter": 0, "cursorLedger": 0,
    "cursorLedgerLastEntry": 0, "individuallyDeletedMessages": None,
    "lastLedgerSwitchTimestamp": None, "state": None, "active": False,
    "numberOfEntriesSinceFirstNotAckedMessage": 0, "totalNonContiguousDeletedMessagesRange": 0,
    "subscriptionHavePendingRead": False, "subscriptionHavePendingReplayRead": False,
    "properties": {},
}  # fmt: skip
"""A CursorStats as Pulsar serialises a fresh one (its non-persistent cursors are fresh)."""


def non_persistent_internal_stats(loaded: NonPersistentTopic) -> dict[str, Any]:
    """What Pulsar answers for a non-persistent topic (a PersistentTopicInternalStats with
    only ``entriesAddedCounter`` and one fresh cursor per subscription set): nothing stored,
    so no ledgers and zero sizes."""
    return {
        "entriesAddedCounter": loaded.entries_in,
        "numberOfEntries": 0,
        "totalSize": 0,
        "currentLedgerEntries": 0,
        "currentLedgerSize": 0,
        "lastLedgerCreatedTimestamp": None,
        "lastLedgerCreationFailureTimestamp": None,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": None,
        "state": None,
        "ledgers": [],
        "cursors": {name: dict(_EMPTY_CURSOR) for name in loaded.subscriptions.names()},
        "schemaLedgers": [],
        "compactedLedger": None,
    }


def complete_internal_stats(internal: dict[str, Any]) -> dict[str, Any]:
    """Fill in the fields of Pulsar's PersistentTopicInternalStats that scripts read and the
    managed ledger does not report (yet): ``lastLedgerCreatedTimestamp`` (ISO-8601, from the
    newest ledger's timestamp when known) and each ledger's ``underReplicated`` (false here;
    :func:`mark_under_replicated` sets the real value)."""
    out = dict(internal)
    ledgers = [dict(ledger) for ledger in out.get("ledgers", [])]
    for ledger in ledgers:
        ledger.setdefault("underReplicated", False)
    out["ledgers"] = ledgers
    if "lastLedgerCreatedTimestamp" not in out:
        newest = max((int(ledger.get("timestamp") or 0) for ledger in ledgers), default=0)
        out["lastLedgerCreatedTimestamp"] = (
            datetime.datetime.fromtimestamp(newest / 1000, datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
            if newest > 0
            else ""
        )
    return out


_SUMMED = (
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
    "bytesInCounter", "msgOutCounter", "bytesOutCounter", "storageSize", "backlogSize",
    "offloadedStorageSize",
)  # fmt: skip
_SUB_SUMMED = (
    "msgBacklog", "msgRateOut", "msgThroughputOut", "unackedMessages", "msgOutCounter",
    "bytesOutCounter", "backlogSize",
)  # fmt: skip


def aggregate(per_partition: dict[str, dict[str, Any]], partitions: int) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats from the stats of each partition."""
    parts = per_partition.values()
    out: dict[str, Any] = {k: sum(p.get(k, 0) or 0 for p in parts) for k in _SUMMED}
    out["metadata"] = {"partitions": partitions}
    out["publishers"] = [pub for p in parts for pub in p.get("publishers", [])]
    subs: dict[str, dict[str, Any]] = {}
    for p in parts:
        for name, sub in p.get("subscriptions", {}).items():
            agg = subs.setdefault(
                name, {**dict.fromkeys(_SUB_SUMMED, 0), "type": sub.get("type"), "consumers": []}
            )
            for k in _SUB_SUMMED:
                agg[k] += sub.get(k, 0) or 0
            agg["consumers"] += sub.get("consumers", [])
    out["subscriptions"] = subs
    out["replication"] = {}
    out["deduplicationStatus"] = next(
        (p["deduplicationStatus"] for p in parts if "deduplicationStatus" in p), "Disabled"
    )
    return out


async def partition_stats(s: Scope, parts: list[TopicName]) -> dict[str, dict[str, Any]]:
    """Stats of the existing partitions, asked of their owners (loaded here when unowned)."""
    svc: BrokerService = s.service
    per: dict[str, dict[str, Any]] = {}
    for part in parts:
        if part.full_name in svc.topics:
            per[part.full_name] = svc.topics[part.full_name].stats()
            continue
        if part.is_persistent and not await scope.exists(svc, part):
            continue
        owner = await scope.owner_elsewhere(svc, part)
        if owner is None:
            if part.is_persistent:
                per[part.full_name] = (await svc.get_topic(part, create=False)).stats()
            continue  # a non-persistent partition nobody serves: it does not exist now
        try:
            per[part.full_name] = await s.peers.stats(owner, part)
        except errors.PeerRefused as err:
            if err.status == 404 and not part.is_persistent:
                continue  # not loaded by its owner either
            raise
    return per


async def partitioned_stats(
    s: Scope, topic: TopicName, *, per_partition: bool = True
) -> dict[str, Any]:
    """Stats summed over the partitions (``per_partition``: each partition's too, under
    ``partitions``)."""
    found = await scope.partitions(s.service, topic)
    if found is None:
        raise errors.NotFound(f"partitioned topic {topic.full_name} does not exist")
    per = await partition_stats(s, [topic.partition(i) for i in range(found[0])])
    out = aggregate(per, found[0])
    if per_partition:
        out["partitions"] = per
    return out


async def partitioned_internal_stats(s: Scope, topic: TopicName) -> dict[str, Any]:
    """Pulsar's PartitionedTopicInternalStats: the metadata and each partition's internal
    stats, by partition name, each asked of the partition's owner."""
    found = await scope.partitions(s.service, topic)
    if found is None:
        raise errors.NotFound(f"partitioned topic {topic.full_name} does not exist")

    async def here(part: TopicName) -> dict[str, Any]:
        return await internal_stats(s, part)

    parts = await fanout.each(s, topic, found[0], here, method="GET", suffix="/internalStats")
    return {
        "metadata": {"partitions": found[0], "deleted": False},
        "partitions": {topic.partition(i).full_name: p for i, p in enumerate(parts)},
    }


def busy(topic_stats: dict[str, Any]) -> bool:
    """Whether stats show producers or consumers attached."""
    return bool(topic_stats["publishers"]) or any(
        sub.get("consumers") for sub in topic_stats["subscriptions"].values()
    )
