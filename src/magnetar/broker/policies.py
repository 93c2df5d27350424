"""Cluster, tenant and namespace records and partitioned-topic metadata, as the broker reads
and writes them in the metadata store (docs/metadata.md).

Why a module of its own: the broker needs a few of these records on its hot-ish paths
(lookup, topic creation, PARTITIONED_METADATA) and creates the defaults (tenant ``public``,
namespace ``public/default``) at first start; the admin API (another issue) writes the same
records with the same JSON shapes, which are Pulsar's ``Policies``/``TenantInfo``/
``PartitionedTopicMetadata`` plus a ``format`` field.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from magnetar.broker import replication
from magnetar.broker.contracts import BrokerError
from magnetar.broker.dedup import Deduplication
from magnetar.managed_ledger.api import ManagedLedgerConfig
from magnetar.metadata import api, keys
from magnetar.wire import pb, topics
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

FULL_RANGE = 0x1_0000_0000
"""Bundles split the 32-bit hash space [0, 2**32)."""

CACHE_TTL_S = 2.0
"""How long a broker trusts a namespace's cached policies: a bundle split waits this long
(and a half) before the old layout is given up everywhere."""


def bundle_boundaries(num_bundles: int) -> list[int]:
    """Equal split of the hash space, as Pulsar's ``defaultNumberOfNamespaceBundles``."""
    if num_bundles < 1:
        raise ValueError(f"a namespace needs at least one bundle, got {num_bundles}")
    step = FULL_RANGE // num_bundles
    bounds = [i * step for i in range(num_bundles)]
    bounds.append(FULL_RANGE - 1)
    return bounds


def _hex(value: int) -> str:
    return f"0x{value:08x}"


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    allowed: bool
    partitioned: bool
    default_partitions: int


@dataclass(frozen=True, slots=True)
class NamespacePolicies:
    boundaries: tuple[int, ...]
    """Bundle boundaries: bundle i is [boundaries[i], boundaries[i+1]) (last one closed)."""
    auto_topic_creation: AutoTopicCreation | None
    """The namespace's override, None to use the broker's default."""
    raw: dict[str, Any]

    @classmethod
    def from_json(cls, value: bytes) -> NamespacePolicies:
        data = json.loads(value) if value else {}
        bundles = data.get("bundles") or {}
        bounds = bundles.get("boundaries")
        boundaries = (
            tuple(int(b, 16) if isinstance(b, str) else int(b) for b in bounds)
            if bounds
            else tuple(bundle_boundaries(int(bundles.get("numBundles", 1))))
        )
        override = data.get("autoTopicCreationOverride")
        auto = None
        if isinstance(override, dict) and "allowAutoTopicCreation" in override:
            auto = AutoTopicCreation(
                allowed=bool(override["allowAutoTopicCreation"]),
                partitioned=override.get("topicType") == "partitioned",
                default_partitions=int(override.get("defaultNumPartitions") or 1),
            )
        return cls(boundaries, auto, data)


def default_namespace_policies(num_bundles: int) -> dict[str, Any]:
    bounds = bundle_boundaries(num_bundles)
    return {
        "format": 1,
        "bundles": {"boundaries": [_hex(b) for b in bounds], "numBundles": num_bundles},
        "auth_policies": {},
        "replication_clusters": [],
        "backlog_quota_map": {},
        "deleted": False,
    }


async def _create(store: api.MetadataStore, key: str, value: dict[str, Any]) -> bool:
    try:
        await store.put(key, json.dumps(value).encode(), expected_version=api.NOT_EXISTS)
    except api.BadVersionError:
        return False
    return True


async def ensure_defaults(
    store: api.MetadataStore,
    *,
    cluster: str,
    service_url: str,
    web_service_url: str,
    num_bundles: int,
) -> None:
    """Create the cluster record, tenant ``public`` and namespace ``public/default`` when
    absent (create-only: never overwrites what an admin changed)."""
    await _create(
        store,
        keys.cluster(cluster),
        {
            "format": 1,
            "serviceUrl": web_service_url,
            "serviceUrlTls": "",
            "brokerServiceUrl": service_url,
            "brokerServiceUrlTls": "",
        },
    )
    if await _create(
        store,
        keys.tenant("public"),
        {"format": 1, "adminRoles": [], "allowedClusters": [cluster]},
    ):
        log.info("created tenant public")
    policies = default_namespace_policies(num_bundles)
    policies["replication_clusters"] = [cluster]
    if await _create(store, keys.namespace("public", "default"), policies):
        log.info("created namespace public/default with %d bundles", num_bundles)


