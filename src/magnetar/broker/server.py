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
from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from magnetar.broker import admin, http, workers
from magnetar.broker.admin import functions as functions_admin
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.broker.transport import FrameTransport
from magnetar.common import aio
from magnetar.functions import kubernetes as functions_kubernetes
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.placement import RackAwarePlacement
from magnetar.managed_ledger import cache, factory
from magnetar.managed_ledger.api import ManagedLedgerFactory
from magnetar.metadata import api, open_store
from magnetar.offload.offloader import Offloader
from magnetar.security import listener
from magnetar.security.tls import ServerTls

log = logging.getLogger(__name__)


def open_managed_ledgers(
    store: api.MetadataStore,
    ledgers: LedgerClient,
    config: BrokerConfig,
    *,
    processes: int = 1,
) -> ManagedLedgerFactory:
    """The managed-ledger implementation over ``ledgers`` (magnetar.managed_ledger), with
    an offloader when offload is configured (closed by :func:`close_managed_ledgers`), and
    the entry cache budget of one of ``processes`` broker processes."""
    offloader = Offloader(config.offload) if config.offload is not None else None
    mb = config.managed_ledger_cache_size_mb
    if mb is None:
        budget = cache.default_size_mb(processes=processes) * cache.MiB
    else:
        budget = mb * cache.MiB // max(1, processes)
    return factory.ManagedLedgerFactoryImpl(
        store,
        ledgers,
        default_config=config.managed_ledger,
        offloader=offloader,
        cache_bytes=budget,
        cache_watermark=config.managed_ledger_cache_eviction_watermark,
    )


async def close_managed_ledgers(managed_ledgers: ManagedLedgerFactory) -> None:
    """Close the factory, then its offloader (if any)."""
    await managed_ledgers.close()
    offloader = getattr(managed_ledgers, "offloader", None)
    if isinstance(offloader, Offloader):
        await offloader.close()


class BrokerServer:
    """The listeners of a broker: the binary protocol on ``port`` (plaintext) and
    ``tls_port`` (``pulsar+ssl``), HTTP on ``http_port`` and ``https_port``; a port that is
    None has no listener. TLS listeners share one context whose certificate files are
    re-read every ``tlsCertRefreshCheckDurationSec`` when they changed (established
    connections keep theirs)."""

    def __init__(
        self,
        service: BrokerService,
        *,
        http_extensions: Iterable[http.Extension] = (),
        metrics_sources: Iterable[Collector | CollectorRegistry] = (),
        shared: workers.SharedPorts | None = None,
        slot: workers.WorkerSlot | None = None,
    ) -> None:
        self.service = service
        self._shared = shared
        """The pod-wide ports this process serves beside its own, shared with the other
        worker processes of the broker (``SO_REUSEPORT``; ``broker/workers.py``)."""
        self._slot = slot
        """Which worker this is (with ``shared``): a scrape of a shared HTTP port answers
        for every worker of the pod, read from their sockets (``broker/workers.py``)."""
        self._exposition: asyncio.Server | None = None
        self._shared_servers: list[asyncio.Server] = []
        self._shared_http: list[asyncio.Server] = []
        self._http_extensions = list(http_extensions)
        self._metrics_sources = list(metrics_sources)
        self._servers: list[asyncio.Server] = []
        self._http: web.AppRunner | None = None
        self._http_servers: list[asyncio.Server] = []
        self._listening = False
        self._refresh_task: asyncio.Task[None] | None = None
        self.connections: set[ServerConnection] = set()
        cfg = service.config
        self.tls: ServerTls | None = (
            ServerTls(cfg.security.tls)
            if cfg.tls_port is not None or cfg.https_port is not None
            else None
        )

    @property
    def config(self) -> BrokerConfig:
        return self.service.config

    async def _bind(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        port: int,
        *,
        tls: str | None = None,
        shared: bool = False,
    ) -> tuple[asyncio.Server, int]:
        """A listener on ``port``, not serving yet; with ``tls`` (the listener's name), TLS
        with its own context whose refused handshakes are logged and counted; ``shared``:
        one of the worker processes' common ports (``SO_REUSEPORT``)."""
        return await listener.bind(
            factory,
            host=self.service.config.bind_address,
            port=port,
            tls=self.tls,
            listener=tls,
            start_serving=False,
            reuse_port=shared,
        )

    async def _bind_shared(
        self,
        into: list[asyncio.Server],
        factory: Callable[[], asyncio.BaseProtocol],
        port: int | None,
        tls: str | None,
    ) -> None:
        if port is not None:
            server, _ = await self._bind(factory, port, tls=tls, shared=True)
            into.append(server)

    async def listen(self) -> None:
        """Bind the binary-protocol ports (and fix port 0 up to the bound port) before the
        service starts, so its registration carries the real addresses."""
        cfg = self.service.config
        bound: dict[str, int] = {}
        if cfg.port is not None:
            server, bound["port"] = await self._bind(self._new_connection, cfg.port)
            self._servers.append(server)
        if cfg.tls_port is not None:
            server, bound["tls_port"] = await self._bind(
                self._new_connection, cfg.tls_port, tls="brokerServicePortTls"
            )
            self._servers.append(server)
        if self._shared is not None:
            shared = self._shared_servers
            await self._bind_shared(shared, self._new_connection, self._shared.port, None)
            await self._bind_shared(
                shared, self._new_connection, self._shared.tls_port, "brokerServicePortTls"
            )
        self._listening = True
        self._reconfigure(bound)

    def _reconfigure(self, bound: dict[str, int]) -> None:
        cfg = self.service.config
        changed = {k: v for k, v in bound.items() if getattr(cfg, k) != v}
        if changed:
            self.service.reconfigure(dataclasses.replace(cfg, **changed))  # type: ignore[arg-type]

    async def start(self) -> None:
        if not self._listening:
            await self.listen()
        await self._start_http()
        await self.service.start()
        # the shared ports last: a connection the kernel hands this worker finds it serving
        for server in (*self._servers, *self._shared_servers, *self._shared_http):
            await server.start_serving()
        if self.tls is not None:
            self._refresh_task = asyncio.get_running_loop().create_task(
                listener.keep_refreshed(self.tls, self.service.config.security.tls_refresh_s)
            )

    def _new_connection(self) -> FrameTransport:
        cnx = ServerConnection(self.service, on_closed=self._connection_closed)
        self.connections.add(cnx)
        self.service.counters.connection_opened()
        return cnx.protocol

    def _connection_closed(self, cnx: ServerConnection) -> None:
        if cnx in self.connections:
            self.connections.discard(cnx)
            self.service.counters.connection_closed(established=cnx.connected)

    async def _start_http(self) -> None:
        cfg = self.service.config
        app = http.build_app(
            self.service, extensions=self._http_extensions, metrics_sources=self._metrics_sources
        )
        if self._shared is not None and self._slot is not None:
            shared_http = {self._shared.http_port, self._shared.https_port} - {None}
            app[http.POD] = http.PodMetrics(self._slot, frozenset(p for p in shared_http if p))
            self._exposition = await workers.serve_exposition(
                self._slot.socket(self._slot.index), lambda: http.local_exposition(app)
            )
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        handler = self._http.server
        assert handler is not None
        bound: dict[str, int] = {}
        if cfg.http_port is not None:
            server, bound["http_port"] = await self._bind(handler, cfg.http_port)
            self._http_servers.append(server)
        if cfg.https_port is not None:
            server, bound["https_port"] = await self._bind(
                handler, cfg.https_port, tls="webServicePortTls"
            )
            self._http_servers.append(server)
        for server in self._http_servers:
            await server.start_serving()
        if self._shared is not None:
            shared = self._shared_http
            await self._bind_shared(shared, handler, self._shared.http_port, None)
            await self._bind_shared(shared, handler, self._shared.https_port, "webServicePortTls")
        self._reconfigure(bound)

    async def stop(self) -> None:
        if self._refresh_task is not None:
            self._refresh_task.cancel()
        for server in (*self._shared_servers, *self._servers):
            server.close()
        await self.service.close()
        for cnx in list(self.connections):
            cnx.close()
        for server in (*self._shared_servers, *self._servers):
            try:
                async with asyncio.timeout(5):
                    await server.wait_closed()
            except TimeoutError:
                log.warning("connections still open after 5 s")
        for server in (*self._shared_http, *self._http_servers):
            server.close()
        if self._exposition is not None:
            self._exposition.close()
        if self._http is not None:
            await self._http.cleanup()


