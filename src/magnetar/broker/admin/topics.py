"""Topics and subscriptions: ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/...``.

Create/delete (non-partitioned and partitioned), list, partitions (get/grow), stats,
internalStats, partitioned-stats, lastMessageId, subscriptions (list, create at a position,
delete, skip, clear backlog, expire, reset by time or message id, peek the n-th message),
unload, terminate, and the topic-level
policies (messageTTL, retention, deduplicationEnabled) that override the namespace's.

Operations on a topic's data run on the broker that owns it: another broker answers
``307 Temporary Redirect`` to the owner's web URL (what Pulsar does).

Non-persistent topics exist while a broker serves them (loaded by a producer, a consumer or
this API; partitioned ones keep their partition count in the metadata store): they are
listed by asking the owner of each bundle of the namespace (``GET .../{bundle}``, Pulsar's
path), and reached on the broker that serves them. Their stats add ``msgDropRate``, their
internal stats have no ledgers and fresh cursors (Pulsar's shape). What needs stored
messages (terminate, skip, clear backlog, reset cursor, expire) answers 405 naming the
operation; creating a subscription answers Pulsar's 400 (only clients create them).
"""

from __future__ import annotations

import base64
import datetime
import json
import time
from typing import Any

from aiohttp import web
from yarl import URL

from magnetar.broker import enforcement, policies
from magnetar.broker.admin import offload, remote, validation
from magnetar.broker.admin.common import (
    AdminError,
    Handler,
    accepts,
    body,
    check_name,
    parsed,
    policies_changed,
    service,
)
from magnetar.broker.contracts import BrokerError
from magnetar.broker.ownership import Bundle, bundles_of
from magnetar.broker.service import ALL_DOMAINS, BrokerService, managed_ledger_name
from magnetar.broker.topic import NonPersistentTopic, PersistentTopic, Topic
from magnetar.managed_ledger.api import Entry, InitialPosition, Position
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire.batch import decompress
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.frames import parse_message_metadata, split_headers_and_payload
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import PARTITION_SUFFIX, TopicDomain, TopicName

BASE = "/admin/v2/{domain}/{tenant}/{namespace}"


def _domain(request: web.Request) -> TopicDomain:
    domain = request.match_info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise AdminError(404, f"unknown topic domain {domain!r}")
    return TopicDomain(domain)


def _force(request: web.Request) -> bool:
    return validation.query_flag(request.query.get("force"), "force")


async def _namespace(request: web.Request) -> tuple[str, str]:
    tenant = check_name(request.match_info["tenant"], "tenant")
    ns = check_name(request.match_info["namespace"], "namespace")
    if await service(request).store.get(keys.namespace(tenant, ns)) is None:
        raise AdminError(404, f"namespace {tenant}/{ns} does not exist")
    return tenant, ns


async def _topic_name(request: web.Request) -> TopicName:
    """The topic of the path (404 unknown domain or namespace, 412 invalid name)."""
    domain = _domain(request)
    tenant, ns = await _namespace(request)
    local = request.match_info["topic"]
    try:
        return TopicName.parse(f"{domain.value}://{tenant}/{ns}/{local}")
    except InvalidTopicNameError as err:
        raise AdminError(412, f"invalid topic name {local!r}: {err}") from None


def _partitioned_key(topic: TopicName) -> str:
    return keys.partitioned_topic(
        topic.tenant, topic.namespace, topic.domain.value, topic.local_name
    )


async def _partitions(svc: BrokerService, topic: TopicName) -> tuple[int, api.Version] | None:
    record = await svc.store.get(_partitioned_key(topic))
    if record is None:
        return None
    return int(json.loads(record.value).get("partitions", 0)), record.version


async def _exists(svc: BrokerService, topic: TopicName) -> bool:
    """Loaded here, or stored (persistent). A non-persistent topic exists only on the broker
    serving it: for this broker, whether it is loaded here (see :func:`_served_elsewhere`)."""
    if topic.full_name in svc.topics:
        return True
    if not topic.is_persistent:
        return False
    return bool(await svc.managed_ledgers.exists(managed_ledger_name(topic)))


async def _served_elsewhere(svc: BrokerService, topic: TopicName) -> str | None:
    """The web URL of the broker owning a non-persistent topic's bundle when that is another
    broker (it serves the topic if anyone does); None for persistent topics, which exist in
    storage whoever owns them."""
    if topic.is_persistent or topic.full_name in svc.topics:
        return None
    return await remote.owner_elsewhere(svc, topic)


