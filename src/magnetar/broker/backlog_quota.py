"""Backlog quotas: what Apache Pulsar's BacklogQuotaManager does, for Magnetar's topics.

Why this module exists: a subscription nobody reads must not fill the bookies' disks. A
topic's *backlog* is what its slowest durable subscription has not acknowledged (the broker's
own cursors -- deduplication, compaction -- do not count). Two quotas bound it:

* ``destination_storage``: the backlog's size, exceeded at ``limitSize`` bytes or more (-1:
  no limit), estimated as :meth:`PersistentTopic.backlog_size
  <magnetar.broker.topic.PersistentTopic.backlog_size>` estimates it, as Pulsar does;
* ``message_age``: the age of the oldest unacknowledged message (its publish time), exceeded
  when older than ``limitTime`` seconds (0 or less: no limit).

Each quota comes from the topic's own ``backLogQuotaMap`` (``topicPolicies
set-backlog-quota``), else the namespace's ``backlog_quota_map`` (``namespaces
set-backlog-quota``), else the broker's defaults (``backlogQuotaDefaultLimitGB`` or
``backlogQuotaDefaultLimitBytes``, ``backlogQuotaDefaultLimitSecond``,
``backlogQuotaDefaultRetentionPolicy``), type by type. What an exceeded quota does is its
``policy``:

* ``producer_request_hold`` and ``producer_exception``: no producer can be created on the
  topic (ServerError ``ProducerBlockedQuotaExceededError``, on which the official clients keep
  retrying, or ``ProducerBlockedQuotaExceededException``, which fails their sends); checked at
  every producer creation. The periodic check disconnects the producers already attached, so
  they meet the refusal when they reconnect. Nothing already receipted is touched.
* ``consumer_backlog_eviction``: the periodic check moves the slowest subscriptions on --
  for size, as Pulsar's ``dropBacklogForSizeLimit``: entries skipped on the slowest cursor in
  proportion to the excess until the backlog is under 90 % of the limit; for age, every
  message older than the limit acknowledged (the message-TTL expiry of
  :func:`magnetar.broker.enforcement.expire`). Producers carry on.

The periodic check is one step of the policy enforcer (:mod:`magnetar.broker.enforcement`),
every ``backlogQuotaCheckIntervalInSeconds`` per topic while ``backlogQuotaCheckEnabled``.
docs/admin.md ("Backlog quotas") shows it from the user's side.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.contracts import BrokerError
from magnetar.managed_ledger.api import ManagedCursor
from magnetar.wire import pb

log = logging.getLogger(__name__)

SIZE = "destination_storage"
TIME = "message_age"
HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
POLICIES = (HOLD, EXCEPTION, EVICTION)

EVICTION_TARGET = 0.9
"""Eviction brings a size backlog down to this share of the limit (Pulsar's factor)."""

NAMESPACE_FIELD = "backlog_quota_map"
TOPIC_FIELD = "backLogQuotaMap"
"""Where the namespace's and the topic's quotas are stored (Pulsar's field names)."""


@dataclass(frozen=True)
class Quota:
    limit: int
    """Bytes (``destination_storage``) or seconds (``message_age``)."""
    policy: str


@dataclass(frozen=True)
class Quotas:
    """A topic's effective quotas (None: that type is not limited)."""

    size: Quota | None = None
    time: Quota | None = None

    @property
    def any(self) -> bool:
        return self.size is not None or self.time is not None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def default_limit_bytes(config: BrokerConfig) -> int:
    """``backlogQuotaDefaultLimitGB`` in bytes when positive, else
    ``backlogQuotaDefaultLimitBytes`` (Pulsar's rule; both -1 by default: no limit)."""
    if config.backlog_quota_default_limit_gb > 0:
        return int(config.backlog_quota_default_limit_gb * 1024**3)
    return config.backlog_quota_default_limit_bytes


def _chosen(effective: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for field in (TOPIC_FIELD, NAMESPACE_FIELD):
        found = effective.get(field)
        if isinstance(found, dict) and isinstance(found.get(kind), dict):
            quota: dict[str, Any] = found[kind]
            return quota
    return None


def default_quota(config: BrokerConfig) -> dict[str, Any]:
    """The broker's default quota, in Pulsar's JSON (one object for both types)."""
    size = default_limit_bytes(config)
    return {
        "limit": size,
        "limitSize": size,
        "limitTime": config.backlog_quota_default_limit_s,
        "policy": config.backlog_quota_default_policy,
    }


def applied(effective: dict[str, Any], config: BrokerConfig) -> dict[str, dict[str, Any]]:
    """The quota in force of each type, as Pulsar's ``backlogQuotaMap?applied=true`` answers:
    the topic's, else the namespace's, else the broker's default."""
    return {kind: dict(_chosen(effective, kind) or default_quota(config)) for kind in (SIZE, TIME)}


def resolve(effective: dict[str, Any], config: BrokerConfig) -> Quotas:
    """The quotas of a topic whose effective policies (namespace's with the topic's record
    over them, :func:`magnetar.broker.policies.effective_policies`) are ``effective``."""
    size = _chosen(effective, SIZE)
    age = _chosen(effective, TIME)
    default_policy = config.backlog_quota_default_policy
    size_limit = _int((size or {}).get("limitSize"), -1) if size else default_limit_bytes(config)
    time_limit = _int(age.get("limitTime"), -1) if age else config.backlog_quota_default_limit_s
    return Quotas(
        size=Quota(size_limit, (size or {}).get("policy", default_policy))
        if size_limit >= 0
        else None,
        time=Quota(time_limit, (age or {}).get("policy", default_policy))
        if time_limit > 0
        else None,
    )


def counted_cursors(topic: Any) -> list[ManagedCursor]:
    """The durable subscriptions' cursors (not the broker's own, whose names start with
    ``__`` -- the same set the backlog size is estimated over)."""
    return [
        c
        for name, c in topic.managed_ledger.cursors.items()
        if c.durable and not name.startswith("__")
    ]


async def oldest_backlog(topic: Any) -> tuple[int | None, str | None]:
    """Publish time (ms) of the oldest message a durable subscription has not acknowledged,
    and that subscription's name ((None, None): no backlog)."""
    cursors = [c for c in counted_cursors(topic) if c.backlog() > 0]
    if not cursors:
        return None, None
    ml = topic.managed_ledger
    slowest = min(cursors, key=lambda c: c.mark_delete_position)
    first = ml.next_position(slowest.mark_delete_position)
    if first > ml.last_confirmed_entry:
        return None, None
    if first < ml.first_position:
        first = ml.first_position
    meta = await topic.subscriptions.entry_meta(first)
    return int(meta.publish_time), slowest.name


def size_exceeded(topic: Any, quota: Quota | None) -> bool:
    return quota is not None and topic.backlog_size() >= quota.limit


async def time_exceeded(topic: Any, quota: Quota | None, *, now_ms: int | None = None) -> bool:
    if quota is None:
        return False
    oldest, _ = await oldest_backlog(topic)
    if oldest is None:
        return False
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return now_ms - oldest > quota.limit * 1000


def refusal(quota: Quota) -> int:
    return (
        pb.ProducerBlockedQuotaExceededError
        if quota.policy == HOLD
        else pb.ProducerBlockedQuotaExceededException
    )


async def check_producer(topic: Any, quotas: Quotas) -> None:
    """Raise BrokerError (ProducerBlockedQuotaExceeded*) when a quota with a producer
    policy is exceeded (what Pulsar's ``checkBacklogQuotaExceeded`` refuses at producer
    creation)."""
    for kind, quota in ((SIZE, quotas.size), (TIME, quotas.time)):
        if quota is None or quota.policy == EVICTION:
            continue
        exceeded = (
            size_exceeded(topic, quota) if kind == SIZE else await time_exceeded(topic, quota)
        )
        if exceeded:
            raise BrokerError(
                refusal(quota),
                f"Cannot create producer on topic with backlog quota exceeded ({kind}, "
                f"policy {quota.policy})",
            )


async def evict_for_size(topic: Any, quota: Quota) -> int:
    """Skip entries on the slowest subscriptions until the backlog is under
    :data:`EVICTION_TARGET` of the limit; returns the entries skipped."""
    target = EVICTION_TARGET * quota.limit
    skipped = 0
    backlog = topic.backlog_size()
    while backlog > target:
        cursors = counted_cursors(topic)
        if not cursors:
            break
        slowest = min(cursors, key=lambda c: c.mark_delete_position)
        before = slowest.backlog()
        count = int((backlog - target) / backlog * before)
        if count <= 0:
            break
        await slowest.skip(count)
        moved = before - slowest.backlog()
        if moved <= 0:
            break
        skipped += moved
        log.info(
            "%s/%s: backlog quota exceeded: skipped %d entries (consumer_backlog_eviction)",
            topic.name,
            slowest.name,
            moved,
        )
        backlog = topic.backlog_size()
    return skipped
