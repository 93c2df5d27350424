"""A running proxy: the binary-protocol listener, the HTTP listener, and the process.

:class:`ProxyServer` binds its ports, plaintext and TLS (port 0 picks a free one, fixed up
afterwards), and tracks its connections; :func:`run` is ``magnetar proxy``: open the
metadata store when brokers are discovered there, serve until SIGTERM/SIGINT, then close everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

import aiohttp
from aiohttp import web

from magnetar.common import aio
from magnetar.metadata import api, open_store
from magnetar.proxy import http
from magnetar.proxy.access import ProxyAccess
from magnetar.proxy.brokers import BrokerLinks, Brokers
from magnetar.proxy.config import ProxyConfig
from magnetar.proxy.connection import Admission, ProxyConnection
from magnetar.security import listener
from magnetar.security.tls import ServerTls
from magnetar.wire import frames

log = logging.getLogger(__name__)


class ProxyServer:
    """The proxy's listeners: the binary protocol on ``port`` (plaintext) and ``tls_port``
    (``pulsar+ssl``), HTTP on ``http_port`` and ``https_port`` (None: no listener). TLS
    listeners take their contexts from one :class:`ServerTls`, re-read every
    ``tlsCertRefreshCheckDurationSec`` when the files changed (established connections keep
    theirs); their refused handshakes are logged and counted (``security.listener``)."""

    def __init__(self, config: ProxyConfig, brokers: Brokers) -> None:
        self.config = config
        self.brokers = brokers
        self.access = ProxyAccess(config)
        self.links = BrokerLinks(
            max_frame_size=config.max_message_size + frames.FRAME_PADDING,
            timeout=config.request_timeout_s,
            ssl_context=self.access.broker_ssl,
            auth=self.access.broker_auth,
        )
        self.tls: ServerTls | None = (
            ServerTls(config.security.tls)
            if config.tls_port is not None or config.https_port is not None
            else None
        )
        self.connections: set[ProxyConnection] = set()
        self.admission = Admission(
            config.max_concurrent_inbound_connections,
            config.max_concurrent_inbound_connections_per_ip,
        )
        self._servers: list[asyncio.Server] = []
        self._http: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._refresh_task: asyncio.Task[None] | None = None

    def _new_connection(self) -> ProxyConnection:
        cnx = ProxyConnection(
            config=self.config,
            brokers=self.brokers,
            links=self.links,
            access=self.access,
            on_closed=self.connections.discard,
            admission=self.admission,
        )
        self.connections.add(cnx)
        return cnx

    async def _bind(
        self, factory: Callable[[], asyncio.BaseProtocol], port: int, *, tls: str | None = None
    ) -> int:
        """Listen on ``port`` (TLS when ``tls`` names the listener); the bound port."""
        server, bound = await listener.bind(
            factory, host=self.config.bind_address, port=port, tls=self.tls, listener=tls
        )
        self._servers.append(server)
        return bound

    async def start(self) -> None:
        cfg = self.config
        bound: dict[str, int] = {}
        if cfg.port is not None:
            bound["port"] = await self._bind(self._new_connection, cfg.port)
        if cfg.tls_port is not None:
            bound["tls_port"] = await self._bind(
                self._new_connection, cfg.tls_port, tls="servicePortTls"
            )
        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        app = http.build_app(
            self.brokers, self._session, access=self.access, max_redirects=cfg.max_redirects
        )
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        handler = self._http.server
        assert handler is not None
        if cfg.http_port is not None:
            bound["http_port"] = await self._bind(handler, cfg.http_port)
        if cfg.https_port is not None:
            bound["https_port"] = await self._bind(handler, cfg.https_port, tls="webServicePortTls")
        self.config = dataclasses.replace(cfg, **bound)  # type: ignore[arg-type]
        if self.tls is not None:
            self._refresh_task = asyncio.get_running_loop().create_task(
                listener.keep_refreshed(self.tls, self.config.security.tls_refresh_s)
            )

    async def stop(self) -> None:
        if self._refresh_task is not None:
            self._refresh_task.cancel()
        for server in self._servers:
            server.close()
        for cnx in list(self.connections):
            cnx.close()
        self.links.close()
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await server.wait_closed()
        if self._http is not None:
            await self._http.cleanup()
        if self._session is not None:
            await self._session.close()


def _urls(cfg: ProxyConfig) -> str:
    host = cfg.bind_address
    return " ".join(
        f"{scheme}://{host}:{port}"
        for scheme, port in (
            ("pulsar", cfg.port), ("pulsar+ssl", cfg.tls_port),
            ("http", cfg.http_port), ("https", cfg.https_port),
        )
        if port is not None
    )  # fmt: skip


async def run(config: ProxyConfig) -> None:
    """``magnetar proxy``: serve until SIGTERM/SIGINT."""
    store: api.MetadataStore | None = None
    if config.metadata_url:
        store = await open_store(config.metadata_url, tls=config.metadata_tls)
    brokers = Brokers(
        store=store,
        service_url=config.broker_service_url,
        web_service_url=config.broker_web_service_url,
        service_url_tls=config.broker_service_url_tls,
        web_service_url_tls=config.broker_web_service_url_tls,
    )
    server = ProxyServer(config, brokers)
    try:
        await server.start()
        print(f"proxy ready: {_urls(server.config)}", flush=True)
        await aio.wait_for_signal()
        log.info("shutting down")
    finally:
        await server.stop()
        if store is not None:
            await store.close()