async def _redirect_to_owner(request: web.Request, topic: TopicName) -> None:
    """Answer 307 to the owner's web URL when another broker owns the topic (taking an
    unowned bundle, as a lookup would)."""
    svc = service(request)
    authoritative = validation.query_flag(request.query.get("authoritative"), "authoritative")
    answer = await svc.lookup(topic, authoritative=authoritative)
    if answer.service_url == svc.me.service_url:
        return
    brokers = await svc.ownership.live_brokers()
    for info in brokers.values():
        if info.service_url == answer.service_url and info.web_service_url:
            _redirect(request, info.web_service_url)
    raise AdminError(503, f"topic {topic.full_name} is owned by a broker not reachable now")


def _redirect(request: web.Request, web_service_url: str) -> None:
    target = f"{web_service_url.rstrip('/')}{request.rel_url.path}"
    query = {**request.query, "authoritative": "true"}
    raise web.HTTPTemporaryRedirect(str(URL(target).with_query(query)))


async def _check_exists(request: web.Request, topic: TopicName) -> None:
    """404 unless the topic exists; 307 to the broker serving a non-persistent topic
    loaded there."""
    svc = service(request)
    if await _exists(svc, topic):
        return
    owner = await _served_elsewhere(svc, topic)
    if owner is not None:
        _redirect(request, owner)
    raise AdminError(404, f"topic {topic.full_name} does not exist")


async def _loaded(request: web.Request, topic: TopicName) -> Topic:
    """The topic, loaded on this broker (its owner); 404 when it does not exist."""
    svc = service(request)
    await _check_exists(request, topic)
    await _redirect_to_owner(request, topic)
    try:
        return await svc.get_topic(topic, create=False)
    except BrokerError as err:
        if err.code == pb.TopicNotFound:
            raise AdminError(404, err.message) from None
        raise


async def _topic(request: web.Request) -> Topic:
    return await _loaded(request, await _topic_name(request))


def _needs_storage(topic: TopicName, operation: str) -> None:
    """405 for an operation on stored messages asked of a non-persistent topic, with the
    reason Pulsar gives (``operation``: "Skip messages on", "Termination of", ...)."""
    if not topic.is_persistent:
        raise AdminError(405, f"{operation} a non-persistent topic is not allowed")


async def _stored_topic(request: web.Request, operation: str) -> PersistentTopic:
    """The persistent topic of the path, loaded here; 405 for a non-persistent one."""
    topic = await _topic_name(request)
    _needs_storage(topic, operation)
    loaded = await _loaded(request, topic)
    assert isinstance(loaded, PersistentTopic)
    return loaded


def _domains(request: web.Request) -> tuple[TopicDomain, ...]:
    """``mode`` of a namespace topic listing: PERSISTENT (default), NON_PERSISTENT, ALL."""
    mode = request.query.get("mode", "PERSISTENT").upper()
    if mode == "ALL":
        return ALL_DOMAINS
    try:
        return (TopicDomain(mode.lower().replace("_", "-")),)
    except ValueError:
        raise AdminError(
            400, f"mode must be PERSISTENT, NON_PERSISTENT or ALL, not {request.query['mode']!r}"
        ) from None


# --- topics -------------------------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    """The topics of a namespace (partitions listed one by one); non-persistent ones as the
    brokers owning the namespace's bundles serve them."""
    domain = _domain(request)
    tenant, ns = await _namespace(request)
    svc = service(request)
    names = set(await svc.topics_of_namespace(tenant, ns, domains=(domain,)))
    if domain is TopicDomain.NON_PERSISTENT:
        for bundle in await _bundles(svc, tenant, ns):
            if svc.ownership.is_owned(bundle):
                continue  # its topics are in the local list
            owner = await svc.ownership.owner_of(bundle)
            if owner is None or owner.broker.broker_id == svc.me.broker_id:
                continue
            if not owner.broker.web_service_url:
                raise AdminError(503, f"bundle {bundle} is owned by a broker without a web URL")
            status, answer = await remote.call(
                owner.broker.web_service_url.rstrip("/"),
                "GET",
                f"{remote.namespace_path(domain.value, tenant, ns)}/{bundle.range}",
            )
            remote.raise_for(status, answer, ok=(200,))
            names.update(answer)
    return web.json_response(sorted(names))