wait_for_signal = aio.wait_for_signal
"""Return on SIGTERM or SIGINT (``common.aio``; the standalone imports it from here)."""


async def run(
    metadata_url: str,
    config: BrokerConfig,
    *,
    shared: workers.SharedPorts | None = None,
    slot: workers.WorkerSlot | None = None,
    functions_runtime: str = "none",
) -> None:
    """``magnetar broker``: serve until SIGTERM/SIGINT (``shared``: as one of the worker
    processes of ``magnetar broker --workers N``, also on the pod's shared ports; ``slot``:
    which one, for the pod-level ``/metrics``).
    ``functions_runtime`` ``kubernetes``: each function is a ``Function`` resource in the
    pod's own namespace, on the PulsarCluster named as the cluster
    (:mod:`magnetar.functions.kubernetes`; the pod's service account must be allowed to write
    Functions there; every worker keeps them, idempotently); ``none``: this broker runs no
    instances."""
    bookie_tls = config.bookkeeper_tls.open() if config.bookkeeper_tls is not None else None
    store = await open_store(metadata_url, tls=config.metadata_tls)
    placement = RackAwarePlacement(
        min_racks_per_write_quorum=config.bookkeeper_min_racks_per_write_quorum,
        enforce_min_racks=config.bookkeeper_enforce_min_racks,
        write_quorum=config.managed_ledger.write_quorum,
    )
    ledgers = LedgerClient(store, tls=bookie_tls, placement=placement)
    managed_ledgers = open_managed_ledgers(
        store, ledgers, config, processes=slot.count if slot is not None else 1
    )
    service = BrokerService(config=config, store=store, managed_ledgers=managed_ledgers)
    extensions: list[Callable[[web.Application], None]] = [admin.extension]
    k8s_functions: functions_kubernetes.KubernetesRuntime | None = None
    if functions_runtime == "kubernetes":
        k8s_functions = functions_kubernetes.KubernetesRuntime(
            store,
            functions_kubernetes.ApiServer.in_cluster(),
            namespace=functions_kubernetes.pod_namespace(),
            cluster_ref=config.cluster_name,
        )
        extensions.append(functions_admin.with_runtime(k8s_functions))
    server = BrokerServer(service, http_extensions=extensions, shared=shared, slot=slot)
    try:
        await server.start()
        if k8s_functions is not None:
            k8s_functions.start()
        cfg = service.config
        urls = " ".join(
            u
            for u in (
                cfg.service_url,
                cfg.service_url_tls,
                cfg.web_service_url,
                cfg.web_service_url_tls,
            )
            if u
        )
        print(f"broker {cfg.broker_id} ready: {urls}", flush=True)
        aio.tune_gc_for_server()
        await wait_for_signal()
        log.info("shutting down")
    finally:
        if k8s_functions is not None:
            await k8s_functions.stop()
        await server.stop()
        await close_managed_ledgers(managed_ledgers)
        await ledgers.close()
        await store.close()
