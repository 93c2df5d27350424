"""Who serves which topic: namespace bundles, leased ownership, broker registration, load.

A namespace's 32-bit hash space is split into bundles (its policies hold the boundaries); a
topic belongs to the bundle its full name hashes into (CRC32 of the UTF-8 name, unsigned, as
Pulsar's NamespaceBundleFactory with Guava's ``Hashing.crc32()``). A broker serves a bundle
while it holds ``keys.bundle_owner(...)`` under its session (create-only, so exactly one
broker wins). Live brokers register under ``keys.broker(...)`` and publish a load report
under ``keys.broker_load(...)``; an unowned bundle is assigned to the least-loaded live
broker. When the session is lost, every ownership goes with it: the service unloads the
topics and takes a new session.

This module only talks to the metadata store; the service decides what to do with answers.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import itertools
import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

from magnetar import __version__
from magnetar.broker.config import Listener
from magnetar.common import backoff
from magnetar.metadata import api, keys
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=65536)
def topic_hash(full_name: str) -> int:
    """Where ``full_name`` (``persistent://t/ns/name``, a partition's own name for a
    partition) falls in a namespace's 32-bit hash space."""
    return zlib.crc32(full_name.encode())


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    """A hash range of a namespace: ``[lower, upper)`` (the last bundle includes upper)."""

    tenant: str
    namespace: str
    lower: int
    upper: int

    @property
    def range(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @property
    def key(self) -> str:
        return keys.bundle_owner(self.tenant, self.namespace, self.range)

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.range}"


def bundles_of(tenant: str, namespace: str, boundaries: tuple[int, ...]) -> list[Bundle]:
    """Every bundle of a namespace, given its boundaries."""
    return [
        Bundle(tenant, namespace, lower, upper) for lower, upper in itertools.pairwise(boundaries)
    ]


def bundle_of(topic: TopicName, boundaries: tuple[int, ...]) -> Bundle:
    """The bundle ``topic`` hashes into, given its namespace's boundaries."""
    h = topic_hash(topic.full_name)
    i = bisect.bisect_right(boundaries, h) - 1
    i = max(0, min(i, len(boundaries) - 2))
    return Bundle(topic.tenant, topic.namespace, boundaries[i], boundaries[i + 1])


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: str
    service_url: str
    web_service_url: str
    listeners: tuple[Listener, ...] = ()
    """Pulsar's advertisedListeners; lookups naming a listener answer its URLs
    (``service_url`` and ``service_url_tls`` are the internal listener's)."""
    service_url_tls: str = ""
    """``pulsar+ssl://`` URL of the TLS listener ("" without one)."""
    web_service_url_tls: str = ""

    def web_url(self, *, tls: bool) -> str:
        """The HTTP URL to reach this broker at: its HTTPS one when ``tls`` and it has one."""
        url = self.web_service_url_tls if tls and self.web_service_url_tls else self.web_service_url
        return url.rstrip("/")

    def listener(self, name: str | None) -> Listener | None:
        """The URLs a client naming listener ``name`` gets: the broker's own when it names
        none; None: no such listener."""
        if not name:
            return Listener("", self.service_url, self.service_url_tls)
        return next((x for x in self.listeners if x.name == name), None)

    def listeners_json(self) -> dict[str, dict[str, str]]:
        """As Pulsar's BrokerLookupData writes them."""
        return {
            x.name: {"brokerServiceUrl": x.url}
            | ({"brokerServiceUrlTls": x.url_tls} if x.url_tls else {})
            for x in self.listeners
        }

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": 1,
                "brokerId": self.broker_id,
                "pulsarServiceUrl": self.service_url,
                "pulsarServiceUrlTls": self.service_url_tls,
                "webServiceUrl": self.web_service_url,
                "webServiceUrlTls": self.web_service_url_tls,
                "advertisedListeners": self.listeners_json(),
                "version": __version__,
            }
        ).encode()

    @classmethod
    def from_json(cls, broker_id: str, value: bytes) -> BrokerInfo:
        data: dict[str, Any] = json.loads(value) if value else {}
        return cls(
            broker_id=str(data.get("brokerId") or broker_id),
            service_url=str(data.get("pulsarServiceUrl", "")),
            web_service_url=str(data.get("webServiceUrl", "")),
            listeners=parse_listeners(data.get("advertisedListeners")),
            service_url_tls=str(data.get("pulsarServiceUrlTls") or ""),
            web_service_url_tls=str(data.get("webServiceUrlTls") or ""),
        )