async def _bundles(svc: BrokerService, tenant: str, ns: str) -> list[Bundle]:
    found = await svc.policies.namespace(tenant, ns)
    if found is None:
        raise AdminError(404, f"namespace {tenant}/{ns} does not exist")
    return bundles_of(tenant, ns, found.boundaries)


async def list_bundle_topics(request: web.Request) -> web.Response:
    """The topics of one namespace bundle that its owner serves now (307 to the owner)."""
    domain = _domain(request)
    tenant, ns = await _namespace(request)
    svc = service(request)
    wanted = request.match_info["bundle"]
    bundle = next((b for b in await _bundles(svc, tenant, ns) if b.range == wanted), None)
    if bundle is None:
        raise AdminError(412, f"{wanted!r} is not a bundle of namespace {tenant}/{ns}")
    if not svc.ownership.is_owned(bundle):
        owner = await svc.ownership.owner_of(bundle)
        if owner is not None and owner.broker.broker_id != svc.me.broker_id:
            if not validation.query_flag(request.query.get("authoritative"), "authoritative"):
                _redirect(request, owner.broker.web_service_url)
        return web.json_response([])  # nobody serves it: no topic is loaded anywhere
    ns_name = f"{tenant}/{ns}"
    return web.json_response(
        sorted(
            [
                t.full_name
                for t in list(svc.topics.values())
                if t.name.domain is domain
                and t.name.namespace_name == ns_name
                and await svc.bundle(t.name) == bundle
            ]
        )
    )


async def list_namespace_topics(request: web.Request) -> web.Response:
    """The topics of a namespace (``/namespaces/{tenant}/{namespace}/topics``)."""
    tenant = check_name(request.match_info["tenant"], "tenant")
    ns = check_name(request.match_info["namespace"], "namespace")
    if await service(request).store.get(keys.namespace(tenant, ns)) is None:
        raise AdminError(404, f"namespace {tenant}/{ns} does not exist")
    return web.json_response(
        await service(request).topics_of_namespace(tenant, ns, domains=_domains(request))
    )


async def list_partitioned(request: web.Request) -> web.Response:
    """The partitioned topics of a namespace."""
    domain = _domain(request).value
    tenant, ns = await _namespace(request)
    found = await policies.partitioned_topics(service(request).store, tenant, ns, domain)
    return web.json_response(sorted(f"{domain}://{tenant}/{ns}/{t}" for t in found))


async def create_topic(request: web.Request) -> web.Response:
    """Create a non-partitioned topic (409 when it, or a partitioned one, exists)."""
    topic = await _topic_name(request)
    svc = service(request)
    if await _partitions(svc, topic) is not None or await _exists(svc, topic):
        raise AdminError(409, f"topic {topic.full_name} already exists")
    if topic.is_partition and (await _partitions(svc, topic.base_name)) is not None:
        raise AdminError(409, f"{topic.full_name} is a partition of a partitioned topic")
    await _redirect_to_owner(request, topic)
    await svc.get_topic(topic, create=True, explicit=True)
    return web.Response(status=204)


@accepts(validation.PARTITIONS)
async def create_partitioned(request: web.Request) -> web.Response:
    """Create a partitioned topic with the given number of partitions."""
    topic = await _topic_name(request)
    if topic.is_partition or PARTITION_SUFFIX in topic.local_name:
        raise AdminError(412, "Partitioned Topic Name should not contain '-partition-'")
    partitions: int = parsed(request)
    svc = service(request)
    if await _exists(svc, topic):
        raise AdminError(409, f"a non-partitioned topic {topic.full_name} already exists")
    try:
        await svc.store.put(
            _partitioned_key(topic),
            json.dumps({"format": 1, "partitions": partitions}).encode(),
            expected_version=api.NOT_EXISTS,
        )
    except api.BadVersionError:
        raise AdminError(409, f"partitioned topic {topic.full_name} already exists") from None
    policies_changed(request)
    return web.Response(status=204)


async def get_partitions(request: web.Request) -> web.Response:
    """Partitioned-topic metadata: ``{"partitions": n}``, 0 when not partitioned."""
    found = await _partitions(service(request), await _topic_name(request))
    return web.json_response({"partitions": found[0] if found else 0})