async def replace_boundary(
    store: api.MetadataStore, tenant: str, namespace: str, *, old: str, boundary: int
) -> None:
    """Split the bundle ``old`` (its ``0x..._0x...`` range) of a namespace at ``boundary`` in
    the stored policies, by compare-and-swap; ValueError when ``old`` is no longer one of its
    bundles (split or changed meanwhile)."""
    key = keys.namespace(tenant, namespace)
    record = await store.get(key)
    if record is None:
        raise ValueError(f"namespace {tenant}/{namespace} does not exist")
    data = json.loads(record.value) if record.value else {}
    current = NamespacePolicies.from_json(record.value).boundaries
    lower, _, upper = old.partition("_")
    pairs = list(itertools.pairwise(current))
    if (int(lower, 16), int(upper, 16)) not in pairs:
        raise ValueError(f"{old} is not a bundle of {tenant}/{namespace} any more")
    bounds = sorted({*current, boundary})
    data["bundles"] = {"boundaries": [_hex(b) for b in bounds], "numBundles": len(bounds) - 1}
    await store.put(key, json.dumps(data).encode(), expected_version=record.version)


class PolicyCache:
    """Namespace policies and partitioned-topic metadata with a short expiry (they change
    rarely and only through the admin API; lookups and topic creation read them often)."""

    def __init__(self, store: api.MetadataStore) -> None:
        self._store = store
        self._ns: dict[str, tuple[float, NamespacePolicies | None]] = {}
        self._tenants: dict[str, tuple[float, tuple[str, ...] | None]] = {}

    async def tenant_admins(self, tenant: str) -> tuple[str, ...] | None:
        """The tenant's ``adminRoles``, None when the tenant does not exist."""
        now = time.monotonic()
        hit = self._tenants.get(tenant)
        if hit is not None and hit[0] > now:
            return hit[1]
        record = await self._store.get(keys.tenant(tenant))
        roles: tuple[str, ...] | None = None
        if record is not None:
            data = json.loads(record.value) if record.value else {}
            roles = tuple(str(r) for r in data.get("adminRoles") or ())
        self._tenants[tenant] = (now + CACHE_TTL_S, roles)
        return roles

    async def namespace(self, tenant: str, namespace: str) -> NamespacePolicies | None:
        """The namespace's policies, None when the namespace does not exist."""
        key = keys.namespace(tenant, namespace)
        now = time.monotonic()
        hit = self._ns.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        record = await self._store.get(key)
        value = NamespacePolicies.from_json(record.value) if record is not None else None
        self._ns[key] = (now + CACHE_TTL_S, value)
        return value

    def invalidate(self) -> None:
        self._ns.clear()
        self._tenants.clear()

    async def partitions(self, topic: TopicName) -> int | None:
        """Partitions of ``topic``'s base name, None when it is not a partitioned topic."""
        base = topic.base_name
        record = await self._store.get(_partitioned_key(base))
        if record is None:
            return None
        data = json.loads(record.value) if record.value else {}
        return int(data.get("partitions", 0))

    async def create_partitioned(self, topic: TopicName, partitions: int) -> int:
        """Create partitioned-topic metadata (auto-creation); returns the partitions stored
        (another broker's if it won the race)."""
        key = _partitioned_key(topic.base_name)
        if await _create(self._store, key, {"format": 1, "partitions": partitions}):
            log.info("auto-created partitioned topic %s (%d partitions)", topic, partitions)
            return partitions
        stored = await self.partitions(topic)
        return stored if stored is not None else partitions


def _partitioned_key(topic: TopicName) -> str:
    return keys.partitioned_topic(
        topic.tenant,
        topic.namespace,
        topic.domain.value,
        topic.local_name,
    )


async def partitioned_topics(
    store: api.MetadataStore, tenant: str, namespace: str, domain: str = "persistent"
) -> dict[str, int]:
    """Local names -> partitions of the partitioned topics of a namespace in ``domain``."""
    prefix = f"{keys.PARTITIONED_TOPICS}/{keys.segment(tenant)}/{keys.segment(namespace)}/{domain}"
    found: dict[str, int] = {}
    async for record in store.scan_all(prefix):
        name = keys.unsegment(record.key.rsplit("/", 1)[-1])
        try:
            found[name] = int(json.loads(record.value).get("partitions", 0))
        except (ValueError, AttributeError):
            continue
    return found


