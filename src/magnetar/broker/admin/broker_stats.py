"""Routes: ``/admin/v2/broker-stats`` (pulsar-admin ``broker-stats``) -- what this broker
serves now.

* ``GET .../topics``: the stats of every topic this broker has loaded, by namespace, bundle
  and domain, in Pulsar's shape (``{ns: {bundle: {persistent: {topic: {publishers,
  subscriptions, producerCount, averageMsgSize, msgRateIn, msgRateOut, msgInCount,
  bytesInCount, msgOutCount, bytesOutCount, msgThroughputIn, msgThroughputOut,
  storageSize, backlogSize, pendingAddEntriesCount, ...}}}}}``), the figures of each topic's
  own ``stats``.

Pulsar's ``load-report``, ``metrics``, ``mbeans`` and ``allocator-stats`` are not served:
Magnetar has no load manager report (Pulsar 4.0.7's standalone answers ``load-report``
with an empty 204 too) and no JVM; ``/metrics`` (Prometheus) carries the broker's figures.
Super-user only, as in Pulsar (``broker/access.py``: a route it does not list).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.common import service
from magnetar.broker.topic import Topic

BASE = "/admin/v2/broker-stats"


def _topic_entry(topic: Topic) -> dict[str, Any]:
    """One topic as Pulsar's broker-stats lists it (from its TopicStats)."""
    st = topic.stats()
    ml: Any = getattr(topic, "managed_ledger", None)
    pending = ml.internal_stats().get("pendingAddEntriesCount", 0) if ml is not None else 0
    return {
        "publishers": st["publishers"],
        "replication": st["replication"],
        "subscriptions": st["subscriptions"],
        "producerCount": len(st["publishers"]),
        "averageMsgSize": st["averageMsgSize"],
        "msgRateIn": st["msgRateIn"],
        "msgRateOut": st["msgRateOut"],
        "msgInCount": st["msgInCounter"],
        "bytesInCount": st["bytesInCounter"],
        "msgOutCount": st["msgOutCounter"],
        "bytesOutCount": st["bytesOutCounter"],
        "msgThroughputIn": st["msgThroughputIn"],
        "msgThroughputOut": st["msgThroughputOut"],
        "storageSize": st["storageSize"],
        "backlogSize": st["backlogSize"],
        "pendingAddEntriesCount": pending,
    }


async def topics(request: web.Request) -> web.Response:
    """The loaded topics' stats by namespace, bundle and domain."""
    svc = service(request)
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for name, topic in sorted(svc.topics.items()):
        bundle = await svc.bundle(topic.name)
        ns = out.setdefault(f"{topic.name.tenant}/{topic.name.namespace}", {})
        domain = ns.setdefault(bundle.range, {}).setdefault(topic.name.domain.value, {})
        domain[name] = _topic_entry(topic)
    return web.json_response(out)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{BASE}/topics", topics)