@accepts(validation.PARTITIONS)
async def update_partitions(request: web.Request) -> web.Response:
    """Grow a partitioned topic (shrinking is refused)."""
    topic = await _topic_name(request)
    partitions: int = parsed(request)
    svc = service(request)
    found = await _partitions(svc, topic)
    if found is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    current, version = found
    if partitions <= current:
        raise AdminError(
            400, f"partitions can only grow: {topic.full_name} has {current}, asked {partitions}"
        )
    try:
        await svc.store.put(
            _partitioned_key(topic),
            json.dumps({"format": 1, "partitions": partitions}).encode(),
            expected_version=version,
        )
    except api.BadVersionError:
        raise AdminError(409, "partitions changed concurrently; retry") from None
    policies_changed(request)
    return web.Response(status=204)


async def _delete_one(request: web.Request, topic: TopicName, *, force: bool) -> None:
    """Delete one topic (or partition) here, answering 307 when another broker owns it."""
    svc = service(request)
    if topic.full_name not in svc.topics:
        await _redirect_to_owner(request, topic)
    await delete_here(svc, topic, force=force)


async def delete_here(svc: BrokerService, topic: TopicName, *, force: bool) -> None:
    """Unload (refusing while in use unless ``force``) and delete the managed ledger."""
    loaded = svc.topics.get(topic.full_name)
    if loaded is not None:
        stats = loaded.stats()
        busy = bool(stats["publishers"]) or any(
            s.get("consumers") for s in stats["subscriptions"].values()
        )
        if busy and not force:
            raise AdminError(
                412, f"topic {topic.full_name} has active producers or consumers (use force)"
            )
        await svc.unload(topic.full_name, reason="topic deleted")
    if topic.is_persistent:
        await svc.managed_ledgers.delete(managed_ledger_name(topic))


async def delete_on_owner(svc: BrokerService, topic: TopicName, *, force: bool) -> None:
    """Delete a topic wherever it is served: on its owner when that is another broker."""
    owner = await remote.owner_elsewhere(svc, topic)
    if owner is None:
        await delete_here(svc, topic, force=force)
        return
    status, answer = await remote.call(
        owner, "DELETE", f"{remote.topic_path(topic)}?force={'true' if force else 'false'}"
    )
    remote.raise_for(status, answer, ok=(204, 404))


async def _delete_topic_policies(request: web.Request, topic: TopicName) -> None:
    await service(request).store.delete_prefix(_policies_key(topic))
    policies_changed(request)


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a non-partitioned topic (412 with producers or consumers unless force)."""
    topic = await _topic_name(request)
    await _check_exists(request, topic)
    await _delete_one(request, topic, force=_force(request))
    if not topic.is_partition:
        await _delete_topic_policies(request, topic)
    return web.Response(status=204)


async def delete_partitioned(request: web.Request) -> web.Response:
    """Delete a partitioned topic and its partitions."""
    topic = await _topic_name(request)
    force = _force(request)
    svc = service(request)
    found = await _partitions(svc, topic)
    if found is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    parts = [topic.partition(i) for i in range(found[0])]
    if not force:  # refuse before deleting anything
        for stats in (await _partition_stats(svc, parts)).values():
            if stats["publishers"] or any(
                s.get("consumers") for s in stats["subscriptions"].values()
            ):
                raise AdminError(
                    412, f"topic {topic.full_name} has active producers or consumers (use force)"
                )
    for part in parts:
        if await _exists(svc, part) or await _served_elsewhere(svc, part):
            await delete_on_owner(svc, part, force=True)
    await svc.store.delete(_partitioned_key(topic))
    await _delete_topic_policies(request, topic)
    return web.Response(status=204)


async def stats(request: web.Request) -> web.Response:
    """Topic stats (rates, counters, storage, publishers, subscriptions)."""
    return web.json_response((await _topic(request)).stats())


async def internal_stats(request: web.Request) -> web.Response:
    """The managed ledger's internal stats (ledgers, cursors)."""
    loaded = await _topic(request)
    if isinstance(loaded, NonPersistentTopic):
        return web.json_response(non_persistent_internal_stats(loaded))
    assert isinstance(loaded, PersistentTopic)
    ml: Any = loaded.managed_ledger
    return web.json_response(complete_internal_stats(ml.internal_stats()))


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


