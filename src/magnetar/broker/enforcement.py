"""Namespace and topic policies that act on data: retention, message TTL, deduplication,
compaction threshold.

Why this module exists: policies that act on stored data must be enforced by every broker
that serves topics, whether or not it serves the admin API. :class:`PolicyEnforcer` is one
of the broker service's periodic loops (started with it, stopped with it); it visits the
loaded topics every second:

* **retention** (``retention_policies``, the topic's own overriding the namespace's) becomes the
  managed ledger's ``retention_time_s`` / ``retention_bytes`` (the broker core applies it when
  a topic's managed ledger opens; here changes reach topics already open). The managed ledger
  then keeps acknowledged ledgers within that window and trims the rest.
* **message TTL** (``message_ttl_in_seconds``) -- Pulsar's ``PersistentMessageExpiryMonitor``:
  on every durable subscription, the entries published before ``now - TTL`` (publish time from
  each entry's MessageMetadata, found by binary search over the stored entries, as Pulsar's
  ``findNewestMatching``) are acknowledged by moving the mark-delete position past the last of
  them. Unacknowledged messages expire; acknowledged and younger ones are untouched. A topic is
  checked every ``TTL / 2`` (between 1 s and 60 s).

* **offload** (the namespace's ``offload_threshold``, ``offload_threshold_in_seconds``,
  ``offload_deletion_lag_ms`` over the broker's managedLedgerOffload* defaults; a topic's
  ``offloadPolicies``, ``.../{topic}/offloadPolicies``, over both) becomes
  the managed ledger's offload config; then the managed ledger is asked to start the
  offload its thresholds select (a ledger that rolled over since the last tick is offloaded
  within a second; one offload at a time, and a failed one is retried after a back-off;
  docs/offload.md).

* **compaction threshold** (``compaction_threshold``, topic over namespace over the broker's
  ``compaction_threshold_bytes``): a compaction
  starts when the ``__compaction`` cursor's backlog is over that many bytes
  (:mod:`magnetar.broker.compaction.service`).
* **producer and consumer limits** (``max_producers_per_topic``,
  ``max_consumers_per_topic``: the topic's ``maxProducers`` / ``maxConsumers`` over the
  namespace's ``maxProducersPerTopic`` / ``maxConsumersPerTopic``) are handed to the topic,
  which refuses a producer or consumer over them (ProducerBusy / ConsumerBusy, Pulsar's
  reasons); they are read when the topic loads too.
* **deduplication** (``deduplicationEnabled``, topic over namespace over the broker default)
  turns the topic's :class:`~magnetar.broker.dedup.Deduplication` on or off on loaded topics;
  producers disconnected longer than the inactivity timeout are forgotten here too.
* **replication** (``replication_clusters``): the topic's replicators follow the clusters
  listed besides the local one (:mod:`magnetar.broker.replication`).
* **backlog quotas** (``backlog_quota_map``, the topic's ``backLogQuotaMap`` over it, the
  broker's defaults under both) are handed to the topic, which refuses producers over a quota
  with a producer policy; every ``backlogQuotaCheckIntervalInSeconds`` a topic over a quota
  has its producers disconnected or its slowest subscriptions moved on
  (:mod:`magnetar.broker.backlog_quota`).

Each topic's effective policies are re-read every few seconds, and at once after a change
made through this broker (:meth:`BrokerService.policies_changed
<magnetar.broker.service.BrokerService.policies_changed>` counts them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.broker import backlog_quota, dedup, replication
from magnetar.broker import policies as broker_policies
from magnetar.broker.compaction import view as compaction_view
from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic import PersistentTopic, Topic
from magnetar.managed_ledger.api import ManagedCursor, ManagedLedgerConfig, Position
from magnetar.metadata import api as md

log = logging.getLogger(__name__)

TICK_S = 1.0
REFRESH_S = 5.0
"""How old a topic's cached effective policies may get (changes made on other brokers)."""
MIN_CHECK_S, MAX_CHECK_S = 1.0, 60.0


class EnforcedService(Protocol):
    """What the enforcer needs from the broker service
    (:class:`magnetar.broker.service.BrokerService`, which imports this module)."""

    config: BrokerConfig
    store: md.MetadataStore
    policies: broker_policies.PolicyCache
    topics: dict[str, Topic]
    policy_generation: int
    """Bumped by every policy change made through this broker."""


