"""Routes: ``/admin/v2/broker-stats`` (pulsar-admin ``broker-stats``) -- what this broker
serves now.

* ``GET .../topics``: the stats of every topic this broker has loaded, by namespace, bundle
  and domain, in Pulsar's shape (``{ns: {bundle: {persistent: {topic: {publishers,
  subscriptions, producerCount, averageMsgSize, msgRateIn, msgRateOut, msgInCount,
  bytesInCount, msgOutCount, bytesOutCount, msgThroughputIn, msgThroughputOut,
  storageSize, backlogSize, pendingAddEntriesCount, ...}}}}}``), the figures of each topic's
  own ``stats``.

* ``GET .../load-report``: this broker's load in the shape of Pulsar's LocalBrokerData
  (``loadReportType: LocalBrokerData``, which the Java admin client's ``getLoadReport()``
  reads): its URLs, the process's CPU (percent of one core over the time since the last
  report, limit 100 per core) and resident memory (MB, limit the machine's), the message rates
  and throughputs, topics, producers, consumers and owned bundles of the moment. Network
  bandwidth and direct memory are not measured, so they are left out. Apache Pulsar 4.0.7's
  standalone answers this call with an empty 204 (docs/compatibility.md).

Pulsar's ``metrics``, ``mbeans`` and ``allocator-stats`` are not served: Magnetar has no JVM;
``/metrics`` (Prometheus) carries the broker's figures.
Super-user only, as in Pulsar (``broker/access.py``: a route it does not list).
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from aiohttp import web

import magnetar
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


_CPU_SAMPLES: weakref.WeakKeyDictionary[Any, list[float]] = weakref.WeakKeyDictionary()
"""Per broker service, (monotonic time, process CPU time) of its last load report: CPU usage
is measured between two reports."""


def _cpu_usage(request: web.Request) -> float:
    """Percent of one core the process used since the previous report (since it started,
    the first time)."""
    now, cpu = time.monotonic(), time.process_time()
    svc = service(request)
    sample = _CPU_SAMPLES.get(svc)
    if sample is None:
        sample = _CPU_SAMPLES[svc] = [now - (time.time() - svc.started_at), 0.0]
    wall = now - sample[0]
    used = cpu - sample[1]
    sample[:] = [now, cpu]
    return round(100.0 * used / wall, 2) if wall > 0 else 0.0


def _memory_mb() -> tuple[float, float]:
    """(resident set size, the machine's physical memory), in MB."""
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * page
    total = os.sysconf("SC_PHYS_PAGES") * page
    return round(resident / 2**20, 2), round(total / 2**20, 2)


async def load_report(request: web.Request) -> web.Response:
    """This broker's load, as Pulsar's LocalBrokerData."""
    svc = service(request)
    me = svc.me
    totals = dict.fromkeys(("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut"), 0.0)
    producers = consumers = 0
    for topic in list(svc.topics.values()):
        st = topic.stats()
        for key in totals:
            totals[key] += float(st.get(key, 0.0) or 0.0)
        producers += len(st["publishers"])
        consumers += sum(len(sub.get("consumers", [])) for sub in st["subscriptions"].values())
    bundles = sorted(f"{b.tenant}/{b.namespace}/{b.range}" for b in svc.ownership.owned)
    resident, physical = _memory_mb()
    cores = os.cpu_count() or 1
    report: dict[str, Any] = {
        "loadReportType": "LocalBrokerData",
        "webServiceUrl": me.web_service_url or None,
        "webServiceUrlTls": me.web_service_url_tls or None,
        "pulsarServiceUrl": me.service_url or None,
        "pulsarServiceUrlTls": me.service_url_tls or None,
        "persistentTopicsEnabled": True,
        "nonPersistentTopicsEnabled": True,
        "cpu": {"usage": _cpu_usage(request), "limit": 100.0 * cores},
        "memory": {"usage": resident, "limit": physical},
        **totals,
        "numTopics": len(svc.topics),
        "numBundles": len(bundles),
        "numProducers": producers,
        "numConsumers": consumers,
        "bundles": bundles,
        "lastUpdate": int(time.time() * 1000),
        "startTimestamp": int(svc.started_at * 1000),
        "brokerVersionString": f"magnetar-{magnetar.__version__}",
    }
    return web.json_response({k: v for k, v in report.items() if v is not None})


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{BASE}/topics", topics)
    router.add_get(f"{BASE}/load-report", load_report)