def complete_internal_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Fill in the fields of Pulsar's PersistentTopicInternalStats that scripts read and the
    managed ledger does not report (yet): ``lastLedgerCreatedTimestamp`` (ISO-8601, from the
    newest ledger's timestamp when known) and each ledger's ``underReplicated``."""
    out = dict(stats)
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
    out: dict[str, Any] = {k: sum(s.get(k, 0) or 0 for s in parts) for k in _SUMMED}
    out["metadata"] = {"partitions": partitions}
    out["publishers"] = [p for s in parts for p in s.get("publishers", [])]
    subs: dict[str, dict[str, Any]] = {}
    for s in parts:
        for name, sub in s.get("subscriptions", {}).items():
            agg = subs.setdefault(
                name, {**dict.fromkeys(_SUB_SUMMED, 0), "type": sub.get("type"), "consumers": []}
            )
            for k in _SUB_SUMMED:
                agg[k] += sub.get(k, 0) or 0
            agg["consumers"] += sub.get("consumers", [])
    out["subscriptions"] = subs
    out["replication"] = {}
    out["deduplicationStatus"] = next(
        (s["deduplicationStatus"] for s in parts if "deduplicationStatus" in s), "Disabled"
    )
    return out


async def _partition_stats(svc: BrokerService, parts: list[TopicName]) -> dict[str, dict[str, Any]]:
    """Stats of the existing partitions, asked of their owners (loaded here when unowned)."""
    per: dict[str, dict[str, Any]] = {}
    for part in parts:
        if part.full_name in svc.topics:
            per[part.full_name] = svc.topics[part.full_name].stats()
            continue
        if part.is_persistent and not await _exists(svc, part):
            continue
        owner = await remote.owner_elsewhere(svc, part)
        if owner is None:
            if part.is_persistent:
                per[part.full_name] = (await svc.get_topic(part, create=False)).stats()
            continue  # a non-persistent partition nobody serves: it does not exist now
        status, answer = await remote.call(owner, "GET", f"{remote.topic_path(part)}/stats")
        if status == 404 and not part.is_persistent:
            continue  # not loaded by its owner either
        remote.raise_for(status, answer, ok=(200,))
        per[part.full_name] = answer
    return per


async def partitioned_stats(request: web.Request) -> web.Response:
    """Stats summed over the partitions (``perPartition=true``: each partition's too)."""
    topic = await _topic_name(request)
    per_partition = validation.query_flag(request.query.get("perPartition", "true"), "perPartition")
    svc = service(request)
    found = await _partitions(svc, topic)
    if found is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    per = await _partition_stats(svc, [topic.partition(i) for i in range(found[0])])
    out = aggregate(per, found[0])
    if per_partition:
        out["partitions"] = per
    return web.json_response(out)


async def unload(request: web.Request) -> web.Response:
    """Unload the topic: clients reconnect through lookup."""
    topic = await _topic_name(request)
    svc = service(request)
    found = await _partitions(svc, topic)
    if found is not None:
        for i in range(found[0]):
            part = topic.partition(i)
            if await svc.unload(part.full_name, reason="admin unload"):
                continue
            maybe = await _exists(svc, part) or not part.is_persistent
            owner = await remote.owner_elsewhere(svc, part) if maybe else None
            if owner is not None:
                status, answer = await remote.call(
                    owner, "PUT", f"{remote.topic_path(part)}/unload"
                )
                remote.raise_for(status, answer, ok=(204, 404))
        return web.Response(status=204)
    await _check_exists(request, topic)
    if topic.full_name not in svc.topics:
        await _redirect_to_owner(request, topic)
    await svc.unload(topic.full_name, reason="admin unload")
    return web.Response(status=204)


async def terminate(request: web.Request) -> web.Response:
    """Terminate the topic: no more messages; answers the last message id."""
    loaded = await _stored_topic(request, "Termination of")
    last: Position = await loaded.terminate()
    return web.json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id})


# --- subscriptions ------------------------------------------------------------------------------


async def list_subscriptions(request: web.Request) -> web.Response:
    """The topic's subscriptions."""
    loaded = await _topic(request)
    return web.json_response(sorted(loaded.subscriptions.names()))


_LATEST_ID = 2**63 - 1


