"""A running broker: the Pulsar protocol listener, the HTTP server, and their lifecycle.

:class:`BrokerServer` wraps a :class:`BrokerService` with its two listeners;
:func:`run` is the ``magnetar broker`` process (cluster form): metadata store (etcd), ledger
client over the bookies registered there, managed ledgers, service, servers, and a clean
shutdown on SIGTERM/SIGINT. ``magnetar standalone`` (``magnetar.standalone``) builds the
same pieces around an embedded store and an in-process bookie.

Shutdown order: stop accepting connections, unload every topic (clients get CLOSE_PRODUCER/
CLOSE_CONSUMER and in-flight sends are answered), drop ownership, close connections, stop
HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable

from aiohttp import web

from magnetar.broker import admin, http
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.broker.transport import FrameTransport
from magnetar.common import aio
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger import factory
from magnetar.managed_ledger.api import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.metadata import api, open_store
from magnetar.offload.config import S3Config
from magnetar.offload.offloader import Offloader

log = logging.getLogger(__name__)


def open_managed_ledgers(
    store: api.MetadataStore,
    ledgers: LedgerClient,
    config: ManagedLedgerConfig,
    offload: S3Config | None = None,
) -> ManagedLedgerFactory:
    """The managed-ledger implementation over ``ledgers`` (magnetar.managed_ledger), with
    an offloader when ``offload`` is configured (closed by :func:`close_managed_ledgers`)."""
    offloader = Offloader(offload) if offload is not None else None
    return factory.ManagedLedgerFactoryImpl(
        store, ledgers, default_config=config, offloader=offloader
    )


async def close_managed_ledgers(managed_ledgers: ManagedLedgerFactory) -> None:
    """Close the factory, then its offloader (if any)."""
    await managed_ledgers.close()
    offloader = getattr(managed_ledgers, "offloader", None)
    if isinstance(offloader, Offloader):
        await offloader.close()


class BrokerServer:
    def __init__(
        self, service: BrokerService, *, http_extensions: Iterable[http.Extension] = ()
    ) -> None:
        self.service = service
        self._http_extensions = list(http_extensions)
        self._server: asyncio.Server | None = None
        self._http: web.AppRunner | None = None
        self.connections: set[ServerConnection] = set()

    @property
    def config(self) -> BrokerConfig:
        return self.service.config

    async def listen(self) -> None:
        """Bind the TCP port (and fix port 0 up to the bound port) before the service
        starts, so its registration carries the real address."""
        cfg = self.service.config
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection,
            host=cfg.bind_address,
            port=cfg.port,
            reuse_address=True,
            backlog=1024,
            start_serving=False,
        )
        port = self._server.sockets[0].getsockname()[1]
        if port != cfg.port:
            self.service.reconfigure(dataclasses.replace(cfg, port=port))

    async def start(self) -> None:
        if self._server is None:
            await self.listen()
        assert self._server is not None
        await self._start_http()
        await self.service.start()
        await self._server.start_serving()

    def _new_connection(self) -> FrameTransport:
        cnx = ServerConnection(self.service, on_closed=self.connections.discard)
        self.connections.add(cnx)
        return cnx.protocol

    async def _start_http(self) -> None:
        cfg = self.service.config
        app = http.build_app(self.service, extensions=self._http_extensions)
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, cfg.bind_address, cfg.http_port, reuse_address=True)
        await site.start()
        if cfg.http_port == 0:
            sockets = getattr(site._server, "sockets", None) or []  # the bound port
            if sockets:
                port = sockets[0].getsockname()[1]
                self.service.reconfigure(dataclasses.replace(cfg, http_port=port))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.service.close()
        for cnx in list(self.connections):
            cnx.close()
        if self._server is not None:
            try:
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            except TimeoutError:
                log.warning("connections still open after 5 s")
        if self._http is not None:
            await self._http.cleanup()


wait_for_signal = aio.wait_for_signal
"""Return on SIGTERM or SIGINT (``common.aio``; the standalone imports it from here)."""


async def run(metadata_url: str, config: BrokerConfig) -> None:
    """``magnetar broker``: serve until SIGTERM/SIGINT."""
    bookie_tls = config.bookkeeper_tls.open() if config.bookkeeper_tls is not None else None
    store = await open_store(metadata_url, tls=config.metadata_tls)
    ledgers = LedgerClient(store, tls=bookie_tls)
    managed_ledgers = open_managed_ledgers(store, ledgers, config.managed_ledger, config.offload)
    service = BrokerService(config=config, store=store, managed_ledgers=managed_ledgers)
    server = BrokerServer(service, http_extensions=[admin.extension])
    try:
        await server.start()
        cfg = service.config
        print(f"broker {cfg.broker_id} ready: {cfg.service_url} {cfg.web_service_url}", flush=True)
        aio.tune_gc_for_server()
        await wait_for_signal()
        log.info("shutting down")
    finally:
        await server.stop()
        await close_managed_ledgers(managed_ledgers)
        await ledgers.close()
        await store.close()
