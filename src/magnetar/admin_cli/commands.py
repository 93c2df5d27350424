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
    "bookies": "bookies: state and rack, rack placement, under-replicated ledgers, decommission",
    "broker-stats": "what a broker serves now (its topics' stats)",
    "tenants": "tenants: admin roles and allowed clusters",
    "namespaces": "namespaces and their policies",
    "topics": "topics, partitions, subscriptions and topic policies",
    "topicPolicies": "a topic's own policies, overriding its namespace's (pulsar-admin's group)",
    "schemas": "topic schemas: history, upload, delete, compatibility",
    "functions": "Pulsar Functions (Python): create, run, status, stats, state",
    "transactions": "transaction coordinators and live transactions (/admin/v3/transactions)",
    "resource-quotas": "the default resource quota and namespace bundles' own",
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


_CLUSTER_URLS = (
    arg("--url", help="the cluster's admin URL, http://host:port (serviceUrl)"),
    arg("--url-secure", help="https://host:port (serviceUrlTls)"),
    arg("--broker-url", help="pulsar://host:port (brokerServiceUrl): what replicators use"),
    arg("--broker-url-secure", help="pulsar+ssl://host:port (brokerServiceUrlTls)"),
)


def _cluster_data(a: argparse.Namespace) -> dict[str, str]:
    given = {
        "serviceUrl": a.url,
        "serviceUrlTls": a.url_secure,
        "brokerServiceUrl": a.broker_url,
        "brokerServiceUrlTls": a.broker_url_secure,
    }
    return {k: v for k, v in given.items() if v is not None}


@verb(
    "clusters",
    "create",
    "register a cluster of the instance (its service URLs)",
    arg("cluster", help="cluster name"),
    *_CLUSTER_URLS,
)
def _clusters_create(a: argparse.Namespace) -> Request:
    return Request("PUT", f"{V2}/clusters/{name_path(a.cluster, 'cluster')}", _cluster_data(a))


@verb(
    "clusters",
    "update",
    "replace a cluster's service URLs",
    arg("cluster", help="cluster name"),
    *_CLUSTER_URLS,
)
def _clusters_update(a: argparse.Namespace) -> Request:
    return Request("POST", f"{V2}/clusters/{name_path(a.cluster, 'cluster')}", _cluster_data(a))


@verb("clusters", "delete", "delete a cluster's record", arg("cluster", help="cluster name"))
def _clusters_delete(a: argparse.Namespace) -> Request:
    return Request("DELETE", f"{V2}/clusters/{name_path(a.cluster, 'cluster')}")


@verb("brokers", "list", "the live brokers of a cluster", arg("cluster", help="cluster name"))
def _brokers_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/brokers/{name_path(a.cluster, 'cluster')}")