@accepts(validation.MESSAGE_ID, required=False)
async def create_subscription(request: web.Request) -> web.Response:
    """Create a durable subscription at a message id (earliest: -1:-1; latest by default)."""
    topic = await _topic_name(request)
    if not topic.is_persistent:  # Pulsar's answer, word for word
        raise AdminError(
            400, "Create subscription on non-persistent topic can only be done through client"
        )
    loaded = await _loaded(request, topic)
    mid: MessageId | None = parsed(request)
    start: Any = InitialPosition.LATEST
    if mid is not None and mid.ledger_id < 0:
        start = InitialPosition.EARLIEST
    elif mid is not None and mid.ledger_id != _LATEST_ID:
        start = mid
    try:
        await loaded.subscriptions.create(request.match_info["subscription"], start=start)
    except BrokerError as err:
        if err.code == pb.NotAllowedError:
            raise AdminError(409, err.message) from None
        raise
    return web.Response(status=204)


async def delete_subscription(request: web.Request) -> web.Response:
    """Delete a subscription (412 while it has consumers, unless force)."""
    loaded = await _topic(request)
    try:
        await loaded.subscriptions.delete(request.match_info["subscription"], force=_force(request))
    except BrokerError as err:
        if err.code == pb.ConsumerBusy:
            raise AdminError(412, err.message) from None
        raise
    return web.Response(status=204)


async def reset_by_time(request: web.Request) -> web.Response:
    """Reset the subscription to the first message published at or after the timestamp (ms)."""
    timestamp = validation.timestamp(request.match_info["timestamp"])
    loaded = await _stored_topic(request, "Reset cursor on")
    await _reset(loaded, request.match_info["subscription"], publish_time=timestamp)
    return web.Response(status=204)


@accepts(validation.MESSAGE_ID)
async def reset_by_message_id(request: web.Request) -> web.Response:
    """Reset the subscription to a message id."""
    loaded = await _stored_topic(request, "Reset cursor on")
    await _reset(loaded, request.match_info["subscription"], message_id=parsed(request))
    return web.Response(status=204)


async def _reset(loaded: PersistentTopic, name: str, **target: Any) -> None:
    try:
        await loaded.subscriptions.reset(name, **target)
    except BrokerError as err:
        if err.code == pb.SubscriptionNotFound:
            raise AdminError(404, err.message) from None
        raise


def _cursor(loaded: PersistentTopic, name: str) -> Any:
    cursor = loaded.managed_ledger.cursors.get(name)
    if cursor is None or not cursor.durable:
        raise AdminError(404, f"subscription {name} does not exist")
    return cursor


async def skip(request: web.Request) -> web.Response:
    """Skip the next n messages of the subscription."""
    n = validation.path_integer(request.match_info["n"], "number of messages", minimum=0)
    loaded = await _stored_topic(request, "Skip messages on")
    await _cursor(loaded, request.match_info["subscription"]).skip(n)
    return web.Response(status=204)


async def skip_all(request: web.Request) -> web.Response:
    """Clear the subscription's backlog."""
    loaded = await _stored_topic(request, "Clear backlog on")
    await _cursor(loaded, request.match_info["subscription"]).clear_backlog()
    return web.Response(status=204)


async def expire_messages(request: web.Request) -> web.Response:
    """Expire (acknowledge) the subscription's messages older than the given seconds."""
    seconds = validation.path_integer(request.match_info["seconds"], "expire time", minimum=0)
    loaded = await _stored_topic(request, "Expire messages on")
    cursor = _cursor(loaded, request.match_info["subscription"])
    cutoff_ms = int((time.time() - seconds) * 1000)
    await enforcement.expire(loaded, cutoff_ms=cutoff_ms, cursors=[cursor])
    return web.Response(status=204)


async def expire_all_subscriptions(request: web.Request) -> web.Response:
    """Expire the messages older than the given seconds on every subscription."""
    seconds = validation.path_integer(request.match_info["seconds"], "expire time", minimum=0)
    loaded = await _stored_topic(request, "Expire messages on")
    cutoff_ms = int((time.time() - seconds) * 1000)
    await enforcement.expire(loaded, cutoff_ms=cutoff_ms)
    return web.Response(status=204)


# --- topic-level policies -----------------------------------------------------------------------

TOPIC_POLICIES: dict[str, tuple[str, validation.Body[Any]]] = {
    "messageTTL": ("message_ttl_in_seconds", validation.MESSAGE_TTL),
    "retention": ("retention_policies", validation.RETENTION),
    "deduplicationEnabled": ("deduplicationEnabled", validation.DEDUPLICATION),
}
"""Topic policy path -> (its field, overriding the namespace's Policies field; its body)."""


def _policies_key(topic: TopicName) -> str:
    return keys.topic_policies(topic.tenant, topic.namespace, topic.domain.value, topic.local_name)


