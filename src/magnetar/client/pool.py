"""Client connections shared by address, and the topic lookup over them.

Why this module exists: a client keeps one connection per broker (per broker *through* a
proxy, when piped) for all its producers, consumers and requests, opens it on first use --
once, however many callers ask at the same moment -- and replaces it when lost; and it finds
a topic's owner by following the lookup's redirects (``wire.lookup.Redirects``) over those
connections. The proxy's links to its brokers, producer and consumer handles, and later
replicators, all get their connections here.
"""

from __future__ import annotations

import asyncio

from magnetar.client import connection
from magnetar.wire import lookup, urls

_Key = tuple[urls.Address, str | None]


class ConnectionPool:
    """Connections by (address, broker piped to), opened with ``options``. ``service_url``:
    what ``lookup`` asks first, and where connections through a proxy go."""

    def __init__(self, *, options: connection.Options, service_url: str | None = None) -> None:
        self.options = options
        self.service = urls.parse_service_url(service_url) if service_url else None
        self._connections: dict[_Key, connection.Connection] = {}
        self._opening: dict[_Key, asyncio.Future[connection.Connection]] = {}

    async def get(
        self, address: urls.Address, *, proxy_to: str | None = None
    ) -> connection.Connection:
        """The open connection to ``address`` (piped to ``proxy_to``), opened if needed."""
        key = (address, proxy_to)
        conn = self._connections.get(key)
        if conn is not None and not conn.is_closed:
            return conn
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[connection.Connection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            conn = await connection.connect(address, options=self.options, proxy_to=proxy_to)
            self._connections[key] = conn
            future.set_result(conn)
            return conn
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._opening[key]

    async def get_url(self, broker_url: str) -> connection.Connection:
        """The connection to the broker at ``broker_url`` (``pulsar://host:port``)."""
        return await self.get(urls.broker_address(broker_url, bare=True))

    async def target(self, target: lookup.Target) -> connection.Connection:
        """The connection a lookup step names."""
        if self.service is None:
            if target.broker_url is None:
                raise connection.ConnectionLostError("no service URL to connect to")
            return await self.get_url(target.broker_url)
        address, proxy_to = lookup.address_of(target, self.service)
        return await self.get(address, proxy_to=proxy_to)

    async def lookup(
        self, topic: str, *, max_redirects: int = lookup.MAX_REDIRECTS
    ) -> connection.Connection:
        """A connection to the broker serving ``topic`` (directly, or through the proxy at
        the service URL). LookupFailedError when the brokers refuse; ConnectionLostError
        when one of them cannot be reached."""
        tls = self.service is not None and self.service.tls
        chain = lookup.Redirects(max_redirects=max_redirects, tls=tls)
        step: lookup.Ask | lookup.Found = chain.step
        while isinstance(step, lookup.Ask):
            conn = await self.target(step.target)
            step = chain.answer(await conn.request(chain.request(topic=topic, request_id=0)))
        return await self.target(step.target)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
