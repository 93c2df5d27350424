"""The verbs of ``magnetar admin``: pulsar-admin's names and flags, each a pure function from
parsed arguments to one :class:`~magnetar.admin_cli.client.Request`.

A verb is declared once, with its arguments and help, by :func:`verb`; the argument parser
and the dispatch table are built from those declarations, and tests check every verb's
request without a server.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from magnetar.admin_cli import connection, convert
from magnetar.admin_cli.client import NO_BODY, AdminCliError, Request
from magnetar.admin_cli.convert import name_path, namespace_path, topic_path

V2: Final = "/admin/v2"
GROUPS: Final = {
    "clusters": "clusters of this Magnetar installation",
    "brokers": "live brokers and their health",
    "bookies": "bookies: state and rack, under-replicated ledgers, decommission",
    "tenants": "tenants: admin roles and allowed clusters",
    "namespaces": "namespaces and their policies",
    "topics": "topics, partitions, subscriptions and topic policies",
    "schemas": "topic schemas: history, upload, delete, compatibility",
    "functions": "Pulsar Functions (Python): create, run, status, stats, state",
}

Builder = Callable[[argparse.Namespace], Request]


@dataclass(frozen=True, slots=True)
class Arg:
    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True, slots=True)
class Verb:
    group: str
    name: str
    help: str
    args: tuple[Arg | tuple[Arg, ...], ...]
    """Arguments; a tuple of Args is a required mutually exclusive group."""
    build: Builder


VERBS: dict[tuple[str, str], Verb] = {}


def verb(
    group: str, name: str, help: str, *args: Arg | tuple[Arg, ...]
) -> Callable[[Builder], Builder]:
    def register(build: Builder) -> Builder:
        VERBS[(group, name)] = Verb(group, name, help, args, build)
        return build

    return register


# --- common arguments ---------------------------------------------------------------------------

TENANT = arg("tenant", help="tenant name")
NAMESPACE = arg("namespace", help="tenant/namespace")
TOPIC = arg(
    "topic",
    help="[persistent://|non-persistent://]tenant/namespace/topic, or a name in public/default",
)
SUBSCRIPTION = arg("-s", "--subscription", required=True, help="subscription name")
FORCE = arg("-f", "--force", action="store_true", help="even when in use / not empty")


def _latest_message_id(help_text: str) -> Arg:
    """``-m/--messageId``, latest by default (pulsar-admin's)."""
    return arg(
        "-m",
        "--messageId",
        type=convert.message_id,
        default="latest",
        dest="message_id",
        help=help_text,
    )


def _enable_disable(what: str) -> tuple[Arg, ...]:
    return (
        arg("-e", "--enable", action="store_true", dest="enable", help=f"enable {what}"),
        arg("-d", "--disable", action="store_false", dest="enable", help=f"disable {what}"),
    )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _ns(a: argparse.Namespace, tail: str = "") -> str:
    return f"{V2}/namespaces/{namespace_path(a.namespace)}{tail}"


def _topic(a: argparse.Namespace, tail: str = "") -> str:
    return f"{V2}/{topic_path(a.topic)}{tail}"


def _sub(a: argparse.Namespace, tail: str = "") -> str:
    return _topic(a, f"/subscription/{urllib.parse.quote(a.subscription, safe='')}{tail}")


# --- clusters and brokers -----------------------------------------------------------------------


@verb("clusters", "list", "list the clusters")
def _clusters_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/clusters")


@verb("clusters", "get", "a cluster's service URLs", arg("cluster", help="cluster name"))
def _clusters_get(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/clusters/{name_path(a.cluster, 'cluster')}")


@verb("brokers", "list", "the live brokers of a cluster", arg("cluster", help="cluster name"))
def _brokers_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/brokers/{name_path(a.cluster, 'cluster')}")


@verb("brokers", "healthcheck", "check that the broker is healthy (prints ok)")
def _brokers_health(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/brokers/health")


# --- bookies ------------------------------------------------------------------------------------

BOOKIE = arg("bookie", help="bookie id (host:port)")


@verb("bookies", "list", "the bookies with their state (rw, ro, decommissioning, gone) and rack")
def _bookies_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/all")


@verb("bookies", "list-underreplicated", "ledgers waiting for re-replication")
def _bookies_underreplicated(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/underreplicated")


@verb("bookies", "decommission", "move every ledger off a bookie, then retire its id", BOOKIE)
def _bookies_decommission(a: argparse.Namespace) -> Request:
    return Request("POST", f"{V2}/bookies/decommission/{name_path(a.bookie, 'bookie')}")


@verb("bookies", "decommission-status", "a decommission's progress", BOOKIE)
def _bookies_decommission_status(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/decommission/{name_path(a.bookie, 'bookie')}")


# --- tenants ------------------------------------------------------------------------------------


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


_TENANT_ARGS = (
    arg("tenant", help="tenant name"),
    arg("-r", "--admin-roles", help="comma-separated admin roles"),
    arg("-c", "--allowed-clusters", help="comma-separated allowed clusters (default: all)"),
)


def _tenant_info(a: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if a.admin_roles is not None or a.verb == "create":
        info["adminRoles"] = _csv(a.admin_roles)
    if a.allowed_clusters is not None:
        info["allowedClusters"] = _csv(a.allowed_clusters)
    return info


@verb("tenants", "list", "list the tenants")
def _tenants_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/tenants")


@verb("tenants", "get", "a tenant's admin roles and allowed clusters", TENANT)
def _tenants_get(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/tenants/{name_path(a.tenant, 'tenant')}")


@verb("tenants", "create", "create a tenant", *_TENANT_ARGS)
def _tenants_create(a: argparse.Namespace) -> Request:
    return Request("PUT", f"{V2}/tenants/{name_path(a.tenant, 'tenant')}", _tenant_info(a))


@verb("tenants", "update", "update a tenant (given fields only)", *_TENANT_ARGS)
def _tenants_update(a: argparse.Namespace) -> Request:
    return Request("POST", f"{V2}/tenants/{name_path(a.tenant, 'tenant')}", _tenant_info(a))


@verb("tenants", "delete", "delete a tenant", TENANT, FORCE)
def _tenants_delete(a: argparse.Namespace) -> Request:
    path = f"{V2}/tenants/{name_path(a.tenant, 'tenant')}?force={_flag(a.force)}"
    return Request("DELETE", path)


# --- namespaces ---------------------------------------------------------------------------------


@verb("namespaces", "list", "the namespaces of a tenant", TENANT)
def _ns_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/namespaces/{name_path(a.tenant, 'tenant')}")


@verb("namespaces", "topics", "the topics of a namespace", NAMESPACE)
def _ns_topics(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a, "/topics"))


@verb(
    "namespaces",
    "create",
    "create a namespace",
    NAMESPACE,
    arg("-b", "--bundles", type=convert.positive, help="number of bundles"),
    arg("-c", "--clusters", help="comma-separated replication clusters"),
)
def _ns_create(a: argparse.Namespace) -> Request:
    policies: dict[str, Any] = {}
    if a.bundles is not None:
        policies["bundles"] = {"numBundles": a.bundles}
    if a.clusters is not None:
        policies["replication_clusters"] = _csv(a.clusters)
    return Request("PUT", _ns(a), policies if policies else NO_BODY)


@verb("namespaces", "delete", "delete a namespace", NAMESPACE, FORCE)
def _ns_delete(a: argparse.Namespace) -> Request:
    return Request("DELETE", _ns(a, f"?force={_flag(a.force)}"))


@verb("namespaces", "bundles", "the bundle boundaries of a namespace", NAMESPACE)
def _ns_bundles(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a, "/bundles"))


def _bundle_range(text: str) -> str:
    if not re.fullmatch(r"0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}", text):
        raise argparse.ArgumentTypeError(
            f"invalid bundle {text!r}: expected a range such as 0x00000000_0x40000000"
        )
    return text


@verb(
    "namespaces",
    "unload",
    "unload a namespace (every bundle) or one bundle of it; clients reconnect",
    NAMESPACE,
    arg("-b", "--bundle", type=_bundle_range, help="one bundle, e.g. 0x00000000_0x40000000"),
)
def _ns_unload(a: argparse.Namespace) -> Request:
    return Request("PUT", _ns(a, f"/{a.bundle}/unload" if a.bundle else "/unload"))


@verb(
    "namespaces",
    "split-bundle",
    "split one bundle in two on its owner",
    NAMESPACE,
    arg("-b", "--bundle", type=_bundle_range, required=True, help="e.g. 0x00000000_0x40000000"),
    arg("-u", "--unload", action="store_true", help="unload the halves (placed again)"),
    arg(
        "-san",
        "--split-algorithm-name",
        choices=["range_equally_divide", "topic_count_equally_divide"],
        default="range_equally_divide",
    ),
)
def _ns_split(a: argparse.Namespace) -> Request:
    query = f"?unload={_flag(a.unload)}&splitAlgorithmName={a.split_algorithm_name}"
    return Request("PUT", _ns(a, f"/{a.bundle}/split{query}"))


@verb("namespaces", "policies", "all policies of a namespace", NAMESPACE)
def _ns_policies(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a))


# --- permissions (namespaces and topics) --------------------------------------------------------

ROLE = arg("--role", required=True, help="the role (a token's subject, a certificate's CN...)")
ACTIONS = arg(
    "--actions",
    required=True,
    type=_csv,
    help="comma-separated: produce, consume, functions, sources, sinks, packages",
)


def _role(a: argparse.Namespace) -> str:
    return convert.path_part(a.role, "role")


@verb(
    "namespaces", "permissions", "the roles granted on a namespace, with their actions", NAMESPACE
)
def _ns_permissions(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a, "/permissions"))


@verb("namespaces", "grant-permission", "grant actions on a namespace", NAMESPACE, ROLE, ACTIONS)
def _ns_grant(a: argparse.Namespace) -> Request:
    return Request("POST", _ns(a, f"/permissions/{_role(a)}"), a.actions)


@verb("namespaces", "revoke-permission", "revoke a role's actions on a namespace", NAMESPACE, ROLE)
def _ns_revoke(a: argparse.Namespace) -> Request:
    return Request("DELETE", _ns(a, f"/permissions/{_role(a)}"))


@verb(
    "namespaces",
    "subscription-permission",
    "the roles allowed on each restricted subscription of a namespace",
    NAMESPACE,
)
def _ns_sub_permissions(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a, "/permissions/subscription"))


@verb(
    "namespaces",
    "grant-subscription-permission",
    "restrict a subscription to these roles",
    NAMESPACE,
    SUBSCRIPTION,
    arg("--roles", required=True, type=_csv, help="comma-separated roles"),
)
def _ns_grant_sub(a: argparse.Namespace) -> Request:
    sub = convert.path_part(a.subscription, "subscription")
    return Request("POST", _ns(a, f"/permissions/subscription/{sub}"), a.roles)


@verb(
    "namespaces",
    "revoke-subscription-permission",
    "remove a role from a subscription's allowed roles",
    NAMESPACE,
    SUBSCRIPTION,
    ROLE,
)
def _ns_revoke_sub(a: argparse.Namespace) -> Request:
    sub = convert.path_part(a.subscription, "subscription")
    return Request("DELETE", _ns(a, f"/permissions/{sub}/{_role(a)}"))


@verb("topics", "permissions", "the roles granted on a topic (namespace grants included)", TOPIC)
def _topic_permissions(a: argparse.Namespace) -> Request:
    return Request("GET", _topic(a, "/permissions"))


@verb("topics", "bundle-range", "the namespace bundle the topic's name hashes into", TOPIC)
def _topic_bundle_range(a: argparse.Namespace) -> Request:
    return Request("GET", f"/lookup/v2/topic/{topic_path(a.topic)}/bundle")


@verb("topics", "grant-permission", "grant actions on a topic", TOPIC, ROLE, ACTIONS)
def _topic_grant(a: argparse.Namespace) -> Request:
    return Request("POST", _topic(a, f"/permissions/{_role(a)}"), a.actions)


@verb("topics", "revoke-permission", "revoke a role's actions on a topic", TOPIC, ROLE)
def _topic_revoke(a: argparse.Namespace) -> Request:
    return Request("DELETE", _topic(a, f"/permissions/{_role(a)}"))


def _retention(a: argparse.Namespace) -> dict[str, int]:
    return {
        "retentionTimeInMinutes": a.time if a.time < 0 else a.time // 60,
        "retentionSizeInMB": a.size if a.size < 0 else a.size // (1 << 20),
    }


_NS_SWITCHES = {
    "set-deduplication": ("/deduplication", "message deduplication"),
    "set-schema-autoupdate-strategy": ("/isAllowAutoUpdateSchema", "automatic schema updates"),
    "set-schema-validation-enforce": (
        "/schemaValidationEnforced",
        "refusing schema-less producers on topics with a schema",
    ),
}
"""Namespace policies switched with -e/-d: verb -> (path, what it switches)."""


def _switch(tail: str) -> Builder:
    def build(a: argparse.Namespace) -> Request:
        return Request("POST", _ns(a, tail), a.enable)

    return build


for _name, (_tail, _what) in _NS_SWITCHES.items():
    verb("namespaces", _name, f"enable or disable {_what}", NAMESPACE, _enable_disable(_what))(
        _switch(_tail)
    )


_QUOTA_TYPE = arg(
    "-t",
    "--type",
    default="destination_storage",
    choices=("destination_storage", "message_age"),
    help="backlog quota type",
)


@verb(
    "namespaces",
    "set-backlog-quota",
    "limit the backlog by size and/or age",
    NAMESPACE,
    arg("-l", "--limit", type=convert.size_bytes, default=-1, help="size, e.g. 10G (-1: none)"),
    arg(
        "-lt",
        "--limitTime",
        type=convert.seconds,
        default=-1,
        dest="limit_time",
        help="age, e.g. 1d (-1: none)",
    ),
    arg(
        "-p",
        "--policy",
        required=True,
        choices=("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    ),
    _QUOTA_TYPE,
)
def _ns_set_quota(a: argparse.Namespace) -> Request:
    body = {"limitSize": a.limit, "limitTime": a.limit_time, "policy": a.policy}
    return Request("POST", _ns(a, f"/backlogQuota?backlogQuotaType={a.type}"), body)


@verb(
    "namespaces",
    "set-auto-topic-creation",
    "allow or refuse creating topics on first use",
    NAMESPACE,
    _enable_disable("auto topic creation"),
    arg("-t", "--type", choices=("partitioned", "non-partitioned"), default="non-partitioned"),
    arg("-n", "--num-partitions", type=convert.positive, default=1, help="when partitioned"),
)
def _ns_set_auto(a: argparse.Namespace) -> Request:
    body: dict[str, Any] = {"allowAutoTopicCreation": a.enable, "topicType": a.type}
    if a.type == "partitioned":
        body["defaultNumPartitions"] = a.num_partitions
    return Request("POST", _ns(a, "/autoTopicCreation"), body)


@verb(
    "namespaces",
    "remove-backlog-quota",
    "remove a backlog quota",
    NAMESPACE,
    _QUOTA_TYPE,
)
def _ns_remove_quota(a: argparse.Namespace) -> Request:
    return Request("DELETE", _ns(a, f"/backlogQuota?backlogQuotaType={a.type}"))


_NS_GETTERS = {
    "get-retention": "/retention",
    "get-message-ttl": "/messageTTL",
    "get-deduplication": "/deduplication",
    "get-backlog-quotas": "/backlogQuotaMap",
    "get-auto-topic-creation": "/autoTopicCreation",
    "get-offload-threshold": "/offloadThreshold",
    "get-offload-deletion-lag": "/offloadDeletionLagMs",
    "get-compaction-threshold": "/compactionThreshold",
}
_NS_REMOVERS = {
    "remove-retention": "/retention",
    "remove-message-ttl": "/messageTTL",
    "remove-deduplication": "/deduplication",
    "remove-auto-topic-creation": "/autoTopicCreation",
    "clear-offload-deletion-lag": "/offloadDeletionLagMs",
    "remove-compaction-threshold": "/compactionThreshold",
}


Body = Callable[[argparse.Namespace], Any]


def _on(path: Callable[[argparse.Namespace, str], str], method: str, tail: str) -> Builder:
    def build(a: argparse.Namespace) -> Request:
        return Request(method, path(a, tail))

    return build


def _on_namespace(method: str, tail: str) -> Builder:
    return _on(_ns, method, tail)


def _on_topic(method: str, tail: str) -> Builder:
    return _on(_topic, method, tail)


def _setting(
    path: Callable[[argparse.Namespace, str], str], method: str, tail: str, body: Body
) -> Builder:
    def build(a: argparse.Namespace) -> Request:
        return Request(method, path(a, tail), body(a))

    return build


@dataclass(frozen=True, slots=True)
class Setting:
    """A verb that sends one value (``body`` of the parsed arguments) to one path."""

    help: str
    args: tuple[Arg | tuple[Arg, ...], ...]
    method: str
    tail: str
    body: Body


_RETENTION_ARGS = (
    arg("-t", "--time", type=convert.seconds, required=True, help="e.g. 10m, 3h, 2d, -1"),
    arg("-s", "--size", type=convert.size_bytes, required=True, help="e.g. 100M, 10G, -1"),
)
_PARTITIONS = arg("-p", "--partitions", type=convert.positive, required=True)
_THRESHOLD = arg(
    "-t", "--threshold", type=convert.size_bytes, required=True,
    help="backlog size that triggers compaction, e.g. 100M (0: never)",
)  # fmt: skip

_NS_SETTINGS = {
    "set-retention": Setting(
        "keep acknowledged messages for a time and/or size (-1: infinite)",
        _RETENTION_ARGS, "POST", "/retention", _retention,
    ),
    "set-message-ttl": Setting(
        "expire unacknowledged messages older than this (0: never)",
        (arg("-ttl", "--messageTTL", type=convert.seconds, required=True, dest="ttl",
             help="e.g. 1h"),),
        "POST", "/messageTTL", lambda a: a.ttl,
    ),
    "set-offload-threshold": Setting(
        "offload ledgers beyond this size kept on bookies (-1: never)",
        (arg("-s", "--size", type=convert.size_bytes, required=True, help="e.g. 10G, 0, -1"),),
        "PUT", "/offloadThreshold", lambda a: a.size,
    ),
    "set-offload-deletion-lag": Setting(
        "delete bookie copies this long after offloading",
        (arg("-l", "--lag", type=convert.seconds, required=True, help="e.g. 4h"),),
        "PUT", "/offloadDeletionLagMs", lambda a: a.lag * 1000,
    ),
    "set-schema-compatibility-strategy": Setting(
        "how new schemas must relate to a topic's history",
        (arg("-c", "--compatibility", required=True, help="BACKWARD, FORWARD, FULL, ..."),),
        "PUT", "/schemaCompatibilityStrategy", lambda a: a.compatibility,
    ),
    "set-compaction-threshold": Setting(
        "compact topics whose backlog since the last compaction exceeds this size",
        (_THRESHOLD,), "POST", "/compactionThreshold", lambda a: a.threshold,
    ),
}  # fmt: skip
"""Namespace verbs sending one value: verb -> its setting."""

_TOPIC_SETTINGS = {
    "create-partitioned-topic": Setting(
        "create a partitioned topic", (_PARTITIONS,), "PUT", "/partitions",
        lambda a: a.partitions,
    ),
    "update-partitioned-topic": Setting(
        "grow a partitioned topic", (_PARTITIONS,), "POST", "/partitions",
        lambda a: a.partitions,
    ),
    "set-message-ttl": Setting(
        "the topic's own message TTL",
        (arg("-t", "--ttl", type=convert.seconds, required=True,
             help="e.g. 1h (0: never expire)"),),
        "POST", "/messageTTL", lambda a: a.ttl,
    ),
    "set-retention": Setting(
        "the topic's own retention", _RETENTION_ARGS, "POST", "/retention", _retention
    ),
    "set-deduplication": Setting(
        "the topic's own deduplication setting", (_enable_disable("deduplication"),),
        "POST", "/deduplicationEnabled", lambda a: a.enable,
    ),
    "set-compaction-threshold": Setting(
        "the topic's own compaction threshold", (_THRESHOLD,),
        "POST", "/compactionThreshold", lambda a: a.threshold,
    ),
}  # fmt: skip
"""Topic verbs sending one value: verb -> its setting."""

for _group, _target, _path, _settings in (
    ("namespaces", NAMESPACE, _ns, _NS_SETTINGS),
    ("topics", TOPIC, _topic, _TOPIC_SETTINGS),
):
    for _name, _s in _settings.items():
        verb(_group, _name, _s.help, _target, *_s.args)(
            _setting(_path, _s.method, _s.tail, _s.body)
        )


for _name, _tail in _NS_GETTERS.items():
    help_text = f"the namespace's {_tail[1:]} (null: unset)"
    verb("namespaces", _name, help_text, NAMESPACE)(_on_namespace("GET", _tail))
for _name, _tail in _NS_REMOVERS.items():
    help_text = f"remove the namespace's {_tail[1:]}"
    verb("namespaces", _name, help_text, NAMESPACE)(_on_namespace("DELETE", _tail))


# --- topics -------------------------------------------------------------------------------------

_DOMAIN = arg("-td", "--topic-domain", choices=convert.DOMAINS, default="persistent", dest="domain")


@verb("topics", "list", "the topics of a namespace (partitions one by one)", NAMESPACE, _DOMAIN)
def _topics_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/{a.domain}/{namespace_path(a.namespace)}")


@verb(
    "topics", "list-partitioned-topics", "the partitioned topics of a namespace", NAMESPACE, _DOMAIN
)
def _topics_list_partitioned(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/{a.domain}/{namespace_path(a.namespace)}/partitioned")


@verb("topics", "delete", "delete a non-partitioned topic", TOPIC, FORCE)
def _topics_delete(a: argparse.Namespace) -> Request:
    return Request("DELETE", _topic(a, f"?force={_flag(a.force)}"))


@verb("topics", "delete-partitioned-topic", "delete a partitioned topic", TOPIC, FORCE)
def _topics_delete_partitioned(a: argparse.Namespace) -> Request:
    return Request("DELETE", _topic(a, f"/partitions?force={_flag(a.force)}"))


_TOPIC_CALLS = {
    "create": ("PUT", "", "create a non-partitioned topic"),
    "get-partitioned-topic-metadata": ("GET", "/partitions", "number of partitions (0: none)"),
    "stats": ("GET", "/stats", "rates, counters, publishers and subscriptions"),
    "stats-internal": ("GET", "/internalStats", "the managed ledger: ledgers and cursors"),
    "unload": ("PUT", "/unload", "unload a topic (clients reconnect)"),
    "terminate": ("POST", "/terminate", "refuse further messages; prints the last message id"),
    "subscriptions": ("GET", "/subscriptions", "the subscriptions of a topic"),
    "compact": ("PUT", "/compaction", "start a compaction of the topic (409 while one runs)"),
    "compaction-status": ("GET", "/compaction", "the last compaction's status (and error)"),
}
"""Topic verbs without arguments or body: verb -> (method, path after the topic, help)."""

for _name, (_method, _tail, _help) in _TOPIC_CALLS.items():
    verb("topics", _name, _help, TOPIC)(_on_topic(_method, _tail))


@verb(
    "topics",
    "partitioned-stats",
    "stats summed over the partitions",
    TOPIC,
    arg("--per-partition", action="store_true", help="each partition's stats too"),
)
def _topics_partitioned_stats(a: argparse.Namespace) -> Request:
    return Request("GET", _topic(a, f"/partitioned-stats?perPartition={_flag(a.per_partition)}"))


@verb("topics", "lookup", "the broker serving a topic", TOPIC)
def _topics_lookup(a: argparse.Namespace) -> Request:
    return Request("GET", f"/lookup/v2/topic/{topic_path(a.topic)}")


@verb(
    "topics",
    "create-subscription",
    "create a subscription at a position",
    TOPIC,
    SUBSCRIPTION,
    _latest_message_id("latest (default), earliest or LEDGER:ENTRY"),
)
def _topics_create_sub(a: argparse.Namespace) -> Request:
    return Request("PUT", _sub(a), a.message_id)


@verb(
    "topics",
    "offload",
    "offload the topic's closed ledgers before the one holding a message to S3",
    TOPIC,
    _latest_message_id(
        "LEDGER:ENTRY (ledgers before this one's go), or latest (default: every closed one)"
    ),
)
def _topics_offload(a: argparse.Namespace) -> Request:
    return Request("PUT", _topic(a, "/offload"), a.message_id)


@verb("topics", "offload-status", "the status of the topic's last offload", TOPIC)
def _topics_offload_status(a: argparse.Namespace) -> Request:
    return Request("GET", _topic(a, "/offload"))


@verb("topics", "unsubscribe", "delete a subscription", TOPIC, SUBSCRIPTION, FORCE)
def _topics_unsubscribe(a: argparse.Namespace) -> Request:
    return Request("DELETE", _sub(a, f"?force={_flag(a.force)}"))


@verb(
    "topics",
    "skip",
    "skip messages of a subscription",
    TOPIC,
    SUBSCRIPTION,
    arg("-n", "--count", type=convert.non_negative, required=True, help="how many"),
)
def _topics_skip(a: argparse.Namespace) -> Request:
    return Request("POST", _sub(a, f"/skip/{a.count}"))


@verb("topics", "clear-backlog", "skip every message of a subscription", TOPIC, SUBSCRIPTION)
def _topics_clear_backlog(a: argparse.Namespace) -> Request:
    return Request("POST", _sub(a, "/skip_all"))


_EXPIRE_TIME = arg(
    "-t", "--expireTime", type=convert.seconds, required=True, dest="expire_time",
    help="expire messages older than this, e.g. 30s, 1h",
)  # fmt: skip


@verb(
    "topics",
    "expire-messages",
    "acknowledge a subscription's messages older than a time",
    TOPIC,
    SUBSCRIPTION,
    _EXPIRE_TIME,
)
def _topics_expire(a: argparse.Namespace) -> Request:
    return Request("POST", _sub(a, f"/expireMessages/{a.expire_time}"))


@verb(
    "topics",
    "expire-messages-all-subscriptions",
    "acknowledge every subscription's messages older than a time",
    TOPIC,
    _EXPIRE_TIME,
)
def _topics_expire_all(a: argparse.Namespace) -> Request:
    return Request("POST", _topic(a, f"/all_subscription/expireMessages/{a.expire_time}"))


@verb(
    "topics",
    "reset-cursor",
    "move a subscription back or forth, by time or message id",
    TOPIC,
    SUBSCRIPTION,
    (
        arg("-t", "--time", type=convert.seconds, help="to this long ago, e.g. 10m, 1h"),
        arg(
            "-m",
            "--messageId",
            type=convert.message_id,
            dest="message_id",
            help="to LEDGER:ENTRY (or earliest/latest)",
        ),
    ),
)
def _topics_reset(a: argparse.Namespace) -> Request:
    if a.time is not None:
        return Request("POST", _sub(a, f"/resetcursor/{int((time.time() - a.time) * 1000)}"))
    return Request("POST", _sub(a, "/resetcursor"), a.message_id)


for _name, _tail in {
    "message-ttl": "/messageTTL",
    "retention": "/retention",
    "deduplication": "/deduplicationEnabled",
    "compaction-threshold": "/compactionThreshold",
}.items():
    help_text = f"the topic's own {_name} (null: unset)"
    verb("topics", f"get-{_name}", help_text, TOPIC)(_on_topic("GET", _tail))
    verb("topics", f"remove-{_name}", f"remove the topic's own {_name}", TOPIC)(
        _on_topic("DELETE", _tail)
    )


# --- the parser ---------------------------------------------------------------------------------


# --- schemas ------------------------------------------------------------------------------------


def _schema(a: argparse.Namespace, tail: str) -> str:
    domain, tenant, ns, local = convert.topic_parts(a.topic)
    if domain != "persistent":
        raise AdminCliError(f"schemas belong to persistent topics, not {a.topic!r}", 2)
    parts = (convert.name_path(x, w) for x, w in ((tenant, "tenant"), (ns, "namespace")))
    return f"{V2}/schemas/{'/'.join(parts)}/{convert.name_path(local, 'topic')}{tail}"


def _schema_file(path: str) -> Any:
    """A PostSchemaPayload file ``{"type": ..., "schema": ..., "properties": ...}``."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise AdminCliError(f"cannot read schema file {path!r}: {exc.strerror}", 2) from None
    except ValueError as exc:
        raise AdminCliError(f"schema file {path!r} is not JSON: {exc}", 2) from None


_SCHEMA_FILE = arg(
    "-f", "--filename", required=True, help='JSON file {"type": "AVRO", "schema": "...", ...}'
)


@verb(
    "schemas",
    "get",
    "the topic's latest schema, or one version",
    TOPIC,
    arg("-v", "--version", type=int, help="a version instead of the latest"),
    arg("-a", "--all-versions", action="store_true", help="every version"),
)
def _schemas_get(a: argparse.Namespace) -> Request:
    if a.all_versions:
        return Request("GET", _schema(a, "/schemas"))
    return Request("GET", _schema(a, "/schema" if a.version is None else f"/schema/{a.version}"))


@verb("schemas", "upload", "add a schema version (checked for compatibility)", TOPIC, _SCHEMA_FILE)
def _schemas_upload(a: argparse.Namespace) -> Request:
    return Request("POST", _schema(a, "/schema"), _schema_file(a.filename))


@verb("schemas", "delete", "delete the topic's schema history", TOPIC)
def _schemas_delete(a: argparse.Namespace) -> Request:
    return Request("DELETE", _schema(a, "/schema"))


@verb("schemas", "compatibility", "would this schema be accepted?", TOPIC, _SCHEMA_FILE)
def _schemas_compatibility(a: argparse.Namespace) -> Request:
    return Request("POST", _schema(a, "/compatibility"), _schema_file(a.filename))


verb(
    "namespaces",
    "get-schema-compatibility-strategy",
    "the namespace's schema compatibility strategy",
    NAMESPACE,
)(_on_namespace("GET", "/schemaCompatibilityStrategy"))


def build_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``[--admin-url URL] [--output text|json] GROUP VERB ...`` to ``parser``."""
    parser.add_argument(
        "--admin-url",
        default=None,
        help="the broker's HTTP URL (default: webServiceUrl of the client.conf, else "
        f"{connection.DEFAULT_URL})",
    )
    connection.add_arguments(parser)
    parser.add_argument(
        "--output", "-o", choices=("text", "json"), default="text", help="text tables or JSON"
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")
    verbs: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for group, help_text in GROUPS.items():
        p = groups.add_parser(group, help=help_text, description=help_text)
        verbs[group] = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for (group, name), spec in VERBS.items():
        p = verbs[group].add_parser(name, help=spec.help, description=spec.help)
        for item in spec.args:
            if isinstance(item, tuple):
                exclusive = p.add_mutually_exclusive_group(required=True)
                for one in item:
                    exclusive.add_argument(*one.flags, **one.options)
            else:
                p.add_argument(*item.flags, **item.options)


def request_for(args: argparse.Namespace) -> Request:
    """The request the parsed command line asks for."""
    return VERBS[(args.group, args.verb)].build(args)