async def _policy_topic(request: web.Request) -> TopicName:
    topic = await _topic_name(request)
    svc = service(request)
    base = topic.base_name if topic.is_partition else topic
    if await _partitions(svc, base) is None and not await _exists(svc, topic):
        raise AdminError(404, f"topic {topic.full_name} does not exist")
    return base


def _topic_policy_handlers(path: str) -> tuple[Handler, Handler, Handler]:
    field, spec = TOPIC_POLICIES[path]

    async def get(request: web.Request) -> web.Response:
        topic = await _policy_topic(request)
        record = await service(request).store.get(_policies_key(topic))
        data = json.loads(record.value) if record else {}
        return web.json_response(data.get(field))

    async def set_(request: web.Request) -> web.Response:
        topic = await _policy_topic(request)
        if path == "messageTTL" and "messageTTL" in request.query:  # pulsar-admin sends this
            raw: Any = validation.path_integer(request.query["messageTTL"], path, minimum=0)
        else:
            raw = await body(request)
        value = spec.parse(raw)
        await _change_topic_policies(request, topic, lambda d: d.__setitem__(field, value))
        return web.Response(status=204)

    async def remove(request: web.Request) -> web.Response:
        topic = await _policy_topic(request)
        await _change_topic_policies(request, topic, lambda d: d.pop(field, None))
        return web.Response(status=204)

    get.__name__, get.__doc__ = f"get_topic_{path}", f"The topic's own {path} (null: unset)."
    set_.__name__, set_.__doc__ = f"set_topic_{path}", f"Set the topic's own {path}."
    set_.request_body = spec  # type: ignore[attr-defined]
    set_.body_required = path != "messageTTL"  # type: ignore[attr-defined]
    remove.__name__, remove.__doc__ = f"remove_topic_{path}", f"Remove the topic's own {path}."
    return get, set_, remove


async def _change_topic_policies(request: web.Request, topic: TopicName, change: Any) -> None:
    svc = service(request)
    key = _policies_key(topic)
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
        policies_changed(request)
        return
    raise AdminError(409, "topic policies changed concurrently; retry")


async def last_message_id(request: web.Request) -> web.Response:
    """The last stored message's id (entry -1 when the topic is empty; the last batch index
    when the last entry is a batch), as Pulsar's ``lastMessageId``."""
    loaded = await _stored_topic(request, "Get the last message id of")
    ml = loaded.managed_ledger
    lce = ml.last_confirmed_entry
    batch_index, batch_size = -1, 0
    if lce.entry_id >= 0:
        _, meta, _ = split_headers_and_payload((await ml.read_entry(lce)).data)
        md = parse_message_metadata(meta)
        if md.HasField("num_messages_in_batch"):
            batch_size = md.num_messages_in_batch
            batch_index = batch_size - 1
    body = {
        "ledgerId": lce.ledger_id,
        "entryId": lce.entry_id,
        "partitionIndex": loaded.name.partition_index,
        "batchIndex": batch_index,
        "batchSize": batch_size,
    }
    return web.json_response(body)


