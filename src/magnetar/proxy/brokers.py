"""Which brokers the proxy may talk to, and its own protocol connections to them.

Why a module: the proxy forwards a client's connection only to a broker it knows (never to
an address a client makes up), and its lookups need a connection per broker that is reused
across clients. Brokers come either from the metadata store (the registrations brokers keep
under their sessions, ``docs/metadata.md``) or from one fixed address (a Kubernetes Service
in front of the brokers), plus every broker URL a lookup answer named.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
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
    """``pulsar://host:port`` or ``host:port`` (what clients put in CONNECT's
    ``proxy_to_broker_url``) -> its address; None when it is not one."""
    try:
        return urls.broker_address(url, bare=True)
    except urls.BadUrlError:
        return None


class Brokers:
    """The brokers' service (pulsar://) and admin (http://) URLs, in round-robin order."""

    def __init__(
        self,
        *,
        store: api.MetadataStore | None = None,
        service_url: str | None = None,
        web_service_url: str | None = None,
    ) -> None:
        if store is None and not (service_url and web_service_url):
            raise ValueError("brokers come from a metadata store or a fixed address")
        self._store = store
        self._fixed = (service_url, web_service_url) if store is None else None
        self._learned: set[str] = set()
        self._cached: dict[str, str] = {}
        self._read_at = 0.0
        self._turn = itertools.count()

    async def _registered(self, *, fresh: bool = False) -> dict[str, str]:
        """service URL -> admin URL of every live broker."""
        if self._fixed is not None:
            service, web = self._fixed
            assert service is not None and web is not None
            return {service: web}
        if not fresh and time.monotonic() - self._read_at < _REFRESH_S:
            return self._cached
        assert self._store is not None
        found: dict[str, str] = {}
        async for record in self._store.scan_all(keys.BROKERS):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data: dict[str, Any] = json.loads(record.value)
                service = str(data.get("pulsarServiceUrl") or "")
                if service:
                    found[service] = str(data.get("webServiceUrl") or "")
        self._cached, self._read_at = found, time.monotonic()
        return found

    async def pick(self) -> tuple[str, str]:
        """(service URL, admin URL) of the next broker in turn."""
        registered = await self._registered()
        if not registered:
            registered = await self._registered(fresh=True)
        if not registered:
            raise BrokerUnavailableError("no broker is registered")
        items = sorted(registered.items())
        return items[next(self._turn) % len(items)]

    async def count(self) -> int:
        """How many brokers are known now."""
        return len(await self._registered())

    def learn(self, service_url: str) -> None:
        """A broker URL a lookup answer named (fixed-address mode trusts those)."""
        self._learned.add(service_url)

    async def is_broker(self, service_url: str) -> bool:
        """Whether a client may be forwarded to ``service_url`` (compared as host:port)."""
        target = _address(service_url)
        if target is None:
            return False
        if self._fixed is not None:
            known = {url for url in (self._fixed[0], *self._learned) if url}
            return target in {_address(url) for url in known}
        for fresh in (False, True):
            registered = await self._registered(fresh=fresh)
            if target in {_address(url) for url in registered}:
                return True
        return False

    async def web_url_of(self, service_url: str) -> str | None:
        return (await self._registered()).get(service_url)


class BrokerLinks:
    """The proxy's connections to brokers for lookups and the other requests it serves
    itself: the client layer's pool (one connection per broker, opened on first use,
    replaced when lost), with its failures as BrokerUnavailableError."""

    def __init__(self, *, max_frame_size: int, timeout: float) -> None:
        self.timeout = timeout
        self._pool = pool.ConnectionPool(
            options=connection.Options(
                client_version=CLIENT_VERSION,
                connect_timeout_s=timeout,
                request_timeout_s=timeout,
                max_frame_size=max_frame_size,
            )
        )

    async def request(self, url: str, cmd: pb.BaseCommand) -> pb.BaseCommand:
        """Send ``cmd`` to the broker at ``url`` (its request id is replaced by one of the
        connection's) and return the answer, whose request id is the connection's: the
        caller puts its own back."""
        try:
            conn = await self._pool.get_url(url)
            return await conn.request(cmd)
        except (connection.ConnectionLostError, session.HandshakeRefusedError) as exc:
            raise BrokerUnavailableError(f"broker {url}: {exc}") from None
        except urls.BadUrlError as exc:
            raise BrokerUnavailableError(str(exc)) from None

    def close(self) -> None:
        self._pool.close()
