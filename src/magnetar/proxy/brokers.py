"""Which brokers the proxy may talk to, and its own protocol connections to them.

Why a module: the proxy forwards a client's connection only to a broker it knows (never to
an address a client makes up), and its lookups need a connection per broker that is reused
across clients (across the connections of one client identity when clients authenticate).
Brokers come either from the metadata store (the registrations brokers keep
under their sessions, ``docs/metadata.md``) or from one fixed address (a Kubernetes Service
in front of the brokers), plus every broker URL a lookup answer named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

from magnetar import __version__
from magnetar.client import connection, pool
from magnetar.metadata import api, keys
from magnetar.wire import pb, session, urls

CLIENT_VERSION = f"Magnetar-proxy-{__version__}"
_REFRESH_S = 2.0
"""Registrations read from the store are reused this long (a miss re-reads at once)."""


class BrokerUnavailableError(Exception):
    """No broker answered, or none is registered."""


def _address(url: str) -> urls.Address | None:
    """``pulsar://host:port``, ``pulsar+ssl://host:port`` or ``host:port`` (what clients put
    in CONNECT's ``proxy_to_broker_url``) -> its address; None when it is not one."""
    try:
        return urls.parse_broker_url(url, bare=True)[0]
    except urls.BadUrlError:
        return None


@dataclass(frozen=True, slots=True)
class BrokerUrls:
    """One broker's addresses: binary protocol and admin, plaintext and TLS ("" when the
    broker has no such listener)."""

    service: str
    web: str
    service_tls: str = ""
    web_tls: str = ""

    def binary(self, *, tls: bool) -> str:
        return self.service_tls if tls else self.service

    def admin(self, *, tls: bool) -> str:
        return self.web_tls if tls else self.web


class Brokers:
    """The brokers' URLs, in round-robin order."""

    def __init__(
        self,
        *,
        store: api.MetadataStore | None = None,
        service_url: str | None = None,
        web_service_url: str | None = None,
        service_url_tls: str | None = None,
        web_service_url_tls: str | None = None,
    ) -> None:
        if store is None and not (service_url and web_service_url):
            raise ValueError("brokers come from a metadata store or a fixed address")
        self._store = store
        self._fixed = (
            BrokerUrls(
                service_url or "", web_service_url or "",
                service_url_tls or "", web_service_url_tls or "",
            )
            if store is None
            else None
        )  # fmt: skip
        self._learned: dict[urls.Address, str] = {}
        """Address (plaintext or TLS) of a broker a lookup answer named -> its URL."""
        self._cached: list[BrokerUrls] = []
        self._read_at = 0.0
        self._turn = itertools.count()

    async def _registered(self, *, fresh: bool = False) -> list[BrokerUrls]:
        """Every live broker."""
        if self._fixed is not None:
            return [self._fixed]
        if not fresh and time.monotonic() - self._read_at < _REFRESH_S:
            return self._cached
        assert self._store is not None
        found: list[BrokerUrls] = []
        async for record in self._store.scan_all(keys.BROKERS):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data: dict[str, Any] = json.loads(record.value)
                service = str(data.get("pulsarServiceUrl") or "")
                service_tls = str(data.get("pulsarServiceUrlTls") or "")
                if service or service_tls:
                    found.append(
                        BrokerUrls(
                            service,
                            str(data.get("webServiceUrl") or ""),
                            service_tls,
                            str(data.get("webServiceUrlTls") or ""),
                        )
                    )
        self._cached, self._read_at = (
            sorted(found, key=lambda b: (b.service, b.service_tls)),
            (time.monotonic()),
        )
        return self._cached

    async def pick(self) -> BrokerUrls:
        """The next broker in turn."""
        registered = await self._registered()
        if not registered:
            registered = await self._registered(fresh=True)
        if not registered:
            raise BrokerUnavailableError("no broker is registered")
        return registered[next(self._turn) % len(registered)]

    async def count(self) -> int:
        """How many brokers are known now."""
        return len(await self._registered())

    def learn(self, *service_urls: str) -> None:
        """Broker URLs a lookup answer named (fixed-address mode trusts those)."""
        for url in service_urls:
            address = _address(url) if url else None
            if address is not None:
                self._learned[address] = url

    async def resolve(self, url: str, *, tls: bool) -> str | None:
        """The URL the proxy dials for the broker a client named (plaintext or TLS, compared
        as host:port): that broker's TLS URL when ``tls``, else its plaintext one; None when
        ``url`` is not a broker of this cluster (a client never makes the proxy connect to an
        address of its choosing)."""
        target = _address(url)
        if target is None:
            return None
        if self._fixed is not None:
            if target in {_address(u) for u in (self._fixed.service, self._fixed.service_tls) if u}:
                return self._fixed.binary(tls=tls) or None
            known = self._learned.get(target)
            if known is None:
                return None
            return known if urls.parse_broker_url(known, bare=True)[1] == tls else None
        for fresh in (False, True):
            for broker in await self._registered(fresh=fresh):
                if target in {_address(u) for u in (broker.service, broker.service_tls) if u}:
                    return broker.binary(tls=tls) or None
        return None


