"""``magnetar admin``: a pulsar-admin-like command line for the admin REST API v2.

An HTTP client only (it imports nothing of the broker): verbs and flags follow pulsar-admin
where they exist (``tenants create``, ``namespaces set-retention --time 10m --size 1G``,
``topics create-partitioned-topic -p 4``, ``topics reset-cursor -s SUB --time 1h`` ...).
Output is a readable table by default, JSON with ``--output json``; an HTTP error prints
``magnetar admin: <status> <reason>`` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any


class AdminCliError(Exception):
    """An error to print (with its exit status)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, url: str) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise AdminCliError(f"--admin-url must be an http:// or https:// URL, got {url!r}", 2)
        self.base = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - scheme checked in __init__
            self.base + path, data=data, method=method
        )
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                reason = json.loads(text).get("reason", text)
            except (ValueError, AttributeError):
                reason = text or err.reason
            raise AdminCliError(f"{err.code} {reason}") from None
        except urllib.error.URLError as err:
            raise AdminCliError(f"cannot reach {self.base}: {err.reason}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")


# --- argument conversions ----------------------------------------------------------------------

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNITS_B = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def seconds(text: str) -> int:
    """``30s``, ``10m``, ``2h``, ``1d``, ``-1`` (infinite), or plain seconds."""
    m = re.fullmatch(r"(-?\d+)([smhdw]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (e.g. 30s, 10m, 2h, 1d, -1)")
    value, unit = int(m.group(1)), m.group(2) or "s"
    return value if value < 0 else value * _UNITS_S[unit]


def size_bytes(text: str) -> int:
    """``500k``, ``100M``, ``10G``, ``-1`` (infinite), or plain bytes."""
    m = re.fullmatch(r"(-?\d+)([kmgt]?)b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100M, 10G, -1)")
    value, unit = int(m.group(1)), m.group(2)
    return value if value < 0 or not unit else value * _UNITS_B[unit]


def topic_path(name: str) -> str:
    """``persistent://t/ns/topic``, ``t/ns/topic`` or ``topic`` -> ``persistent/t/ns/topic``."""
    domain = "persistent"
    if "://" in name:
        domain, _, name = name.partition("://")
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts) or domain not in ("persistent", "non-persistent"):
        raise AdminCliError(f"invalid topic name {name!r}: use [persistent://]tenant/ns/topic", 2)
    return "/".join([domain, *(urllib.parse.quote(p, safe="") for p in parts)])


def namespace_path(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise AdminCliError(f"invalid namespace {name!r}: use tenant/namespace", 2)
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def message_id(text: str) -> dict[str, int]:
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    ledger, _, entry = text.partition(":")
    try:
        return {"ledgerId": int(ledger), "entryId": int(entry)}
    except ValueError:
        raise AdminCliError(
            f"invalid message id {text!r}: use LEDGER:ENTRY or earliest", 2
        ) from None


# --- output -------------------------------------------------------------------------------------


def render(value: Any, output: str) -> str:
    if output == "json":
        return json.dumps(value, indent=2, sort_keys=True)
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(render(v, "text") if isinstance(v, dict | list) else str(v) for v in value)
    if isinstance(value, dict):
        flat = _flatten(value)
        width = max((len(k) for k in flat), default=0)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in flat.items())
    return str(value)


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            out.update(_flatten(item, name + "."))
        elif isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            for n, sub in enumerate(item):
                out.update(_flatten(sub, f"{name}[{n}]."))
        else:
            out[name] = json.dumps(item) if isinstance(item, list | bool) or item is None else item
    return out


# --- commands -----------------------------------------------------------------------------------

Command = Callable[[Client, argparse.Namespace], Any]
V2 = "/admin/v2"


def _csv(text: str | None) -> list[str]:
    return [t for t in (text or "").split(",") if t]