def _iso_ms(ms: int) -> str:
    """Pulsar's DateFormatter (ISO-8601 with offset, UTC as Z)."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _peek_headers(position: Position, md: pb.MessageMetadata, payload_size: int) -> dict[str, str]:
    """Pulsar's ``X-Pulsar-*`` response headers describing a peeked entry."""
    h = {"X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}"}
    if md.properties:
        # Pulsar 4.x sends (and its admin client reads) one JSON header; 3.x one header per
        # property: both, so either client finds the properties
        props = {kv.key: kv.value for kv in md.properties}
        h["X-Pulsar-PROPERTY"] = json.dumps(props, separators=(",", ":"))
        for key, value in props.items():
            h[f"X-Pulsar-PROPERTY-{key}"] = value
    h["X-Pulsar-publish-time"] = _iso_ms(md.publish_time)
    if md.HasField("event_time") and md.event_time:
        h["X-Pulsar-event-time"] = _iso_ms(md.event_time)
    if md.HasField("deliver_at_time"):
        h["X-Pulsar-deliver-at-time"] = _iso_ms(md.deliver_at_time)
    if md.HasField("num_messages_in_batch"):
        h["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        h["X-Pulsar-batch-size"] = str(payload_size)
    if md.HasField("null_value") and md.null_value:
        h["X-Pulsar-null-value"] = "true"
    if md.HasField("num_chunks_from_msg"):
        h["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        h["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
        h["X-Pulsar-chunk-id"] = str(md.chunk_id)
        h["X-Pulsar-uuid"] = md.uuid
    if md.HasField("partition_key"):
        h["X-Pulsar-partition-key"] = md.partition_key
    if md.HasField("ordering_key"):
        h["X-Pulsar-Base64-ordering-key"] = base64.b64encode(md.ordering_key).decode()
    if md.HasField("schema_version"):
        h["X-Pulsar-Base64-schema-version-b64encoded"] = base64.b64encode(
            md.schema_version
        ).decode()
    h["X-Pulsar-Is-Encrypted"] = "true" if md.encryption_keys else "false"
    if md.HasField("compression"):
        h["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
    if md.HasField("uncompressed_size"):
        h["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    h["X-Pulsar-producer-name"] = md.producer_name
    h["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.HasField("replicated_from"):
        h["X-Pulsar-replicated-from"] = md.replicated_from
    return h


async def peek(request: web.Request) -> web.Response:
    """The n-th (from 1) message the subscription has not acknowledged, as Pulsar answers
    ``.../position/{n}``: the (uncompressed) payload, the metadata in ``X-Pulsar-*``
    headers; a batch whole (the client splits it); 404 past the last message."""
    n = validation.path_integer(request.match_info["n"], "message position", minimum=1)
    loaded = await _stored_topic(request, "Peek messages on")
    cursor = _cursor(loaded, request.match_info["subscription"])
    ml = loaded.managed_ledger
    start = ml.next_position(cursor.mark_delete_position)
    counted = 0
    found: Entry | None = None
    while found is None:
        entries = await ml.read_entries(start, max_entries=min(n - counted, 100))
        if not entries:
            raise AdminError(404, "Message not found")
        for entry in entries:
            if not cursor.is_deleted(entry.position):
                counted += 1
                if counted == n:
                    found = entry
                    break
        start = ml.next_position(entries[-1].position)
    pos = found.position
    _, meta, payload = split_headers_and_payload(found.data)
    md = parse_message_metadata(meta)
    body = bytes(decompress(payload, md.compression, md.uncompressed_size))
    return web.Response(
        body=body,
        headers=_peek_headers(pos, md, len(body)),
        content_type="application/octet-stream",
    )


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/namespaces/{tenant}/{namespace}/topics", list_namespace_topics)
    router.add_get(BASE, list_topics)
    router.add_get(f"{BASE}/partitioned", list_partitioned)
    t = f"{BASE}/{{topic}}"
    router.add_put(t, create_topic)
    router.add_delete(t, delete_topic)
    router.add_get(BASE + "/{bundle:0x[0-9a-fA-F]+_0x[0-9a-fA-F]+}", list_bundle_topics)
    router.add_put(f"{t}/partitions", create_partitioned)
    router.add_post(f"{t}/partitions", update_partitions)
    router.add_get(f"{t}/partitions", get_partitions)
    router.add_delete(f"{t}/partitions", delete_partitioned)
    router.add_get(f"{t}/stats", stats)
    router.add_get(f"{t}/internalStats", internal_stats)
    router.add_get(f"{t}/partitioned-stats", partitioned_stats)
    router.add_get(f"{t}/lastMessageId", last_message_id)
    router.add_put(f"{t}/unload", unload)
    router.add_post(f"{t}/terminate", terminate)
    offload.register(router, t, _stored_topic)
    router.add_get(f"{t}/subscriptions", list_subscriptions)
    router.add_post(t + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions)
    s = f"{t}/subscription/{{subscription}}"
    router.add_put(s, create_subscription)
    router.add_delete(s, delete_subscription)
    router.add_post(s + "/skip/{n}", skip)
    router.add_post(f"{s}/skip_all", skip_all)
    router.add_get(s + "/position/{n}", peek)
    router.add_post(s + "/expireMessages/{seconds}", expire_messages)
    router.add_post(s + "/resetcursor/{timestamp}", reset_by_time)
    router.add_post(f"{s}/resetcursor", reset_by_message_id)
    for path in TOPIC_POLICIES:
        get, set_, remove = _topic_policy_handlers(path)
        router.add_get(f"{t}/{path}", get)
        router.add_post(f"{t}/{path}", set_)
        router.add_delete(f"{t}/{path}", remove)
