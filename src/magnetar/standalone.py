"""``magnetar standalone``: broker + bookie + embedded metadata store in one process.

Why here and not under ``broker/``: the broker and the bookie never import each other (an
import-linter contract); standalone sits above both, like ``cli``. The embedded metadata
store lives in the process that opens it, so everything shares it: the bookie registers in
it and serves gRPC on a loopback port, the broker's ledger client finds it there, and
managed ledgers are written with E = Wq = Aq = 1. Adds skip gRPC: the ledger client hands
them to the bookie's add path in this process (a local transport, as BookKeeper has for a
bookie in the client's JVM); reads, fencing and recovery go through gRPC as anywhere.

Everything durable lives under ``--data-dir``::

    DIR/metadata/        embedded metadata store (topics, ledgers, cursors, policies)
    DIR/bookie/          the bookie's journal, entry logs and index
    DIR/standalone.json  the bookie's port: its identity (and the ledgers' ensembles) name
                         it, so a restart must reuse it
    DIR/functions/       Pulsar Functions' instances: their packages, specs, logs and
                         metrics reports (child processes of the standalone, supervised by
                         ``functions/supervisor.py``; docs/functions.md)

A restart on the same directory keeps every topic, message and subscription.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from magnetar import native
from magnetar.bookie import metrics as bookie_metrics
from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.broker import admin
from magnetar.broker.admin import functions as functions_admin
from magnetar.broker.config import BrokerConfig
from magnetar.broker.server import (
    BrokerServer,
    close_managed_ledgers,
    open_managed_ledgers,
    wait_for_signal,
)
from magnetar.broker.service import BrokerService
from magnetar.common import aio
from magnetar.common.ports import free_port
from magnetar.functions.supervisor import BrokerAccess, Supervisor
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
STATE_FILE = "standalone.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class StandaloneOptions:
    data_dir: Path
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    """The broker's settings, parsed as ``magnetar broker`` parses them (``cli.py``); the
    replication is the standalone's own (:func:`broker_config`)."""
    bookie_port: int | None = None
    """Loopback port of the in-process bookie; None: the one used before, else a free one."""


def _bookie_port(data_dir: Path, requested: int | None) -> int:
    """The bookie's port, remembered in the data dir (its identity depends on it)."""
    state_path = data_dir / STATE_FILE
    state: dict[str, object] = {}
    if state_path.exists():
        state = json.loads(state_path.read_text())
    saved = state.get("bookiePort")
    if isinstance(saved, int):
        if requested is not None and requested != saved:
            raise ValueError(
                f"{data_dir} belongs to a bookie on port {saved}; "
                f"--bookie-port {requested} would give it another identity"
            )
        return saved
    port = requested or free_port()
    state["bookiePort"] = port
    tmp = state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_path)
    return port


def broker_config(options: StandaloneOptions) -> BrokerConfig:
    """The broker's settings in one process: one bookie, so every ledger has E = Wq = Aq = 1
    (the cluster is named by ``--cluster-name``, ``standalone`` by default)."""
    ml = dataclasses.replace(
        options.broker.managed_ledger, ensemble_size=1, write_quorum=1, ack_quorum=1
    )
    return dataclasses.replace(options.broker, managed_ledger=ml)


async def run(options: StandaloneOptions) -> None:
    """Run until SIGTERM/SIGINT, then shut down in reverse order."""
    data_dir = options.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    bookie_port = _bookie_port(data_dir, options.bookie_port)
    store = await open_store(f"embedded://{data_dir / 'metadata'}")
    bookie = BookieServer(
        store,
        BookieOptions(
            data_dir=data_dir / "bookie",
            port=bookie_port,
            http_port=0,
            bind_address=LOOPBACK,
            advertised_address=LOOPBACK,
        ),
    )
    ledgers: LedgerClient | None = None
    server: BrokerServer | None = None
    managed_ledgers = None
    supervisor: Supervisor | None = None
    try:
        await bookie.start()
        assert bookie.service is not None
        # the broker's adds and reads reach the in-process bookie directly (no gRPC)
        ledgers = LedgerClient(store, local_bookies={bookie.bookie_id: bookie.service})
        config = broker_config(options)
        managed_ledgers = open_managed_ledgers(store, ledgers, config)
        service = BrokerService(config=config, store=store, managed_ledgers=managed_ledgers)
        cfg = service.config
        sec = cfg.security
        supervisor = Supervisor(
            store,
            work_dir=data_dir / "functions",
            worker_id=f"c-{cfg.cluster_name}-fw-{cfg.advertised_address}-"
            f"{cfg.http_port or cfg.https_port}",
            access=BrokerAccess(
                auth_plugin=sec.broker_client_auth_plugin,
                auth_params=sec.broker_client_auth_params,
                trust_certs_file=sec.broker_client_trust_certs or sec.tls.trust,
                verify_hostname=sec.tls_hostname_verification,
            ),
        )
        # one /metrics for the process: the broker's series and the bookie's (bookie_*)
        server = BrokerServer(
            service,
            http_extensions=[admin.extension, functions_admin.with_runtime(supervisor)],
            metrics_sources=[bookie_metrics.REGISTRY],
        )
        await server.start()
        # instances call the broker as its own clients do: TLS when brokerClientTlsEnabled
        tls = sec.broker_client_tls and bool(cfg.service_url_tls and cfg.web_service_url_tls)
        supervisor.start(
            service_url=cfg.service_url_tls if tls else cfg.service_url,
            web_service_url=cfg.web_service_url_tls if tls else cfg.web_service_url,
        )
        lines = [
            "Magnetar standalone ready",
            f"  service URL: {cfg.service_url}",
            f"  HTTP URL:    {cfg.web_service_url}",
        ]
        if cfg.service_url_tls:
            lines.append(f"  TLS service URL: {cfg.service_url_tls}")
        if cfg.web_service_url_tls:
            lines.append(f"  HTTPS URL:   {cfg.web_service_url_tls}")
        lines.append(f"  data dir:    {data_dir}")
        lines.append(f"  code:        {native.describe()}")
        print("\n".join(lines), flush=True)
        aio.tune_gc_for_server()
        await wait_for_signal()
        log.info("shutting down")
    finally:
        if supervisor is not None:
            await supervisor.stop()
        if server is not None:
            await server.stop()
        if managed_ledgers is not None:
            await close_managed_ledgers(managed_ledgers)
        if ledgers is not None:
            await ledgers.close()
        await bookie.stop()
        await store.close()