def _tenant_info(a: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {"adminRoles": _csv(a.admin_roles)}
    if a.allowed_clusters:
        info["allowedClusters"] = _csv(a.allowed_clusters)
    return info


def _sub(a: argparse.Namespace) -> str:
    return f"{V2}/{topic_path(a.topic)}/subscription/{urllib.parse.quote(a.subscription, safe='')}"


COMMANDS: dict[tuple[str, str], Command] = {
    ("clusters", "list"): lambda c, a: c.call("GET", f"{V2}/clusters"),
    ("clusters", "get"): lambda c, a: c.call("GET", f"{V2}/clusters/{a.name}"),
    ("brokers", "list"): lambda c, a: c.call("GET", f"{V2}/brokers/{a.cluster}"),
    ("brokers", "healthcheck"): lambda c, a: c.call("GET", f"{V2}/brokers/health"),
    ("tenants", "list"): lambda c, a: c.call("GET", f"{V2}/tenants"),
    ("tenants", "get"): lambda c, a: c.call("GET", f"{V2}/tenants/{a.name}"),
    ("tenants", "create"): lambda c, a: c.call("PUT", f"{V2}/tenants/{a.name}", _tenant_info(a)),
    ("tenants", "update"): lambda c, a: c.call("POST", f"{V2}/tenants/{a.name}", _tenant_info(a)),
    ("tenants", "delete"): lambda c, a: c.call("DELETE", f"{V2}/tenants/{a.name}"),
    ("namespaces", "list"): lambda c, a: c.call("GET", f"{V2}/namespaces/{a.tenant}"),
    ("namespaces", "create"): lambda c, a: c.call(
        "PUT", f"{V2}/namespaces/{namespace_path(a.namespace)}"
    ),
    ("namespaces", "delete"): lambda c, a: c.call(
        "DELETE", f"{V2}/namespaces/{namespace_path(a.namespace)}?force={str(a.force).lower()}"
    ),
    ("namespaces", "policies"): lambda c, a: c.call(
        "GET", f"{V2}/namespaces/{namespace_path(a.namespace)}"
    ),
    ("namespaces", "set-retention"): lambda c, a: c.call(
        "POST",
        f"{V2}/namespaces/{namespace_path(a.namespace)}/retention",
        {
            "retentionTimeInMinutes": a.time if a.time < 0 else a.time // 60,
            "retentionSizeInMB": a.size if a.size < 0 else a.size // (1 << 20),
        },
    ),
    ("namespaces", "get-retention"): lambda c, a: c.call(
        "GET", f"{V2}/namespaces/{namespace_path(a.namespace)}/retention"
    ),
    ("namespaces", "set-message-ttl"): lambda c, a: c.call(
        "POST", f"{V2}/namespaces/{namespace_path(a.namespace)}/messageTTL", a.messageTTL
    ),
    ("namespaces", "get-message-ttl"): lambda c, a: c.call(
        "GET", f"{V2}/namespaces/{namespace_path(a.namespace)}/messageTTL"
    ),
    ("namespaces", "set-deduplication"): lambda c, a: c.call(
        "POST", f"{V2}/namespaces/{namespace_path(a.namespace)}/deduplication", a.enable
    ),
    ("namespaces", "set-backlog-quota"): lambda c, a: c.call(
        "POST",
        f"{V2}/namespaces/{namespace_path(a.namespace)}/backlogQuota",
        {"limitSize": a.limit, "limitTime": a.limitTime, "policy": a.policy},
    ),
    ("namespaces", "get-backlog-quotas"): lambda c, a: c.call(
        "GET", f"{V2}/namespaces/{namespace_path(a.namespace)}/backlogQuotaMap"
    ),
    ("namespaces", "set-auto-topic-creation"): lambda c, a: c.call(
        "POST",
        f"{V2}/namespaces/{namespace_path(a.namespace)}/autoTopicCreation",
        {"allowAutoTopicCreation": a.enable, "topicType": a.type}
        | ({"defaultNumPartitions": a.num_partitions} if a.type == "partitioned" else {}),
    ),
    ("topics", "list"): lambda c, a: c.call(
        "GET", f"{V2}/persistent/{namespace_path(a.namespace)}"
    ),
    ("topics", "create"): lambda c, a: c.call("PUT", f"{V2}/{topic_path(a.topic)}"),
    ("topics", "delete"): lambda c, a: c.call(
        "DELETE", f"{V2}/{topic_path(a.topic)}?force={str(a.force).lower()}"
    ),
    ("topics", "create-partitioned-topic"): lambda c, a: c.call(
        "PUT", f"{V2}/{topic_path(a.topic)}/partitions", a.partitions
    ),
    ("topics", "update-partitioned-topic"): lambda c, a: c.call(
        "POST", f"{V2}/{topic_path(a.topic)}/partitions", a.partitions
    ),
    ("topics", "get-partitioned-topic-metadata"): lambda c, a: c.call(
        "GET", f"{V2}/{topic_path(a.topic)}/partitions"
    ),
    ("topics", "delete-partitioned-topic"): lambda c, a: c.call(
        "DELETE", f"{V2}/{topic_path(a.topic)}/partitions?force={str(a.force).lower()}"
    ),
    ("topics", "stats"): lambda c, a: c.call("GET", f"{V2}/{topic_path(a.topic)}/stats"),
    ("topics", "stats-internal"): lambda c, a: c.call(
        "GET", f"{V2}/{topic_path(a.topic)}/internalStats"
    ),
    ("topics", "partitioned-stats"): lambda c, a: c.call(
        "GET", f"{V2}/{topic_path(a.topic)}/partitioned-stats"
    ),
    ("topics", "subscriptions"): lambda c, a: c.call(
        "GET", f"{V2}/{topic_path(a.topic)}/subscriptions"
    ),
    ("topics", "create-subscription"): lambda c, a: c.call(
        "PUT", _sub(a), None if a.messageId == "latest" else message_id(a.messageId)
    ),
    ("topics", "unsubscribe"): lambda c, a: c.call(
        "DELETE", f"{_sub(a)}?force={str(a.force).lower()}"
    ),
    ("topics", "skip"): lambda c, a: c.call("POST", f"{_sub(a)}/skip/{a.count}"),
    ("topics", "clear-backlog"): lambda c, a: c.call("POST", f"{_sub(a)}/skip_all"),
    ("topics", "reset-cursor"): lambda c, a: (
        c.call("POST", f"{_sub(a)}/resetcursor/{int((time.time() - a.time) * 1000)}")
        if a.time is not None
        else c.call("POST", f"{_sub(a)}/resetcursor", message_id(a.messageId))
    ),
    ("topics", "unload"): lambda c, a: c.call("PUT", f"{V2}/{topic_path(a.topic)}/unload"),
    ("topics", "terminate"): lambda c, a: c.call("POST", f"{V2}/{topic_path(a.topic)}/terminate"),
}


def build_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080", help="broker HTTP URL")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")

    def verbs(group: str) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        p = groups.add_parser(group, help=f"manage {group}")
        return p.add_subparsers(dest="verb", required=True, metavar="VERB")

    clusters = verbs("clusters")
    clusters.add_parser("list")
    clusters.add_parser("get").add_argument("name")

    brokers = verbs("brokers")
    brokers.add_parser("list").add_argument("cluster", nargs="?", default="standalone")
    brokers.add_parser("healthcheck")

    tenants = verbs("tenants")
    tenants.add_parser("list")
    tenants.add_parser("get").add_argument("name")
    for verb in ("create", "update"):
        p = tenants.add_parser(verb)
        p.add_argument("name")
        p.add_argument("-r", "--admin-roles", help="comma-separated roles")
        p.add_argument("-c", "--allowed-clusters", help="comma-separated clusters")
    tenants.add_parser("delete").add_argument("name")

    ns = verbs("namespaces")
    ns.add_parser("list").add_argument("tenant")
    for verb in ("create", "policies", "get-retention", "get-message-ttl", "get-backlog-quotas"):
        ns.add_parser(verb).add_argument("namespace")
    p = ns.add_parser("delete")
    p.add_argument("namespace")
    p.add_argument("-f", "--force", action="store_true")
    p = ns.add_parser("set-retention")
    p.add_argument("namespace")
    p.add_argument("--time", type=seconds, required=True, help="e.g. 10m, 3h, -1")
    p.add_argument("--size", type=size_bytes, required=True, help="e.g. 100M, 10G, -1")
    p = ns.add_parser("set-message-ttl")
    p.add_argument("namespace")
    p.add_argument("--messageTTL", "-ttl", type=seconds, required=True, dest="messageTTL")
    p = ns.add_parser("set-deduplication")
    p.add_argument("namespace")
    on_off = p.add_mutually_exclusive_group(required=True)
    on_off.add_argument("--enable", "-e", action="store_true", dest="enable")
    on_off.add_argument("--disable", "-d", action="store_false", dest="enable")
    p = ns.add_parser("set-backlog-quota")
    p.add_argument("namespace")
    p.add_argument("--limit", "-l", type=size_bytes, default=-1)
    p.add_argument("--limitTime", "-lt", type=seconds, default=-1, dest="limitTime")
    p.add_argument(
        "--policy",
        "-p",
        required=True,
        choices=("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    )
    p = ns.add_parser("set-auto-topic-creation")
    p.add_argument("namespace")
    on_off = p.add_mutually_exclusive_group(required=True)
    on_off.add_argument("--enable", "-e", action="store_true", dest="enable")
    on_off.add_argument("--disable", "-d", action="store_false", dest="enable")
    p.add_argument(
        "--type", "-t", choices=("partitioned", "non-partitioned"), default="non-partitioned"
    )
    p.add_argument("--num-partitions", "-n", type=int, default=1)

    topics = verbs("topics")
    topics.add_parser("list").add_argument("namespace")
    for verb in ("create", "stats", "stats-internal", "partitioned-stats", "subscriptions",
                 "get-partitioned-topic-metadata", "unload", "terminate"):  # fmt: skip
        topics.add_parser(verb).add_argument("topic")
    for verb in ("delete", "delete-partitioned-topic"):
        p = topics.add_parser(verb)
        p.add_argument("topic")
        p.add_argument("-f", "--force", action="store_true")
    for verb in ("create-partitioned-topic", "update-partitioned-topic"):
        p = topics.add_parser(verb)
        p.add_argument("topic")
        p.add_argument("-p", "--partitions", type=int, required=True)
    p = topics.add_parser("create-subscription")
    p.add_argument("topic")
    p.add_argument("-s", "--subscription", required=True)
    p.add_argument("-m", "--messageId", default="latest", help="latest, earliest or L:E")
    p = topics.add_parser("unsubscribe")
    p.add_argument("topic")
    p.add_argument("-s", "--subscription", required=True)
    p.add_argument("-f", "--force", action="store_true")
    p = topics.add_parser("skip")
    p.add_argument("topic")
    p.add_argument("-s", "--subscription", required=True)
    p.add_argument("-n", "--count", type=int, required=True)
    p = topics.add_parser("clear-backlog")
    p.add_argument("topic")
    p.add_argument("-s", "--subscription", required=True)
    p = topics.add_parser("reset-cursor")
    p.add_argument("topic")
    p.add_argument("-s", "--subscription", required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--time", "-t", type=seconds, help="how long ago, e.g. 10m")
    target.add_argument("--messageId", "-m", help="LEDGER:ENTRY")


def run(args: argparse.Namespace) -> int:
    command = COMMANDS[(args.group, args.verb)]
    try:
        result = command(Client(args.admin_url), args)
    except AdminCliError as err:
        print(f"magnetar admin: {err}", file=sys.stderr)
        return err.status
    text = render(result, args.output)
    if text:
        print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magnetar admin", description=__doc__)
    build_parser(parser)
    return run(parser.parse_args(argv))
