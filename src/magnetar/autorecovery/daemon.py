"""An autorecovery process: an auditor candidate and a recovery worker side by side.

Runs as ``magnetar autorecovery`` (its own process, with ``/metrics`` and ``/health``) or
inside a bookie started with ``--autorecovery`` (BookKeeper's ``autoRecoveryDaemonEnabled``).
Every instance stands for auditor; one wins, the others only work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import uuid
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from magnetar.autorecovery import metrics
from magnetar.autorecovery.auditor import Auditor, AuditorOptions
from magnetar.autorecovery.worker import ReplicationWorker, WorkerOptions
from magnetar.common import aio, grpctls
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.placement import RackAwarePlacement
from magnetar.metadata import api, open_store

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AutorecoveryOptions:
    auditor: AuditorOptions = field(default_factory=AuditorOptions)
    worker: WorkerOptions = field(default_factory=WorkerOptions)
    min_racks_per_write_quorum: int = 1
    enforce_min_racks: bool = False
    name: str = ""


class Autorecovery:
    """The auditor candidate and the worker of one process, on one ledger client."""

    def __init__(
        self,
        store: api.MetadataStore,
        options: AutorecoveryOptions,
        *,
        tls: grpctls.ClientTls | None = None,
    ) -> None:
        name = options.name or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.client = LedgerClient(
            store,
            tls=tls,
            placement=RackAwarePlacement(
                min_racks_per_write_quorum=options.min_racks_per_write_quorum,
                enforce_min_racks=options.enforce_min_racks,
            ),
        )
        self.auditor = Auditor(store, self.client, options.auditor, name=name)
        self.worker = ReplicationWorker(store, self.client, options.worker, name=name)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.auditor.run(), name="auditor"),
            asyncio.create_task(self.worker.run(), name="recovery-worker"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.client.close()


async def run(
    metadata_url: str,
    options: AutorecoveryOptions,
    *,
    http_port: int,
    bind_address: str = "0.0.0.0",
    metadata_tls: grpctls.ClientTlsConfig | None = None,
    bookie_tls: grpctls.ClientTlsConfig | None = None,
) -> None:
    """Run ``magnetar autorecovery`` until SIGTERM/SIGINT."""
    store = await open_store(metadata_url, tls=metadata_tls)
    recovery = Autorecovery(
        store, options, tls=grpctls.ClientTls(bookie_tls) if bookie_tls is not None else None
    )
    app = web.Application()

    async def metrics_handler(_: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_: web.Request) -> web.Response:
        return web.json_response(
            {"auditor": recovery.auditor.elected, "recovered": recovery.worker.recovered}
        )

    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.setup()
        await web.TCPSite(runner, bind_address, http_port).start()
        recovery.start()
        print(f"autorecovery {recovery.auditor.name} ready", flush=True)
        aio.tune_gc_for_server()
        await stop.wait()
    finally:
        await recovery.stop()
        await runner.cleanup()
        await store.close()