class BrokerLinks:
    """The proxy's connections to brokers for lookups and the other requests it serves
    itself: the client layer's pools (one connection per broker, opened on first use,
    replaced when lost), with its failures as BrokerUnavailableError.

    With client authentication, each client's requests go on connections that name that
    client in CONNECT (``original_principal``, as Pulsar's proxy does), so the broker
    authorizes its lookups as that client's: one pool per client identity, shared by that
    identity's connections and closed when the last of them goes."""

    def __init__(
        self,
        *,
        max_frame_size: int,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        auth: session.AuthProvider | None = None,
    ) -> None:
        self.timeout = timeout
        self._options = connection.Options(
            client_version=CLIENT_VERSION,
            ssl=ssl_context,
            auth=auth,
            connect_timeout_s=timeout,
            request_timeout_s=timeout,
            max_frame_size=max_frame_size,
        )
        self._pools: dict[session.OnBehalfOf | None, tuple[pool.ConnectionPool, int]] = {}

    def acquire(self, who: session.OnBehalfOf | None) -> None:
        """A client connection acting as ``who`` starts using the links."""
        found = self._pools.get(who)
        if found is None:
            options = dataclasses.replace(self._options, on_behalf_of=who)
            self._pools[who] = (pool.ConnectionPool(options=options), 1)
        else:
            self._pools[who] = (found[0], found[1] + 1)

    def release(self, who: session.OnBehalfOf | None) -> None:
        found = self._pools.get(who)
        if found is None:
            return
        if found[1] <= 1:
            del self._pools[who]
            found[0].close()
        else:
            self._pools[who] = (found[0], found[1] - 1)

    async def request(
        self, url: str, cmd: pb.BaseCommand, *, who: session.OnBehalfOf | None = None
    ) -> pb.BaseCommand:
        """Send ``cmd`` to the broker at ``url`` (its request id is replaced by one of the
        connection's) on ``who``'s connection and return the answer, whose request id is
        the connection's: the caller puts its own back."""
        if who not in self._pools:
            if who is not None:
                raise BrokerUnavailableError("the client's connection is closed")
            self.acquire(who)  # (the proxy's own, kept until close)
        links = self._pools[who][0]
        try:
            address, _ = urls.parse_broker_url(url, bare=True)
            conn = await links.get(address)
            return await conn.request(cmd)
        except (connection.ConnectionLostError, session.HandshakeRefusedError) as exc:
            raise BrokerUnavailableError(f"broker {url}: {exc}") from None
        except urls.BadUrlError as exc:
            raise BrokerUnavailableError(str(exc)) from None

    def close(self) -> None:
        for links, _ in self._pools.values():
            links.close()
        self._pools.clear()
