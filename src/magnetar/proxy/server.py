"""A running proxy: the binary-protocol listener, the HTTP listener, and the process.

:class:`ProxyServer` binds both ports (port 0 picks a free one, fixed up afterwards) and
tracks its connections; :func:`run` is ``magnetar proxy``: open the metadata store when
brokers are discovered there, serve until SIGTERM/SIGINT, then close everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

import aiohttp
from aiohttp import web

from magnetar.common import aio
from magnetar.metadata import api, open_store
from magnetar.proxy import http
from magnetar.proxy.brokers import BrokerLinks, Brokers
from magnetar.proxy.config import ProxyConfig
from magnetar.proxy.connection import ProxyConnection
from magnetar.wire import frames

log = logging.getLogger(__name__)


class ProxyServer:
    def __init__(self, config: ProxyConfig, brokers: Brokers) -> None:
        self.config = config
        self.brokers = brokers
        self.links = BrokerLinks(
            max_frame_size=config.max_message_size + frames.FRAME_PADDING,
            timeout=config.request_timeout_s,
        )
        self.connections: set[ProxyConnection] = set()
        self._server: asyncio.Server | None = None
        self._http: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def _new_connection(self) -> ProxyConnection:
        cnx = ProxyConnection(
            config=self.config,
            brokers=self.brokers,
            links=self.links,
            on_closed=self.connections.discard,
        )
        self.connections.add(cnx)
        return cnx

    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, host=cfg.bind_address, port=cfg.port, reuse_address=True
        )
        port = self._server.sockets[0].getsockname()[1]
        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        app = http.build_app(self.brokers, self._session, max_redirects=cfg.max_redirects)
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, cfg.bind_address, cfg.http_port, reuse_address=True)
        await site.start()
        http_port = cfg.http_port
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            http_port = sockets[0].getsockname()[1]
        self.config = dataclasses.replace(cfg, port=port, http_port=http_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for cnx in list(self.connections):
            cnx.close()
        self.links.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
        if self._http is not None:
            await self._http.cleanup()
        if self._session is not None:
            await self._session.close()


async def run(config: ProxyConfig) -> None:
    """``magnetar proxy``: serve until SIGTERM/SIGINT."""
    store: api.MetadataStore | None = None
    if config.metadata_url:
        store = await open_store(config.metadata_url)
    brokers = Brokers(
        store=store,
        service_url=config.broker_service_url,
        web_service_url=config.broker_web_service_url,
    )
    server = ProxyServer(config, brokers)
    try:
        await server.start()
        cfg = server.config
        print(
            f"proxy ready: pulsar://{cfg.bind_address}:{cfg.port} "
            f"http://{cfg.bind_address}:{cfg.http_port}",
            flush=True,
        )
        await aio.wait_for_signal()
        log.info("shutting down")
    finally:
        await server.stop()
        if store is not None:
            await store.close()