@verb("brokers", "healthcheck", "check that the broker is healthy (prints ok)")
def _brokers_health(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/brokers/health")


@verb("broker-stats", "topics", "the topics this broker serves, by namespace, bundle, domain")
def _broker_stats_topics(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/broker-stats/topics")


@verb("broker-stats", "load-report", "this broker's load (Pulsar's LocalBrokerData)")
def _broker_stats_load_report(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/broker-stats/load-report")


# --- bookies ------------------------------------------------------------------------------------

BOOKIE = arg("bookie", help="bookie id (host:port)")


@verb("bookies", "list", "the bookies with their state (rw, ro, decommissioning, gone) and rack")
def _bookies_list(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/all")


@verb("bookies", "list-bookies", "pulsar-admin's name of `list`: the bookies of the cluster")
def _bookies_list_bookies(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/all")


RACK_BOOKIE = arg("-b", "--bookie", required=True, help="bookie id (host:port)")


def _rack_path(a: argparse.Namespace) -> str:
    return f"{V2}/bookies/racks-info/{name_path(a.bookie, 'bookie')}"


@verb("bookies", "racks-placement", "every bookie's rack placement, by group")
def _bookies_racks_placement(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V2}/bookies/racks-info")


@verb("bookies", "get-bookie-rack", "a bookie's rack placement", RACK_BOOKIE)
def _bookies_get_rack(a: argparse.Namespace) -> Request:
    return Request("GET", _rack_path(a))


@verb(
    "bookies",
    "set-bookie-rack",
    "place a bookie in a rack of a group (new ledgers' ensembles follow it)",
    RACK_BOOKIE,
    arg("-r", "--rack", required=True, help="rack name, e.g. /rack1"),
    arg("-g", "--group", dest="bookie_group", default="default", help="bookie group"),
    arg("--hostname", help="the bookie's hostname, recorded beside the rack"),
)
def _bookies_set_rack(a: argparse.Namespace) -> Request:
    info: dict[str, Any] = {"rack": a.rack}
    if a.hostname is not None:
        info["hostname"] = a.hostname
    group = urllib.parse.quote(a.bookie_group, safe="")
    return Request("POST", f"{_rack_path(a)}?group={group}", info)


@verb("bookies", "delete-bookie-rack", "remove a bookie's rack placement", RACK_BOOKIE)
def _bookies_delete_rack(a: argparse.Namespace) -> Request:
    return Request("DELETE", _rack_path(a))


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


@verb(
    "namespaces",
    "set-clusters",
    "the clusters a namespace is replicated to",
    NAMESPACE,
    arg("-c", "--clusters", required=True, help="comma-separated cluster names"),
)
def _ns_set_clusters(a: argparse.Namespace) -> Request:
    return Request("POST", _ns(a, "/replication"), _csv(a.clusters))


@verb("namespaces", "get-clusters", "the clusters a namespace is replicated to", NAMESPACE)
def _ns_get_clusters(a: argparse.Namespace) -> Request:
    return Request("GET", _ns(a, "/replication"))


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


_QUOTA_ARGS = (
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


@verb("namespaces", "set-backlog-quota", "limit the backlog by size and/or age", NAMESPACE,
      *_QUOTA_ARGS)  # fmt: skip
def _ns_set_quota(a: argparse.Namespace) -> Request:
    return Request("POST", _ns(a, f"/backlogQuota?backlogQuotaType={a.type}"), _quota(a))


def _quota(a: argparse.Namespace) -> dict[str, Any]:
    return {"limitSize": a.limit, "limitTime": a.limit_time, "policy": a.policy}


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
    "get-offload-threshold-in-seconds": "/offloadThresholdInSeconds",
    "get-schema-validation-enforce": "/schemaValidationEnforced",
    "get-schema-autoupdate-strategy": "/isAllowAutoUpdateSchema",
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
    "set-max-producers": Setting(
        "the topic's own producer limit (0: none)",
        (arg("-p", "--max-producers", type=convert.non_negative, required=True,
             dest="max_producers"),),
        "POST", "/maxProducers", lambda a: a.max_producers,
    ),
    "set-max-consumers": Setting(
        "the topic's own consumer limit (0: none)",
        (arg("-c", "--max-consumers", type=convert.non_negative, required=True,
             dest="max_consumers"),),
        "POST", "/maxConsumers", lambda a: a.max_consumers,
    ),
    "set-offload-policies": Setting(
        "the topic's own offload thresholds and deletion lag",
        (
            arg("-d", "--driver", required=True, help="aws-s3, S3, ... (Pulsar's names)"),
            arg("-r", "--region", default=None), arg("-b", "--bucket", default=None),
            arg("-e", "--endpoint", default=None),
            arg("-t", "--offloadAfterThreshold", type=convert.size_bytes, default=None,
                dest="threshold", help="offload beyond this size on bookies, e.g. 10G"),
            arg("-ts", "--offloadAfterThresholdInSeconds", type=convert.seconds,
                default=None, dest="threshold_s", help="offload ledgers older than, e.g. 1d"),
            arg("-dl", "--offloadDeletionLagInMillis", type=convert.non_negative,
                default=None, dest="lag_ms", help="delete bookie copies after this many ms"),
        ),
        "POST", "/offloadPolicies", lambda a: _offload_policies(a),
    ),
}  # fmt: skip
"""Topic verbs sending one value: verb -> its setting."""

_TOPIC_POLICY_SETTINGS = {
    name: _TOPIC_SETTINGS[name]
    for name in (
        "set-message-ttl", "set-retention", "set-deduplication", "set-compaction-threshold",
        "set-max-producers", "set-max-consumers", "set-offload-policies",
    )
}  # fmt: skip
"""The ``topicPolicies`` group: the topic-level policies of ``topics``, pulsar-admin's way."""

_NS_SETTINGS["set-max-producers-per-topic"] = Setting(
    "the producer limit of each topic of the namespace (0: none)",
    (arg("-p", "--max-producers-per-topic", type=convert.non_negative, required=True,
         dest="max_producers"),),
    "POST", "/maxProducersPerTopic", lambda a: a.max_producers,
)  # fmt: skip
_NS_SETTINGS["set-max-consumers-per-topic"] = Setting(
    "the consumer limit of each topic of the namespace (0: none)",
    (arg("-c", "--max-consumers-per-topic", type=convert.non_negative, required=True,
         dest="max_consumers"),),
    "POST", "/maxConsumersPerTopic", lambda a: a.max_consumers,
)  # fmt: skip
_NS_GETTERS["get-max-producers-per-topic"] = "/maxProducersPerTopic"
_NS_GETTERS["get-max-consumers-per-topic"] = "/maxConsumersPerTopic"
_NS_REMOVERS["remove-max-producers-per-topic"] = "/maxProducersPerTopic"
_NS_REMOVERS["remove-max-consumers-per-topic"] = "/maxConsumersPerTopic"


def _offload_policies(a: argparse.Namespace) -> dict[str, Any]:
    """Pulsar's OffloadPolicies JSON of ``set-offload-policies`` (unset fields left out)."""
    fields = {
        "managedLedgerOffloadDriver": a.driver,
        "managedLedgerOffloadRegion": a.region,
        "managedLedgerOffloadBucket": a.bucket,
        "managedLedgerOffloadServiceEndpoint": a.endpoint,
        "managedLedgerOffloadThresholdInBytes": a.threshold,
        "managedLedgerOffloadThresholdInSeconds": a.threshold_s,
        "managedLedgerOffloadDeletionLagInMillis": a.lag_ms,
    }
    return {k: v for k, v in fields.items() if v is not None}


for _group, _target, _path, _settings in (
    ("namespaces", NAMESPACE, _ns, _NS_SETTINGS),
    ("topics", TOPIC, _topic, _TOPIC_SETTINGS),
    ("topicPolicies", TOPIC, _topic, _TOPIC_POLICY_SETTINGS),
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
    "backlog": ("GET", "/backlog", "stored entries, each durable cursor's (replicators') backlog"),
    "unload": ("PUT", "/unload", "unload a topic (clients reconnect)"),
    "terminate": ("POST", "/terminate", "refuse further messages; prints the last message id"),
    "subscriptions": ("GET", "/subscriptions", "the subscriptions of a topic"),
    "last-message-id": ("GET", "/lastMessageId", "the last stored message's id"),
    "compact": ("PUT", "/compaction", "start a compaction of the topic (409 while one runs)"),
    "compaction-status": ("GET", "/compaction", "the last compaction's status (and error)"),
    "partitioned-stats-internal": (
        "GET",
        "/partitioned-internalStats",
        "each partition's managed ledger: ledgers and cursors",
    ),
    "partitioned-terminate": (
        "POST",
        "/terminate/partitions",
        "terminate every partition; prints each one's last message id",
    ),
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


@verb(
    "topics",
    "get-replicated-subscription-status",
    "whether a subscription is replicated to the other clusters (per partition)",
    TOPIC,
    SUBSCRIPTION,
)
def _topics_get_replicated_status(a: argparse.Namespace) -> Request:
    return Request("GET", _sub(a, "/replicatedSubscriptionStatus"))


@verb(
    "topics",
    "set-replicated-subscription-status",
    "make a subscription replicated to the other clusters, or not",
    TOPIC,
    SUBSCRIPTION,
    arg("--enable", action="store_true", help="replicated"),
    arg("--disable", action="store_true", help="not replicated"),
)
def _topics_set_replicated_status(a: argparse.Namespace) -> Request:
    if a.enable == a.disable:
        raise AdminCliError("one of --enable and --disable is required", 2)
    return Request("POST", _sub(a, "/replicatedSubscriptionStatus"), bool(a.enable))


@verb(
    "topics",
    "peek-messages",
    "the next messages a subscription has not acknowledged (they stay unconsumed)",
    TOPIC,
    SUBSCRIPTION,
    arg("-n", "--count", type=convert.positive, default=1, help="how many (default 1)"),
)
def _topics_peek(a: argparse.Namespace) -> Request:
    return Request("GET", _sub(a, "/position/1"), messages=a.count)


@verb(
    "topics",
    "examine-message",
    "the n-th stored message from the oldest or the newest, acknowledged or not",
    TOPIC,
    arg(
        "-i", "--initialPosition", choices=("latest", "earliest"), default="latest",
        dest="initial_position", help="count from the newest (latest, default) or the oldest",
    ),
    arg(
        "-m", "--messagePosition", type=convert.positive, default=1, dest="message_position",
        help="which one, from 1 (default 1)",
    ),
)  # fmt: skip
def _topics_examine(a: argparse.Namespace) -> Request:
    query = f"?initialPosition={a.initial_position}&messagePosition={a.message_position}"
    return Request("GET", _topic(a, f"/examinemessage{query}"), messages=1)


@verb(
    "topics",
    "get-message-by-id",
    "the stored message (a batch whole) at a ledger and entry",
    TOPIC,
    arg("-l", "--ledgerId", type=convert.non_negative, required=True, dest="ledger_id"),
    arg("-e", "--entryId", type=convert.non_negative, required=True, dest="entry_id"),
)
def _topics_get_message_by_id(a: argparse.Namespace) -> Request:
    return Request("GET", _topic(a, f"/ledger/{a.ledger_id}/entry/{a.entry_id}"), messages=1)


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


for _group in ("topics", "topicPolicies"):
    for _name, _tail in {
        "message-ttl": "/messageTTL",
        "retention": "/retention",
        "deduplication": "/deduplicationEnabled",
        "compaction-threshold": "/compactionThreshold",
        "max-producers": "/maxProducers",
        "max-consumers": "/maxConsumers",
        "offload-policies": "/offloadPolicies",
    }.items():
        help_text = f"the topic's own {_name} (null: unset)"
        verb(_group, f"get-{_name}", help_text, TOPIC)(_on_topic("GET", _tail))
        verb(_group, f"remove-{_name}", f"remove the topic's own {_name}", TOPIC)(
            _on_topic("DELETE", _tail)
        )


def _topic_quota_verbs(group: str) -> None:
    verb(
        group, "set-backlog-quota", "the topic's own backlog quota of a type", TOPIC, *_QUOTA_ARGS
    )(lambda a: Request("POST", _topic(a, f"/backlogQuota?backlogQuotaType={a.type}"), _quota(a)))
    verb(
        group,
        "remove-backlog-quota",
        "remove the topic's own backlog quota of a type",
        TOPIC,
        _QUOTA_TYPE,
    )(lambda a: Request("DELETE", _topic(a, f"/backlogQuota?backlogQuotaType={a.type}")))
    verb(
        group,
        "get-backlog-quotas",
        "the topic's own backlog quotas ({}: none)",
        TOPIC,
        arg(
            "-ap",
            "--applied",
            action="store_true",
            help="the quotas in force (topic, namespace or broker default)",
        ),
    )(
        lambda a: Request(
            "GET", _topic(a, "/backlogQuotaMap" + ("?applied=true" if a.applied else ""))
        )
    )


for _group in ("topics", "topicPolicies"):
    _topic_quota_verbs(_group)


# --- transactions -------------------------------------------------------------------------------

V3_TXN: Final = "/admin/v3/transactions"
_COORDINATOR = arg(
    "-c", "--coordinator-id", type=convert.non_negative, default=None, dest="coordinator",
    help="one coordinator (default: each)",
)  # fmt: skip
_TXN_ID = (
    arg("-m", "--most-sig-bits", type=convert.non_negative, required=True, dest="most",
        help="the transaction id's first part (its coordinator)"),
    arg("-l", "--least-sig-bits", type=convert.non_negative, required=True, dest="least",
        help="the transaction id's second part"),
)  # fmt: skip


@verb("transactions", "coordinator-stats", "transaction coordinators' state", _COORDINATOR)
def _txn_coordinator_stats(a: argparse.Namespace) -> Request:
    query = "" if a.coordinator is None else f"?coordinatorId={a.coordinator}"
    return Request("GET", f"{V3_TXN}/coordinatorStats{query}")


@verb("transactions", "transaction-metadata", "a live transaction's status and topics", *_TXN_ID)
def _txn_metadata(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V3_TXN}/transactionMetadata/{a.most}/{a.least}")


@verb(
    "transactions",
    "slow-transactions",
    "the live transactions open longer than a time",
    arg("-t", "--time", type=convert.seconds, required=True, help="e.g. 30s, 5m"),
    _COORDINATOR,
)
def _txn_slow(a: argparse.Namespace) -> Request:
    query = "" if a.coordinator is None else f"?coordinatorId={a.coordinator}"
    return Request("GET", f"{V3_TXN}/slowTransactions/{a.time * 1000}{query}")


@verb(
    "transactions",
    "transaction-buffer-stats",
    "a topic's transaction buffer: how far consumers may read, its live transactions",
    TOPIC,
)
def _txn_buffer_stats(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V3_TXN}/transactionBufferStats/{_txn_topic(a)}")


def _txn_topic(a: argparse.Namespace) -> str:
    """tenant/ns/topic of a persistent topic, each part quoted."""
    domain, tenant, ns, local = convert.topic_parts(a.topic)
    if domain != "persistent":
        raise AdminCliError("transactions apply to persistent topics only", 2)
    return "/".join(urllib.parse.quote(p, safe="") for p in (tenant, ns, local))


_TXN_SUBSCRIPTION = arg("-s", "--sub-name", dest="subscription", required=True, help="subscription")


@verb(
    "transactions",
    "transaction-in-buffer-stats",
    "one transaction in a topic's buffer: its first message's position, whether aborted",
    TOPIC,
    *_TXN_ID,
)
def _txn_in_buffer_stats(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V3_TXN}/transactionInBufferStats/{_txn_topic(a)}/{a.most}/{a.least}")


@verb(
    "transactions",
    "pending-ack-stats",
    "the transactions holding acknowledgements on a subscription",
    TOPIC,
    _TXN_SUBSCRIPTION,
)
def _txn_pending_ack_stats(a: argparse.Namespace) -> Request:
    sub = urllib.parse.quote(a.subscription, safe="")
    return Request("GET", f"{V3_TXN}/pendingAckStats/{_txn_topic(a)}/{sub}")


@verb(
    "transactions",
    "transaction-in-pending-ack-stats",
    "one transaction's acknowledgements held on a subscription",
    TOPIC,
    _TXN_SUBSCRIPTION,
    *_TXN_ID,
)
def _txn_in_pending_ack_stats(a: argparse.Namespace) -> Request:
    sub = urllib.parse.quote(a.subscription, safe="")
    path = f"transactionInPendingAckStats/{_txn_topic(a)}/{sub}/{a.most}/{a.least}"
    return Request("GET", f"{V3_TXN}/{path}")


@verb("transactions", "abort-transaction", "abort a live transaction", *_TXN_ID)
def _txn_abort(a: argparse.Namespace) -> Request:
    return Request("POST", f"{V3_TXN}/abortTransaction/{a.most}/{a.least}")


# --- resource quotas ----------------------------------------------------------------------------

_QUOTA_BUNDLE = (
    arg("-n", "--namespace", default=None, dest="quota_ns", help="tenant/namespace"),
    arg("-b", "--bundle", default=None, help="0x..._0x... (with --namespace)"),
)


def _quota_path(a: argparse.Namespace, *, required: bool = False) -> str:
    if (a.quota_ns is None) != (a.bundle is None):
        raise AdminCliError("--namespace and --bundle go together", 2)
    if a.quota_ns is None:
        if required:
            raise AdminCliError("--namespace and --bundle are required", 2)
        return f"{V2}/resource-quotas"
    return (
        f"{V2}/resource-quotas/{namespace_path(a.quota_ns)}/{convert.path_part(a.bundle, 'bundle')}"
    )


@verb("resource-quotas", "get", "the default quota, or a bundle's", *_QUOTA_BUNDLE)
def _quota_get(a: argparse.Namespace) -> Request:
    return Request("GET", _quota_path(a))


@verb(
    "resource-quotas",
    "set",
    "set the default quota, or a bundle's",
    arg("-mi", "--msgRateIn", type=float, required=True, dest="msg_rate_in"),
    arg("-mo", "--msgRateOut", type=float, required=True, dest="msg_rate_out"),
    arg("-bi", "--bandwidthIn", type=float, required=True, dest="bandwidth_in"),
    arg("-bo", "--bandwidthOut", type=float, required=True, dest="bandwidth_out"),
    arg("-mem", "--memory", type=float, required=True),
    arg("-d", "--dynamic", action="store_true", help="may be adjusted automatically"),
    *_QUOTA_BUNDLE,
)
def _quota_set(a: argparse.Namespace) -> Request:
    body = {
        "msgRateIn": a.msg_rate_in, "msgRateOut": a.msg_rate_out,
        "bandwidthIn": a.bandwidth_in, "bandwidthOut": a.bandwidth_out,
        "memory": a.memory, "dynamic": a.dynamic,
    }  # fmt: skip
    return Request("POST", _quota_path(a), body)


@verb(
    "resource-quotas",
    "reset-namespace-bundle-quota",
    "remove a bundle's own quota (the default applies)",
    *_QUOTA_BUNDLE,
)
def _quota_reset(a: argparse.Namespace) -> Request:
    return Request("DELETE", _quota_path(a, required=True))


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