_SYSTEM_CURSORS = frozenset({dedup.CURSOR, compaction_view.CURSOR})
"""The broker's own cursors: TTL never moves them."""


def previous_position(ml: Any, position: Position) -> Position | None:
    """The stored entry just before ``position`` (None when there is none)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    earlier = [i for i in ml.ledgers() if i.ledger_id < position.ledger_id and i.entries > 0]
    if not earlier:
        return None
    last = earlier[-1]
    return Position(last.ledger_id, last.entries - 1)


async def expire(
    topic: PersistentTopic, *, cutoff_ms: int, cursors: Iterable[ManagedCursor] | None = None
) -> int:
    """Acknowledge, on ``cursors`` (default: every durable subscription with a backlog), the
    entries published before ``cutoff_ms``; returns how many cursors moved."""
    subs: Any = topic.subscriptions
    finder = getattr(subs, "position_for_publish_time", None)
    if finder is None:  # a subscriptions implementation without publish-time search
        return 0
    ml: Any = topic.managed_ledger
    chosen = [
        c for c in (ml.cursors.values() if cursors is None else cursors)
        if c.durable and c.backlog() > 0 and c.name not in _SYSTEM_CURSORS
    ]  # fmt: skip
    if not chosen:
        return 0
    last_old = previous_position(ml, await finder(cutoff_ms))
    if last_old is None:
        return 0
    moved = 0
    find_sub = getattr(subs, "subscription", None)
    for cursor in chosen:
        if last_old > cursor.mark_delete_position:
            before = cursor.backlog()
            await cursor.mark_delete(last_old)
            moved += 1
            sub = find_sub(cursor.name) if find_sub is not None else None
            if sub is not None:
                # Pulsar's msgRateExpired / totalMsgExpired count entries, as its backlog does
                sub.expired(max(0, before - cursor.backlog()))
            log.info("%s/%s: expired messages up to %s (TTL)", topic.name, cursor.name, last_old)
    return moved


async def check_backlog_quotas(
    topic: PersistentTopic, quotas: backlog_quota.Quotas, *, now_ms: int | None = None
) -> None:
    """Pulsar's periodic backlog quota check of one topic: for each exceeded quota, evict
    (``consumer_backlog_eviction``) or disconnect the producers (the others), who are then
    refused when they come back (:mod:`magnetar.broker.backlog_quota`)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    for kind, quota in (("size", quotas.size), ("time", quotas.time)):
        if quota is None:
            continue
        if kind == "size":
            exceeded = backlog_quota.size_exceeded(topic, quota)
        else:
            exceeded = await backlog_quota.time_exceeded(topic, quota, now_ms=now_ms)
        if not exceeded:
            continue
        log.info("%s: backlog quota (%s) exceeded; applying %s", topic.name, kind, quota.policy)
        if quota.policy == backlog_quota.EVICTION:
            if kind == "size":
                await backlog_quota.evict_for_size(topic, quota)
            else:
                cursors = backlog_quota.counted_cursors(topic)
                await expire(topic, cutoff_ms=now_ms - quota.limit * 1000, cursors=cursors)
            topic.quota_evictions[kind] += 1
        else:
            for producer in list(topic.producers.values()):
                producer.disconnect(notify=True)


def ttl_check_interval(ttl_s: int) -> float:
    return min(max(ttl_s / 2, MIN_CHECK_S), MAX_CHECK_S)


@dataclass
class _TopicState:
    policies: dict[str, Any]
    read_at: float
    generation: int
    next_expiry: float = 0.0
    next_quota_check: float = 0.0


