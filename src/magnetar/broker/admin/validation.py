"""Validation of admin request bodies: Pulsar's JSON shapes in, checked values out.

Why a module of its own: every illegal value must become a 4xx with a reason before anything
is stored (never a 500, never a half-written record), and the checks are pure functions that
unit tests drive without a broker. Each :class:`Body` also carries the JSON schema of what it
accepts, which the OpenAPI document publishes next to the route that uses it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from magnetar.broker.admin.errors import AdminError
from magnetar.wire.ids import MessageId

T = TypeVar("T")

MAX_PARTITIONS: Final = 10_000
"""Upper bound of a partitioned topic's partitions (Pulsar's is a broker setting, unbounded by
default; an accidental 10**9 would make every listing of the namespace enumerate them)."""
MAX_BUNDLES: Final = 1024
FULL_RANGE: Final = 0x1_0000_0000

QUOTA_TYPES: Final = ("destination_storage", "message_age")
QUOTA_POLICIES: Final = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
TOPIC_TYPES: Final = ("partitioned", "non-partitioned")


@dataclass(frozen=True, slots=True)
class Body(Generic[T]):
    """What a request body must be: its JSON schema (for the OpenAPI document) and the
    function that checks it and returns the value to store (AdminError 400 otherwise)."""

    schema: Mapping[str, Any]
    parse: Callable[[Any], T]
    description: str = ""


# --- scalars ------------------------------------------------------------------------------------


def integer(value: Any, what: str, *, minimum: int, maximum: int | None = None) -> int:
    """``value`` when it is a JSON integer in [minimum, maximum]; AdminError 400 otherwise
    (booleans and floats, even ``3.0``, are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError(400, f"{what} must be an integer, got {_show(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise AdminError(400, f"{what} must be {bound}, got {value}")
    return value


def path_integer(text: str, what: str, *, minimum: int) -> int:
    """An integer from a URL path segment or query parameter."""
    try:
        value = int(text)
    except ValueError:
        raise AdminError(400, f"{what} must be an integer, got {text!r}") from None
    return integer(value, what, minimum=minimum)


def boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise AdminError(400, f"{what} must be true or false, got {_show(value)}")
    return value


def string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise AdminError(400, f"{what} must be a list of non-empty strings, got {_show(value)}")
    return list(value)


def query_flag(value: str | None, what: str) -> bool:
    """``?force=true``: true/false (any case), absent is false; anything else is a 400."""
    if value is None:
        return False
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise AdminError(400, f"{what} must be true or false, got {value!r}")
    return lowered == "true"


def _object(value: Any, what: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as a JSON object with only ``fields``; AdminError 400 otherwise."""
    if not isinstance(value, dict):
        raise AdminError(400, f"{what} must be a JSON object {{{', '.join(fields)}}}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise AdminError(400, f"unknown {what} fields: {unknown} (known: {sorted(fields)})")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_schema(minimum: int, maximum: int | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "format": "int64", "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return schema | extra


# --- namespace policies -------------------------------------------------------------------------

_RETENTION_FIELDS: Final = {
    "retentionTimeInMinutes": _int_schema(-1, description="-1: infinite, 0: none"),
    "retentionSizeInMB": _int_schema(-1, description="-1: infinite, 0: none"),
}


def retention(value: Any) -> dict[str, int]:
    """Pulsar's RetentionPolicies; -1 means infinite, 0 none (absent fields: 0)."""
    raw = _object(value, "retention", _RETENTION_FIELDS)
    return {name: integer(raw.get(name, 0), name, minimum=-1) for name in _RETENTION_FIELDS}


def message_ttl(value: Any) -> int:
    """Seconds; 0 disables expiry."""
    return integer(value, "message TTL (seconds)", minimum=0)


def _not_negative(value: Any, what: str, reason: str) -> int:
    """An integer, 0 or more: 400 for another JSON type, 412 with Pulsar's ``reason`` for a
    negative one (how Pulsar answers a topic policy's bad value)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError(400, f"{what} must be an integer, got {_show(value)}")
    if value < 0:
        raise AdminError(412, reason)
    return value


def topic_message_ttl(value: Any) -> int:
    """A topic's messageTTL (seconds; 0 disables expiry)."""
    return _not_negative(value, "messageTTL", "Invalid value for message TTL")


def topic_compaction_threshold(value: Any) -> int:
    """A topic's compactionThreshold (bytes; 0 disables)."""
    return _not_negative(value, "compactionThreshold", "Invalid value for compactionThreshold")


def compaction_threshold(value: Any) -> int:
    """Backlog bytes of the ``__compaction`` cursor that trigger compaction; 0 disables."""
    return integer(value, "compaction threshold (bytes)", minimum=0)


def max_count(value: Any, what: str) -> int:
    """A topic's ``maxProducers`` / ``maxConsumers``: an integer, 0 or more (Pulsar answers
    412 to a negative one, with this reason)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError(400, f"{what} must be an integer, got {_show(value)}")
    if value < 0:
        raise AdminError(412, f"{what} must be 0 or more")
    return value


_OFFLOAD_NUMBERS: Final = (
    "managedLedgerOffloadThresholdInBytes",
    "managedLedgerOffloadThresholdInSeconds",
    "managedLedgerOffloadDeletionLagInMillis",
)


OFFLOAD_DRIVERS: Final = (
    "S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss"
)  # fmt: skip
"""The drivers Pulsar's OffloadPolicies accepts (its 412 otherwise); the broker's own
offloader (S3, docs/offload.md) is the one used whatever a topic names."""


def offload_policies(value: Any) -> dict[str, Any]:
    """A topic's OffloadPolicies object: its thresholds and deletion lag integers of -1 or
    more (-1: never / the broker's); its other fields (driver, bucket: one offloader per
    broker here, docs/offload.md) kept as given."""
    if not isinstance(value, dict):
        raise AdminError(400, f"offload policies must be an object, got {_show(value)}")
    if value.get("managedLedgerOffloadDriver") not in OFFLOAD_DRIVERS:
        supported = ",".join(OFFLOAD_DRIVERS)
        raise AdminError(412, f"The driver is not supported, support value: {supported}")
    for key in _OFFLOAD_NUMBERS:
        if value.get(key) is not None:
            integer(value[key], key, minimum=-1)
    return value


def deduplication(value: Any) -> bool:
    return boolean(value, "deduplication")


SCHEMA_STRATEGIES: Final = (
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
)  # fmt: skip


def schema_strategy(value: Any) -> str:
    """A SchemaCompatibilityStrategy name."""
    if value not in SCHEMA_STRATEGIES:
        raise AdminError(
            400, f"schema compatibility strategy must be one of {list(SCHEMA_STRATEGIES)}"
        )
    return str(value)


def partitions(value: Any) -> int:
    return integer(value, "partitions", minimum=1, maximum=MAX_PARTITIONS)


_AUTO_FIELDS: Final = {
    "allowAutoTopicCreation": {"type": "boolean"},
    "topicType": {"type": "string", "enum": list(TOPIC_TYPES)},
    "defaultNumPartitions": _int_schema(1, MAX_PARTITIONS),
}


def auto_topic_creation(value: Any) -> dict[str, Any]:
    """Pulsar's AutoTopicCreationOverride; ``defaultNumPartitions`` is required (and kept)
    only for partitioned auto-creation."""
    raw = _object(value, "autoTopicCreation", _AUTO_FIELDS)
    if "allowAutoTopicCreation" not in raw:
        raise AdminError(400, "autoTopicCreation needs a boolean allowAutoTopicCreation")
    allowed = boolean(raw["allowAutoTopicCreation"], "allowAutoTopicCreation")
    kind = raw.get("topicType", "non-partitioned")
    if kind not in TOPIC_TYPES:
        raise AdminError(400, f"topicType must be one of {TOPIC_TYPES}, got {_show(kind)}")
    out: dict[str, Any] = {"allowAutoTopicCreation": allowed, "topicType": kind}
    if kind == "partitioned":
        out["defaultNumPartitions"] = integer(
            raw.get("defaultNumPartitions"),
            "defaultNumPartitions",
            minimum=1,
            maximum=MAX_PARTITIONS,
        )
    return out


_QUOTA_FIELDS: Final = {
    "limitSize": _int_schema(-1, description="bytes; -1: unlimited"),
    "limitTime": _int_schema(-1, description="seconds; -1: unlimited"),
    "policy": {"type": "string", "enum": list(QUOTA_POLICIES)},
    "limit": _int_schema(-1, description="deprecated spelling of limitSize"),
}


def backlog_quota(value: Any) -> dict[str, Any]:
    """Pulsar's BacklogQuota {limitSize, limitTime, policy} (``limit``: the old name of
    ``limitSize``)."""
    raw = _object(value, "backlog quota", _QUOTA_FIELDS)
    policy = raw.get("policy", "producer_request_hold")
    if policy not in QUOTA_POLICIES:
        raise AdminError(400, f"policy must be one of {QUOTA_POLICIES}, got {_show(policy)}")
    size = integer(raw.get("limitSize", raw.get("limit", -1)), "limitSize", minimum=-1)
    return {  # Pulsar answers the deprecated ``limit`` too, equal to limitSize
        "limit": size,
        "limitSize": size,
        "limitTime": integer(raw.get("limitTime", -1), "limitTime", minimum=-1),
        "policy": policy,
    }


def quota_type(value: str | None) -> str:
    kind = value or "destination_storage"
    if kind not in QUOTA_TYPES:
        raise AdminError(400, f"backlogQuotaType must be one of {QUOTA_TYPES}, got {kind!r}")
    return kind


def backlog_quota_map(value: Any) -> dict[str, dict[str, Any]]:
    raw = _object(value, "backlog_quota_map", dict.fromkeys(QUOTA_TYPES))
    return {kind: backlog_quota(quota) for kind, quota in raw.items()}


def offload_threshold(value: Any) -> int:
    """Bytes kept on bookies before offloading; -1 disables, 0 offloads as soon as possible."""
    return integer(value, "offloadThreshold", minimum=-1)


def offload_threshold_seconds(value: Any) -> int:
    """Closed ledgers older than this many seconds are offloaded; -1 disables."""
    return integer(value, "offloadThresholdInSeconds", minimum=-1)


def offload_deletion_lag(value: Any) -> int:
    return integer(value, "offloadDeletionLagMs", minimum=0)


def bundles(value: Any) -> dict[str, Any]:
    """Pulsar's BundlesData: ``numBundles`` and/or ``boundaries`` (hex strings splitting
    [0x00000000, 0xffffffff] in increasing order); returns both, consistent."""
    raw = _object(value, "bundles", {"numBundles": None, "boundaries": None})
    if "boundaries" not in raw:
        n = integer(raw.get("numBundles"), "numBundles", minimum=1, maximum=MAX_BUNDLES)
        step = FULL_RANGE // n
        bounds = [i * step for i in range(n)] + [FULL_RANGE - 1]
        return {"boundaries": [f"0x{b:08x}" for b in bounds], "numBundles": n}
    given = raw["boundaries"]
    if not isinstance(given, list) or not 2 <= len(given) <= MAX_BUNDLES + 1:
        raise AdminError(400, f"boundaries must be a list of 2 to {MAX_BUNDLES + 1} hex strings")
    try:
        bounds = [int(b, 16) for b in given]
    except (TypeError, ValueError):
        raise AdminError(400, f"boundaries must be hex strings, got {_show(given)}") from None
    if bounds[0] != 0 or bounds[-1] != FULL_RANGE - 1:
        raise AdminError(400, "boundaries must start at 0x00000000 and end at 0xffffffff")
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        raise AdminError(400, "boundaries must be strictly increasing")
    n = len(bounds) - 1
    if "numBundles" in raw and raw["numBundles"] != n:
        raise AdminError(400, f"numBundles {_show(raw['numBundles'])} does not match boundaries")
    return {"boundaries": [f"0x{b:08x}" for b in bounds], "numBundles": n}


_AUTH_FIELDS: Final = {
    "namespace_auth": None,
    "destination_auth": None,
    "subscription_auth_roles": None,
}


NamespaceField = Callable[[Any], Any]

NAMESPACE_FIELDS: Final[dict[str, NamespaceField]] = {
    "bundles": bundles,
    "retention_policies": retention,
    "message_ttl_in_seconds": message_ttl,
    "deduplicationEnabled": deduplication,
    "schema_compatibility_strategy": schema_strategy,
    "schema_validation_enforced": lambda v: boolean(v, "schema_validation_enforced"),
    "is_allow_auto_update_schema": lambda v: boolean(v, "is_allow_auto_update_schema"),
    "autoTopicCreationOverride": auto_topic_creation,
    "backlog_quota_map": backlog_quota_map,
    "offload_threshold": offload_threshold,
    "offload_threshold_in_seconds": offload_threshold_seconds,
    "offload_deletion_lag_ms": offload_deletion_lag,
    "replication_clusters": lambda v: string_list(v, "replication_clusters"),
    "deleted": lambda v: boolean(v, "deleted"),
    "max_producers_per_topic": lambda v: max_count(v, "maxProducersPerTopic"),
    "max_consumers_per_topic": lambda v: max_count(v, "maxConsumersPerTopic"),
    "auth_policies": lambda v: _object(v, "auth_policies", _AUTH_FIELDS),
}
"""Fields of Pulsar's ``Policies`` that a namespace body may carry, each with its check.
(``GET`` then ``PUT`` of a namespace's policies round-trips.)"""


UNSUPPORTED_POLICY_DEFAULTS: Final[dict[str, Any]] = {
    "allowed_clusters": [],
    "clusterDispatchRate": {},
    "clusterSubscribeRate": {},
    "encryption_required": False,
    "latency_stats_sample_rate": {},
    "migrated": False,
    "properties": {},
    "publishMaxMessageRate": {},
    "replicatorDispatchRate": {},
    "subscriptionDispatchRate": {},
    "subscription_auth_mode": "None",
    "subscription_types_enabled": [],
    "topicDispatchRate": {},
}
"""Fields of Pulsar's ``Policies`` that Magnetar does not implement, with the value a
``new Policies()`` carries (the Java admin client sends every field on namespace creation).
A body may carry them at that value -- it means "not set" -- and they are not stored; any
other value is a 400 naming the field, never silently ignored."""


def namespace_policies(value: Any) -> dict[str, Any]:
    """The fields of a ``PUT /namespaces/{t}/{ns}`` body (Pulsar's Policies), checked;
    unknown fields are a 400 (a misspelt policy must not be silently dropped), and so are
    policies Magnetar does not implement unless they are at Pulsar's default."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AdminError(400, "namespace policies must be a JSON object")
    unknown = sorted(
        set(value) - set(NAMESPACE_FIELDS) - set(UNSUPPORTED_POLICY_DEFAULTS) - {"format"}
    )
    if unknown:
        raise AdminError(
            400, f"unknown policy fields: {unknown} (known: {sorted(NAMESPACE_FIELDS)})"
        )
    unsupported = sorted(
        k
        for k, v in value.items()
        if k in UNSUPPORTED_POLICY_DEFAULTS and v is not None
        and v != UNSUPPORTED_POLICY_DEFAULTS[k]
    )  # fmt: skip
    if unsupported:
        raise AdminError(
            400,
            f"policies not supported by Magnetar (only their default is accepted): {unsupported}",
        )
    return {
        k: NAMESPACE_FIELDS[k](v)
        for k, v in value.items()
        if v is not None and k in NAMESPACE_FIELDS
    }


# --- tenants ------------------------------------------------------------------------------------

_TENANT_FIELDS: Final = {
    "adminRoles": {"type": "array", "items": {"type": "string"}},
    "allowedClusters": {"type": "array", "items": {"type": "string"}},
}


def tenant_info(value: Any, *, clusters: list[str], default_all: bool = True) -> dict[str, Any]:
    """Pulsar's TenantInfo {adminRoles, allowedClusters}; allowed clusters must exist (412).
    Absent ``allowedClusters``: every cluster when creating (``default_all``)."""
    raw = _object({} if value is None else value, "tenant info", _TENANT_FIELDS)
    out: dict[str, Any] = {"adminRoles": string_list(raw.get("adminRoles", []), "adminRoles")}
    if "allowedClusters" in raw or default_all:
        allowed = string_list(raw.get("allowedClusters", clusters), "allowedClusters")
        missing = sorted(set(allowed) - set(clusters))
        if missing:
            raise AdminError(412, f"clusters do not exist: {missing}")
        out["allowedClusters"] = allowed
    return out


# --- messages -----------------------------------------------------------------------------------

_MESSAGE_ID_FIELDS: Final = {
    "ledgerId": {"type": "integer", "format": "int64"},
    "entryId": {"type": "integer", "format": "int64"},
    "partitionIndex": {"type": "integer"},
    "batchIndex": {"type": "integer"},
    "batchSize": {"type": "integer"},
    "isExcluded": {"type": "boolean"},
    "excluded": {"type": "boolean"},
    "properties": {"type": "object"},
}


def message_id(value: Any) -> MessageId:
    """Pulsar's MessageIdImpl JSON ``{ledgerId, entryId[, partitionIndex, batchIndex]}``;
    negative ledger and entry ids mean earliest (as pulsar-admin sends them)."""
    if not isinstance(value, dict):
        raise AdminError(400, 'a message id must be {"ledgerId": int, "entryId": int}')
    _object(value, "message id", _MESSAGE_ID_FIELDS)
    ids = []
    for name in ("ledgerId", "entryId"):
        raw = value.get(name)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise AdminError(400, 'a message id must be {"ledgerId": int, "entryId": int}')
        if not -(2**63) <= raw < 2**63:
            raise AdminError(400, f"{name} is out of range: {raw}")
        ids.append(raw)
    partition = integer(value.get("partitionIndex", -1), "partitionIndex", minimum=-1)
    batch = integer(value.get("batchIndex", -1), "batchIndex", minimum=-1)
    integer(value.get("batchSize", 0), "batchSize", minimum=-1)  # the Java client's; informative
    # ResetCursorData's extras: only their defaults (inclusive reset, no cursor properties)
    # (the Java admin client 4.x sends ResetCursorData's isExcluded as "excluded")
    for name in ("isExcluded", "excluded"):
        if boolean(value.get(name, False), name):
            raise AdminError(400, f"{name}=true (reset after the message) is not supported")
    if value.get("properties") not in (None, {}):
        raise AdminError(400, "cursor properties on reset are not supported")
    return MessageId(ids[0], ids[1], partition, batch)


def timestamp(text: str) -> int:
    """Milliseconds since the epoch, from a URL path segment."""
    value = path_integer(text, "timestamp", minimum=0)
    if value > 2**63 - 1:
        raise AdminError(400, f"timestamp is out of range: {value}")
    return value


# --- request bodies, with their schemas ---------------------------------------------------------


def _obj_schema(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {k: v or {} for k, v in fields.items()},
    }


RETENTION = Body(_obj_schema(_RETENTION_FIELDS), retention, "RetentionPolicies")
MESSAGE_TTL = Body(_int_schema(0), message_ttl, "seconds; 0 disables")
TOPIC_MESSAGE_TTL = Body(_int_schema(0), topic_message_ttl, "seconds; 0 disables")
TOPIC_COMPACTION_THRESHOLD = Body(_int_schema(0), topic_compaction_threshold, "bytes; 0: never")
MAX_PRODUCERS = Body(_int_schema(0), lambda v: max_count(v, "maxProducers"), "0: no limit")
MAX_CONSUMERS = Body(_int_schema(0), lambda v: max_count(v, "maxConsumers"), "0: no limit")
OFFLOAD_POLICIES = Body(
    {"type": "object", "properties": {k: _int_schema(-1) for k in _OFFLOAD_NUMBERS}},
    offload_policies,
    "OffloadPolicies (the thresholds and the deletion lag apply per topic)",
)
DEDUPLICATION = Body({"type": "boolean"}, deduplication)
COMPACTION_THRESHOLD = Body(_int_schema(0), compaction_threshold, "bytes; 0 disables")
SCHEMA_STRATEGY = Body({"type": "string", "enum": list(SCHEMA_STRATEGIES)}, schema_strategy)
BOOLEAN = Body({"type": "boolean"}, lambda v: boolean(v, "value"))
AUTO_TOPIC_CREATION = Body(
    _obj_schema(_AUTO_FIELDS) | {"required": ["allowAutoTopicCreation"]},
    auto_topic_creation,
    "AutoTopicCreationOverride",
)
BACKLOG_QUOTA = Body(_obj_schema(_QUOTA_FIELDS), backlog_quota, "BacklogQuota")
OFFLOAD_THRESHOLD = Body(_int_schema(-1), offload_threshold, "bytes; -1 disables")
OFFLOAD_THRESHOLD_SECONDS = Body(_int_schema(-1), offload_threshold_seconds, "seconds; -1 disables")
OFFLOAD_DELETION_LAG = Body(_int_schema(0), offload_deletion_lag, "milliseconds")
PARTITIONS = Body(_int_schema(1, MAX_PARTITIONS), partitions, "number of partitions")
MESSAGE_ID = Body(
    _obj_schema(_MESSAGE_ID_FIELDS) | {"required": ["ledgerId", "entryId"]},
    message_id,
    "MessageId",
)
# --- clusters -----------------------------------------------------------------------------------

CLUSTER_URL_FIELDS: Final = (
    "serviceUrl",
    "serviceUrlTls",
    "brokerServiceUrl",
    "brokerServiceUrlTls",
)
_CLUSTER_SCHEMES: Final = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
}


def cluster_data(value: Any) -> dict[str, str]:
    """Pulsar's ClusterData, its service URLs only (each with its scheme; empty means none).
    Other ClusterData fields (the broker client's own TLS and authentication per cluster,
    proxy URLs, peer clusters) are refused: the replicators use the broker's client
    settings (docs/geo-replication.md)."""
    raw = _object(value, "cluster data", {f: {"type": "string"} for f in CLUSTER_URL_FIELDS})
    out: dict[str, str] = {}
    for name, given in raw.items():
        if given is None:
            continue
        if not isinstance(given, str):
            raise AdminError(400, f"{name} must be a string, got {_show(given)}")
        if given and not given.startswith(_CLUSTER_SCHEMES[name]):
            raise AdminError(
                400, f"{name} must start with {_CLUSTER_SCHEMES[name][0]}, got {given!r}"
            )
        if given:
            out[name] = given
    return out


def replication_clusters(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AdminError(400, f"replication clusters must be a list of names, got {_show(value)}")
    return list(value)


CLUSTER_DATA = Body(
    {"type": "object", "properties": {f: {"type": "string"} for f in CLUSTER_URL_FIELDS}},
    cluster_data,
    "ClusterData (service URLs)",
)
REPLICATION_CLUSTERS = Body(
    {"type": "array", "items": {"type": "string"}}, replication_clusters, "cluster names"
)
TENANT_INFO = Body(_obj_schema(_TENANT_FIELDS), lambda v: v, "TenantInfo")
NAMESPACE_POLICIES = Body(
    {"type": "object", "properties": {k: {} for k in NAMESPACE_FIELDS}},
    namespace_policies,
    "Policies (any subset)",
)