async def effective_policies(
    store: api.MetadataStore, cache: PolicyCache, topic: TopicName
) -> dict[str, Any]:
    """The namespace's policies with the topic's own (``/admin/topic-policies``, set on its
    base name) overriding them."""
    base = topic.base_name if topic.is_partition else topic
    ns = await cache.namespace(topic.tenant, topic.namespace)
    effective = dict(ns.raw) if ns is not None else {}
    record = await store.get(
        keys.topic_policies(base.tenant, base.namespace, base.domain.value, base.local_name)
    )
    if record is not None and record.value:
        effective.update(json.loads(record.value))
    return effective


async def apply_deduplication(
    dedup: Deduplication, effective: dict[str, Any], *, default: bool, local_cluster: str
) -> None:
    """Turn ``dedup`` on or off per the effective ``deduplicationEnabled`` (topic over
    namespace over the broker's ``deduplication_enabled``); off also deletes a snapshot
    cursor left from when it was on. A topic replicated with other clusters has it on
    whatever the setting: their replicators' resends are dropped by it
    (docs/geo-replication.md)."""
    wanted = effective.get("deduplicationEnabled")
    if not isinstance(wanted, bool):
        wanted = default
    if replication.remote_clusters(effective, local_cluster):
        wanted = True
    if wanted:
        await dedup.enable()
    else:
        await dedup.disable()


def retention_config(
    base: ManagedLedgerConfig, retention: dict[str, Any] | None
) -> ManagedLedgerConfig:
    """``base`` with the retention of a Pulsar ``retention_policies`` record (None: none)."""
    minutes = int((retention or {}).get("retentionTimeInMinutes", 0))
    megabytes = int((retention or {}).get("retentionSizeInMB", 0))
    return dataclasses.replace(
        base,
        retention_time_s=-1.0 if minutes < 0 else minutes * 60.0,
        retention_bytes=-1 if megabytes < 0 else megabytes * 1024 * 1024,
    )


def _int_policy(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def limits(effective: dict[str, Any]) -> tuple[int, int]:
    """The effective ``max_producers_per_topic`` and ``max_consumers_per_topic`` (the
    topic's ``maxProducers`` / ``maxConsumers`` over the namespace's); 0: no limit."""
    return (
        max(_int_policy(effective.get("max_producers_per_topic")) or 0, 0),
        max(_int_policy(effective.get("max_consumers_per_topic")) or 0, 0),
    )


def offload_config(base: ManagedLedgerConfig, effective: dict[str, Any]) -> ManagedLedgerConfig:
    """``base`` (the broker's managedLedgerOffload* defaults) with the offload thresholds
    and deletion lag of the effective policies: the topic's ``offloadPolicies``
    (``managedLedgerOffloadThresholdInBytes`` / ``...InSeconds`` /
    ``managedLedgerOffloadDeletionLagInMillis``) over the namespace's ``offload_threshold``,
    ``offload_threshold_in_seconds``, ``offload_deletion_lag_ms``."""
    topic = effective.get("offloadPolicies")
    topic = topic if isinstance(topic, dict) else {}

    def pick(topic_key: str, ns_key: str, default: int) -> int:
        for v in (topic.get(topic_key), effective.get(ns_key)):
            found = _int_policy(v)
            if found is not None:
                return found
        return default

    return dataclasses.replace(
        base,
        offload_threshold_bytes=pick(
            "managedLedgerOffloadThresholdInBytes",
            "offload_threshold",
            base.offload_threshold_bytes,
        ),
        offload_threshold_s=pick(
            "managedLedgerOffloadThresholdInSeconds",
            "offload_threshold_in_seconds",
            base.offload_threshold_s,
        ),
        offload_deletion_lag_ms=pick(
            "managedLedgerOffloadDeletionLagInMillis",
            "offload_deletion_lag_ms",
            base.offload_deletion_lag_ms,
        ),
    )


def check_namespace_name(tenant: str, namespace: str) -> None:
    """BrokerError(InvalidTopicName) unless both are valid tenant/namespace names."""
    try:
        topics.check_name_part(tenant, "tenant")
        topics.check_name_part(namespace, "namespace")
    except InvalidTopicNameError as err:
        raise BrokerError(pb.InvalidTopicName, str(err)) from None