class PolicyEnforcer:
    def __init__(self, service: EnforcedService) -> None:
        self.service = service
        self._state: dict[str, _TopicState] = {}

    async def _policies(self, topic: PersistentTopic, now: float) -> _TopicState:
        state = self._state.get(topic.full_name)
        if (
            state is None
            or now - state.read_at > REFRESH_S
            or state.generation != self.service.policy_generation
        ):
            generation = self.service.policy_generation
            svc = self.service
            found = await broker_policies.effective_policies(svc.store, svc.policies, topic.name)
            next_expiry = state.next_expiry if state is not None else 0.0
            next_quota = state.next_quota_check if state is not None else 0.0
            state = _TopicState(found, now, generation, next_expiry, next_quota)
            self._state[topic.full_name] = state
        return state

    async def enforce(self, topic: PersistentTopic, *, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        state = await self._policies(topic, now)
        self.apply_retention(topic, state.policies.get("retention_policies"))
        topic.apply_limits(*broker_policies.limits(state.policies))
        self.apply_offload(topic, state.policies)
        if topic.dedup is not None:
            await broker_policies.apply_deduplication(
                topic.dedup,
                state.policies,
                default=self.service.config.deduplication_enabled,
                local_cluster=self.service.config.cluster_name,
            )
            topic.dedup.purge_inactive()
        if topic.replication is not None:
            await topic.replication.update(
                replication.remote_clusters(state.policies, self.service.config.cluster_name)
            )
        threshold = state.policies.get("compaction_threshold")
        if not isinstance(threshold, int) or isinstance(threshold, bool):
            threshold = self.service.config.compaction_threshold_bytes
        if topic.compaction is not None and threshold > 0:
            await topic.compaction.ensure_cursor()
            topic.compaction.check_threshold(threshold)
        config = self.service.config
        quotas = backlog_quota.resolve(state.policies, config)
        topic.backlog_quotas = quotas
        if config.backlog_quota_check_enabled and now >= state.next_quota_check:
            state.next_quota_check = now + config.backlog_quota_check_interval_s
            topic.oldest_backlog = await backlog_quota.oldest_backlog(topic)
            if quotas.any:
                await check_backlog_quotas(topic, quotas)
        ttl = state.policies.get("message_ttl_in_seconds")
        if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
            if now >= state.next_expiry:
                state.next_expiry = now + ttl_check_interval(ttl)
                await expire(topic, cutoff_ms=int((time.time() - ttl) * 1000))

    def apply_offload(self, topic: PersistentTopic, effective: dict[str, Any]) -> None:
        ml: Any = topic.managed_ledger
        config = getattr(ml, "config", None)
        if not isinstance(config, ManagedLedgerConfig) or getattr(ml, "offload", None) is None:
            return
        wanted = broker_policies.offload_config(self.service.config.managed_ledger, effective)
        keys = ("offload_threshold_bytes", "offload_threshold_s", "offload_deletion_lag_ms")
        if any(getattr(wanted, k) != getattr(config, k) for k in keys):
            ml.update_config(dataclasses.replace(config, **{k: getattr(wanted, k) for k in keys}))
            log.info(
                "%s: offload threshold %s bytes / %s s, deletion lag %s ms",
                topic.name,
                wanted.offload_threshold_bytes,
                wanted.offload_threshold_s,
                wanted.offload_deletion_lag_ms,
            )
        ml.offload.maybe()

    def apply_retention(self, topic: PersistentTopic, retention: Any) -> None:
        ml: Any = topic.managed_ledger
        config = getattr(ml, "config", None)
        if not isinstance(config, ManagedLedgerConfig):
            return
        wanted = broker_policies.retention_config(
            self.service.config.managed_ledger, retention if isinstance(retention, dict) else None
        )
        current = (config.retention_time_s, config.retention_bytes)
        if (wanted.retention_time_s, wanted.retention_bytes) != current:
            ml.update_config(dataclasses.replace(
                config,
                retention_time_s=wanted.retention_time_s,
                retention_bytes=wanted.retention_bytes,
            ))  # fmt: skip
            log.info(
                "%s: retention now %ss / %s bytes",
                topic.name,
                wanted.retention_time_s,
                wanted.retention_bytes,
            )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            loaded = dict(self.service.topics)
            for name in set(self._state) - set(loaded):
                del self._state[name]
            for topic in loaded.values():
                if not isinstance(topic, PersistentTopic):
                    continue  # retention and TTL apply to stored messages only
                try:
                    await self.enforce(topic)
                except Exception as err:  # one topic's trouble must not stop the others
                    log.warning("%s: policy enforcement: %s", topic.name, err)
