"""Topics and subscriptions: ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/...``.

Create/delete (non-partitioned and partitioned), list, partitions (get/grow), stats,
internalStats, partitioned-stats, subscriptions (list, create at a position, delete, skip,
clear backlog, reset by time or message id), unload and terminate.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.broker import policies
from magnetar.broker.admin.common import AdminError, body, check_name, int_in, service
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService, managed_ledger_name
from magnetar.broker.topic import PersistentTopic
from magnetar.managed_ledger.api import InitialPosition, Position
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName

BASE = "/admin/v2/{domain}/{tenant}/{namespace}"


def _domain(request: web.Request) -> str:
    domain = request.match_info["domain"]
    if domain == "non-persistent":
        raise AdminError(405, "non-persistent topics are not supported by this broker yet")
    if domain != "persistent":
        raise AdminError(404, f"unknown topic domain {domain!r}")
    return domain


async def _namespace(request: web.Request) -> tuple[str, str]:
    _domain(request)
    tenant = check_name(request.match_info["tenant"], "tenant")
    ns = check_name(request.match_info["namespace"], "namespace")
    if await service(request).store.get(keys.namespace(tenant, ns)) is None:
        raise AdminError(404, f"namespace {tenant}/{ns} does not exist")
    return tenant, ns


async def _topic_name(request: web.Request) -> TopicName:
    tenant, ns = await _namespace(request)
    local = request.match_info["topic"]
    try:
        return TopicName.parse(f"persistent://{tenant}/{ns}/{local}")
    except Exception as err:
        raise AdminError(412, f"invalid topic name {local!r}: {err}") from None


def _partitioned_key(topic: TopicName) -> str:
    return keys.partitioned_topic(topic.tenant, topic.namespace, "persistent", topic.local_name)


async def _exists(svc: BrokerService, topic: TopicName) -> bool:
    if topic.full_name in svc.topics:
        return True
    return bool(await svc.managed_ledgers.exists(managed_ledger_name(topic)))


async def _loaded(svc: BrokerService, topic: TopicName) -> PersistentTopic:
    """The topic, loaded on this broker; 404 when it does not exist."""
    if not await _exists(svc, topic):
        raise AdminError(404, f"topic {topic.full_name} does not exist")
    try:
        return await svc.get_topic(topic, create=False)
    except BrokerError as err:
        if err.code == pb.TopicNotFound:
            raise AdminError(404, err.message) from None
        raise


# --- topics ------------------------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    tenant, ns = await _namespace(request)
    return web.json_response(await service(request).topics_of_namespace(tenant, ns))


async def list_partitioned(request: web.Request) -> web.Response:
    tenant, ns = await _namespace(request)
    found = await policies.partitioned_topics(service(request).store, tenant, ns)
    return web.json_response(sorted(f"persistent://{tenant}/{ns}/{t}" for t in found))


async def create_topic(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    svc = service(request)
    if await svc.store.get(_partitioned_key(topic)) is not None or await _exists(svc, topic):
        raise AdminError(409, f"topic {topic.full_name} already exists")
    await svc.get_topic(topic, create=True, explicit=True)
    return web.Response(status=204)


async def create_partitioned(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    if topic.is_partition:
        raise AdminError(412, "a partition name cannot itself be partitioned")
    partitions = int_in(await body(request), "partitions", minimum=1)
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
    svc.policies.invalidate()
    return web.Response(status=204)


async def get_partitions(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    record = await service(request).store.get(_partitioned_key(topic))
    partitions = int(json.loads(record.value).get("partitions", 0)) if record else 0
    return web.json_response({"partitions": partitions})


async def update_partitions(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    partitions = int_in(await body(request), "partitions", minimum=1)
    store = service(request).store
    record = await store.get(_partitioned_key(topic))
    if record is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    current = int(json.loads(record.value).get("partitions", 0))
    if partitions <= current:
        raise AdminError(
            400, f"partitions can only grow: {topic.full_name} has {current}, asked {partitions}"
        )
    try:
        await store.put(
            _partitioned_key(topic),
            json.dumps({"format": 1, "partitions": partitions}).encode(),
            expected_version=record.version,
        )
    except api.BadVersionError:
        raise AdminError(409, "partitions changed concurrently; retry") from None
    service(request).policies.invalidate()
    return web.Response(status=204)


async def _delete_one(svc: BrokerService, topic: TopicName, *, force: bool) -> None:
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
    await svc.managed_ledgers.delete(managed_ledger_name(topic))


async def delete_topic(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    svc = service(request)
    if not await _exists(svc, topic):
        raise AdminError(404, f"topic {topic.full_name} does not exist")
    await _delete_one(svc, topic, force=request.query.get("force", "false").lower() == "true")
    return web.Response(status=204)


async def delete_partitioned(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    svc = service(request)
    record = await svc.store.get(_partitioned_key(topic))
    if record is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    force = request.query.get("force", "false").lower() == "true"
    partitions = int(json.loads(record.value).get("partitions", 0))
    for i in range(partitions):
        part = TopicName.parse(f"{topic.full_name}-partition-{i}")
        if await _exists(svc, part):
            await _delete_one(svc, part, force=force)
    await svc.store.delete(_partitioned_key(topic))
    svc.policies.invalidate()
    return web.Response(status=204)


async def stats(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    return web.json_response(loaded.stats())


async def internal_stats(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    ml: Any = loaded.managed_ledger
    return web.json_response(ml.internal_stats())


async def partitioned_stats(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    svc = service(request)
    record = await svc.store.get(_partitioned_key(topic))
    if record is None:
        raise AdminError(404, f"partitioned topic {topic.full_name} does not exist")
    partitions = int(json.loads(record.value).get("partitions", 0))
    per: dict[str, Any] = {}
    for i in range(partitions):
        part = TopicName.parse(f"{topic.full_name}-partition-{i}")
        if await _exists(svc, part):
            per[part.full_name] = (await svc.get_topic(part, create=False)).stats()
    summed = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
              "bytesInCounter", "storageSize", "backlogSize")  # fmt: skip
    out: dict[str, Any] = {k: sum(s.get(k, 0) for s in per.values()) for k in summed}
    out["metadata"] = {"partitions": partitions}
    out["publishers"] = [p for s in per.values() for p in s["publishers"]]
    subs: dict[str, Any] = {}
    for s in per.values():
        for name, sub in s["subscriptions"].items():
            agg = subs.setdefault(name, {"msgBacklog": 0, "consumers": [], "type": sub.get("type")})
            agg["msgBacklog"] += sub.get("msgBacklog", 0)
            agg["consumers"] += sub.get("consumers", [])
    out["subscriptions"] = subs
    if request.query.get("perPartition", "true").lower() == "true":
        out["partitions"] = per
    return web.json_response(out)


async def unload(request: web.Request) -> web.Response:
    topic = await _topic_name(request)
    svc = service(request)
    if not await _exists(svc, topic):
        raise AdminError(404, f"topic {topic.full_name} does not exist")
    await svc.unload(topic.full_name, reason="admin unload")
    return web.Response(status=204)


async def terminate(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    last: Position = await loaded.terminate()
    return web.json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id})


# --- subscriptions -----------------------------------------------------------------------------


async def list_subscriptions(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    return web.json_response(sorted(loaded.subscriptions.names()))


def _message_id(raw: Any) -> MessageId:
    if not isinstance(raw, dict) or not all(
        isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool)
        for k in ("ledgerId", "entryId")
    ):
        raise AdminError(400, 'a message id must be {"ledgerId": int, "entryId": int}')
    return MessageId(raw["ledgerId"], raw["entryId"], int(raw.get("partitionIndex", -1)))


async def create_subscription(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    raw = await body(request, required=False)
    start: Any = InitialPosition.LATEST
    if raw is not None:
        mid = _message_id(raw)
        start = InitialPosition.EARLIEST if mid.ledger_id < 0 else mid
    try:
        await loaded.subscriptions.create(request.match_info["subscription"], start=start)
    except BrokerError as err:
        if err.code == pb.NotAllowedError:
            raise AdminError(409, err.message) from None
        raise
    return web.Response(status=204)


async def delete_subscription(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    force = request.query.get("force", "false").lower() == "true"
    try:
        await loaded.subscriptions.delete(request.match_info["subscription"], force=force)
    except BrokerError as err:
        if err.code == pb.ConsumerBusy:
            raise AdminError(412, err.message) from None
        raise
    return web.Response(status=204)


async def reset_by_time(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    timestamp = int_in(int(request.match_info["timestamp"]), "timestamp", minimum=0)
    await _reset(loaded, request.match_info["subscription"], publish_time=timestamp)
    return web.Response(status=204)


async def reset_by_message_id(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    mid = _message_id(await body(request))
    await _reset(loaded, request.match_info["subscription"], message_id=mid)
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
    if cursor is None:
        raise AdminError(404, f"subscription {name} does not exist")
    return cursor


async def skip(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    n = int_in(int(request.match_info["n"]), "number of messages", minimum=0)
    await _cursor(loaded, request.match_info["subscription"]).skip(n)
    return web.Response(status=204)


async def skip_all(request: web.Request) -> web.Response:
    loaded = await _loaded(service(request), await _topic_name(request))
    await _cursor(loaded, request.match_info["subscription"]).clear_backlog()
    return web.Response(status=204)


# --- topic-level policies -----------------------------------------------------------------------


def _topic_policy_field(request: web.Request) -> tuple[str, Any]:
    from magnetar.broker.admin import namespaces

    policy = request.match_info["policy"]
    table = {
        "messageTTL": ("message_ttl_in_seconds", namespaces._ttl),
        "retention": ("retention_policies", namespaces._retention),
        "deduplicationEnabled": ("deduplicationEnabled", namespaces._dedup),
    }
    if policy not in table:
        raise AdminError(404, f"unknown topic policy {policy!r}")
    return table[policy]


async def _policy_topic(request: web.Request) -> TopicName:
    topic = await _topic_name(request)
    svc = service(request)
    base = topic.base_name if topic.is_partition else topic
    if await svc.store.get(_partitioned_key(base)) is None and not await _exists(svc, topic):
        raise AdminError(404, f"topic {topic.full_name} does not exist")
    return base


def _policies_key(topic: TopicName) -> str:
    return keys.topic_policies(topic.tenant, topic.namespace, "persistent", topic.local_name)


async def get_topic_policy(request: web.Request) -> web.Response:
    field, _ = _topic_policy_field(request)
    topic = await _policy_topic(request)
    record = await service(request).store.get(_policies_key(topic))
    data = json.loads(record.value) if record else {}
    return web.json_response(data.get(field))


async def set_topic_policy(request: web.Request) -> web.Response:
    field, validate = _topic_policy_field(request)
    topic = await _policy_topic(request)
    if request.match_info["policy"] == "messageTTL" and "messageTTL" in request.query:
        raw: Any = request.query["messageTTL"]
        try:
            raw = int(raw)
        except ValueError:
            raise AdminError(400, f"messageTTL must be an integer, got {raw!r}") from None
    else:
        raw = await body(request)
    value = validate(raw)
    await _change_topic_policies(service(request), topic, lambda d: d.__setitem__(field, value))
    return web.Response(status=204)


async def remove_topic_policy(request: web.Request) -> web.Response:
    field, _ = _topic_policy_field(request)
    topic = await _policy_topic(request)
    await _change_topic_policies(service(request), topic, lambda d: d.pop(field, None))
    return web.Response(status=204)


async def _change_topic_policies(svc: BrokerService, topic: TopicName, change: Any) -> None:
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
        svc.policies.invalidate()
        return
    raise AdminError(409, "topic policies changed concurrently; retry")


def register(router: web.UrlDispatcher) -> None:
    router.add_get(BASE, list_topics)
    router.add_get(f"{BASE}/partitioned", list_partitioned)
    t = f"{BASE}/{{topic}}"
    router.add_put(t, create_topic)
    router.add_delete(t, delete_topic)
    router.add_put(f"{t}/partitions", create_partitioned)
    router.add_post(f"{t}/partitions", update_partitions)
    router.add_get(f"{t}/partitions", get_partitions)
    router.add_delete(f"{t}/partitions", delete_partitioned)
    router.add_get(f"{t}/stats", stats)
    router.add_get(f"{t}/internalStats", internal_stats)
    router.add_get(f"{t}/partitioned-stats", partitioned_stats)
    router.add_put(f"{t}/unload", unload)
    router.add_post(f"{t}/terminate", terminate)
    router.add_get(f"{t}/subscriptions", list_subscriptions)
    s = f"{t}/subscription/{{subscription}}"
    router.add_put(s, create_subscription)
    router.add_delete(s, delete_subscription)
    router.add_post(s + r"/skip/{n:\d+}", skip)
    router.add_post(f"{s}/skip_all", skip_all)
    router.add_post(s + r"/resetcursor/{timestamp:\d+}", reset_by_time)
    router.add_post(f"{s}/resetcursor", reset_by_message_id)
    p = t + "/{policy:messageTTL|retention|deduplicationEnabled}"
    router.add_get(p, get_topic_policy)
    router.add_post(p, set_topic_policy)
    router.add_delete(p, remove_topic_policy)