def parse_listeners(raw: Any) -> tuple[Listener, ...]:
    """``{"name": {"brokerServiceUrl": url, "brokerServiceUrlTls": url}}`` as stored ->
    listeners."""
    if not isinstance(raw, dict):
        return ()
    return tuple(
        Listener(
            str(name), str(entry["brokerServiceUrl"]), str(entry.get("brokerServiceUrlTls") or "")
        )
        for name, entry in raw.items()
        if isinstance(entry, dict) and entry.get("brokerServiceUrl")
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """The current owner of a bundle, as its ownership key says."""

    broker: BrokerInfo
    session_id: int | None


class Ownership:
    """This broker's registration and bundle ownerships, under one session at a time."""

    def __init__(self, store: api.MetadataStore, me: BrokerInfo) -> None:
        self.store = store
        self.me = me
        self.session: api.Session | None = None
        self.owned: set[Bundle] = set()
        self.releasing: set[Bundle] = set()
        """Owned bundles being unloaded: lookups of them answer ServiceNotReady until the
        ownership is given up, so no client reloads a topic on the way out."""

    # --- session and registration ----------------------------------------------------------

    async def start(self, ttl: float, *, wait: float) -> api.Session:
        """Open a session and register this broker (waiting out a registration a previous
        process of the same id left behind, for up to ``wait`` seconds)."""
        session = await self.store.session(ttl)
        key = keys.broker(self.me.broker_id)
        loop_deadline = wait
        delays = backoff.Backoff(initial_s=0.25, max_s=1.0)
        while True:
            try:
                await self.store.put(
                    key, self.me.to_json(), expected_version=api.NOT_EXISTS, session=session
                )
                break
            except api.BadVersionError:
                if loop_deadline <= 0:
                    await session.close()
                    raise RuntimeError(
                        f"broker id {self.me.broker_id} is registered by a live process"
                    ) from None
                delay = delays.next()
                await asyncio.sleep(delay)
                loop_deadline -= delay
        self.session = session
        self.owned = set()
        return session

    async def stop(self) -> None:
        """Revoke the session: registration and ownerships disappear at once."""
        session, self.session = self.session, None
        self.owned = set()
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()

    def lost(self) -> None:
        """The session was lost: nothing is owned any more."""
        self.session = None
        self.owned = set()

    async def report_load(self, report: dict[str, Any]) -> None:
        if self.session is None or self.session.lost:
            return
        report = {"format": 1, "bundleCount": len(self.owned), **report}
        await self.store.put(
            keys.broker_load(self.me.broker_id), json.dumps(report).encode(), session=self.session
        )

    # --- ownership ---------------------------------------------------------------------------

    def is_owned(self, bundle: Bundle) -> bool:
        return bundle in self.owned

    async def owner_of(self, bundle: Bundle) -> Owner | None:
        record = await self.store.get(bundle.key)
        if record is None:
            return None
        data = json.loads(record.value) if record.value else {}
        broker_id = str(data.get("brokerId", ""))
        info = BrokerInfo(
            broker_id=broker_id,
            service_url=str(data.get("nativeUrl", "")),
            web_service_url=str(data.get("httpUrl", "")),
            listeners=parse_listeners(data.get("advertisedListeners")),
            service_url_tls=str(data.get("nativeUrlTls") or ""),
            web_service_url_tls=str(data.get("httpUrlTls") or ""),
        )
        if (
            broker_id == self.me.broker_id
            and self.session is not None
            and record.session_id == self.session.id
        ):
            self.owned.add(bundle)
        return Owner(info, record.session_id)

    async def try_acquire(self, bundle: Bundle) -> Owner:
        """Take ``bundle`` if nobody owns it; returns whoever owns it afterwards."""
        if bundle in self.owned:
            return Owner(self.me, self.session.id if self.session else None)
        session = self.session
        if session is None or session.lost:
            raise api.SessionLostError("the broker has no metadata session")
        value = json.dumps(
            {
                "format": 1,
                "brokerId": self.me.broker_id,
                "nativeUrl": self.me.service_url,
                "nativeUrlTls": self.me.service_url_tls,
                "httpUrl": self.me.web_service_url,
                "httpUrlTls": self.me.web_service_url_tls,
                "advertisedListeners": self.me.listeners_json(),
                "disabled": False,
            }
        ).encode()
        try:
            await self.store.put(
                bundle.key, value, expected_version=api.NOT_EXISTS, session=session
            )
        except api.BadVersionError:
            owner = await self.owner_of(bundle)
            if owner is None:  # released in between: try once more
                return await self.try_acquire(bundle)
            return owner
        self.owned.add(bundle)
        log.info("broker %s owns bundle %s", self.me.broker_id, bundle)
        return Owner(self.me, session.id)

    async def release(self, bundle: Bundle) -> None:
        if bundle not in self.owned:
            return
        self.owned.discard(bundle)
        record = await self.store.get(bundle.key)
        if record is not None and self.session is not None and record.session_id == self.session.id:
            with contextlib.suppress(api.NotFoundError, api.BadVersionError):
                await self.store.delete(bundle.key, expected_version=record.version)

    # --- placement ----------------------------------------------------------------------------

    async def live_brokers(self) -> dict[str, BrokerInfo]:
        found: dict[str, BrokerInfo] = {}
        async for record in self.store.scan_all(keys.BROKERS):
            broker_id = keys.unsegment(record.key.rsplit("/", 1)[-1])
            found[broker_id] = BrokerInfo.from_json(broker_id, record.value)
        return found

    async def least_loaded(self) -> BrokerInfo:
        """The live broker with the fewest owned bundles (then the lowest message rate);
        this broker wins ties, so a single broker never redirects to itself.

        The bundles are counted from the ownership records, which a claim writes at once,
        not from the load reports' ``bundleCount``: those are a reporting period old, so a
        burst of new bundles (clients subscribing to many topics at once) would all go to
        the one broker whose stale count was lowest -- with more than two brokers (the
        workers of ``--workers N`` pods) often all to one of them."""
        brokers = await self.live_brokers()
        if len(brokers) <= 1:
            return self.me
        rates: dict[str, float] = {}
        async for record in self.store.scan_all(keys.BROKER_LOAD):
            broker_id = keys.unsegment(record.key.rsplit("/", 1)[-1])
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                rates[broker_id] = float(json.loads(record.value).get("msgRateIn", 0.0))
        bundles: dict[str, int] = {}
        async for record in self.store.scan_all(keys.OWNERSHIP):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                owner = str(json.loads(record.value).get("brokerId", ""))
                bundles[owner] = bundles.get(owner, 0) + 1
        best = self.me
        best_load = (float(len(self.owned)), rates.get(self.me.broker_id, 0.0))
        for broker_id, info in sorted(brokers.items()):
            if broker_id == self.me.broker_id or not info.service_url:
                continue
            load = (float(bundles.get(broker_id, 0)), rates.get(broker_id, 0.0))
            if load < best_load:
                best, best_load = info, load
        return best
