"""A running bookie: storage engine + gRPC service + registration + HTTP metrics.

Start order matters: the identity (cookie) is checked before the storage opens its
directories; the gRPC port is listening before the bookie announces itself, so a client
that finds the registration can connect; the registration is an ephemeral key under the
bookie's session, moved between ``available`` and ``readonly`` as the storage's read-only
state changes, and re-created under a new session if the old one is lost.

With ``tls`` set the gRPC port serves TLS only (gRPC's dynamic server credentials: the
certificate files are re-read when they change, connections already up keep theirs), and
with ``tls_client_authentication`` a client must present a certificate signed by the trusted CAs.
The registration says ``"tls": true`` so brokers know how to reach the bookie. A plaintext
client or an untrusted certificate fails its handshake: gRPC's TLS layer logs the failure
(``Handshake failed with error ...``) and drops that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from magnetar import __version__
from magnetar.bookie import identity, metrics
from magnetar.bookie.service import BookieService, generic_handler
from magnetar.bookie.storage import api as storage_api
from magnetar.bookie.storage import config as storage_config
from magnetar.bookie.storage import open_storage
from magnetar.common import aio, grpctls, tlsfiles
from magnetar.metadata import api, keys, open_store

log = logging.getLogger(__name__)

GRPC_SERVER_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


@dataclass(frozen=True, kw_only=True)
class BookieOptions:
    data_dir: Path
    journal_dir: Path | None = None
    port: int = 3181
    http_port: int = 8000
    bind_address: str = "0.0.0.0"
    advertised_address: str = "127.0.0.1"
    rack: str = "/default-rack"
    session_ttl: float = 10.0
    storage_overrides: dict[str, object] = field(default_factory=dict)
    tls: tlsfiles.TlsFiles | None = None
    """The gRPC port's certificate, key and trusted CAs (None: plaintext)."""
    tls_client_authentication: bool = False
    """Refuse clients without a certificate signed by ``tls.trust_file``."""
    tls_check_interval: float = tlsfiles.DEFAULT_CHECK_INTERVAL
    """Seconds between looks at the certificate files for a rotation."""
    metadata_tls: grpctls.ClientTlsConfig | None = None
    """TLS of the channels to etcd (None: as the metadata URL says)."""

    @property
    def bookie_id(self) -> str:
        return f"{self.advertised_address}:{self.port}"


class BookieServer:
    def __init__(self, store: api.MetadataStore, options: BookieOptions) -> None:
        self.store = store
        self.options = options
        self.bookie_id = options.bookie_id
        journal_dir = options.journal_dir or options.data_dir / "journal"
        self._cfg = storage_config.BookieStorageConfig(
            journal_dir=journal_dir,
            data_dir=options.data_dir / "ledgers"
            if options.journal_dir is None
            else options.data_dir,
            **options.storage_overrides,  # type: ignore[arg-type]
        )
        self.storage: storage_api.LedgerStorage | None = None
        self.service: BookieService | None = None
        """The service once started: standalone's ledger client adds through it directly."""
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._session: api.Session | None = None
        self._registered_key: str | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._collector: metrics.StorageCollector | None = None
        self._stopping = False
        self.instance_id = ""
        self.decommissioning = False
        """An operator decommissions this bookie (``/bookies/state``, for its instance):
        read-only for the rest of this process."""
        self.grpc_port = options.port
        self.http_port = options.http_port

    async def start(self) -> None:
        opts = self.options
        cookie = await identity.verify_or_format(
            self.store,
            bookie_id=self.bookie_id,
            journal_dir=self._cfg.journal_dir,
            data_dir=self._cfg.data_dir,
        )
        self.instance_id = cookie.instance_id
        self.storage = open_storage(
            self._cfg,
            on_journal_sync=metrics.observe_journal_sync,
            on_journal_queue=metrics.observe_journal_queue,
        )
        await self.storage.start()
        self._collector = metrics.StorageCollector(self.storage.stats)
        try:
            metrics.REGISTRY.register(self._collector)
        except ValueError:  # another bookie in this process already exports storage gauges
            log.warning(
                "bookie %s: storage gauges already registered in this process; "
                "this bookie's are not exported",
                self.bookie_id,
            )
            self._collector = None

        service = self.service = BookieService(
            self.storage, bookie_id=self.bookie_id, rack=opts.rack
        )
        self._grpc = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
        self._grpc.add_generic_rpc_handlers((generic_handler(service),))
        address = f"{opts.bind_address}:{opts.port}"
        if opts.tls is not None:
            credentials = grpctls.server_credentials(
                opts.tls,
                require_client_auth=opts.tls_client_authentication,
                check_interval=opts.tls_check_interval,
            )
            bound = self._grpc.add_secure_port(address, credentials)
        else:
            bound = self._grpc.add_insecure_port(address)
        if bound == 0:
            raise OSError(f"cannot listen on {opts.bind_address}:{opts.port}")
        await self._grpc.start()
        await self._start_http()
        await self._check_decommission()
        await self._register()
        self._monitor = asyncio.create_task(self._watch_state())
        log.info(
            "bookie %s ready (grpc%s :%d, http :%d)",
            self.bookie_id,
            "+tls" if opts.tls is not None else "",
            opts.port,
            self.http_port,
        )

    async def _start_http(self) -> None:
        app = web.Application()

        async def metrics_handler(_: web.Request) -> web.Response:
            body = metrics.render()
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def health(_: web.Request) -> web.Response:
            ok = self._registered_key is not None
            return web.json_response(
                {"bookieId": self.bookie_id, "registered": ok, "version": __version__},
                status=200 if ok else 503,
            )

        app.router.add_get("/metrics", metrics_handler)
        app.router.add_get("/health", health)
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, self.options.bind_address, self.options.http_port)
        await site.start()

    def _info(self) -> dict[str, object]:
        return {
            "rack": self.options.rack,
            "readOnly": self._read_only,
            "state": "decommissioning"
            if self.decommissioning
            else "ro"
            if self._read_only
            else "rw",
            "instanceId": self.instance_id,
            "httpPort": self.http_port,
            "version": __version__,
            "tls": self.options.tls is not None,
        }

    @property
    def _read_only(self) -> bool:
        return self.decommissioning or bool(self.storage and self.storage.is_read_only)

    async def _check_decommission(self) -> None:
        """Turn read-only (for good) once ``/bookies/state`` says this instance is leaving."""
        if self.decommissioning:
            return
        record = await self.store.get(keys.bookie_state(self.bookie_id))
        if record is None:
            return
        try:
            doc = json.loads(record.value)
        except ValueError:
            return
        if not isinstance(doc, dict) or doc.get("state") not in (
            "decommissioning",
            "decommissioned",
        ):
            return
        if doc.get("instanceId") not in (None, self.instance_id):
            return  # a predecessor's decommission: this instance has a fresh disk
        log.warning("bookie %s: decommissioning: read-only from now on", self.bookie_id)
        self.decommissioning = True
        if self.service is not None:
            self.service.decommissioning = True

    def _key_for_state(self) -> str:
        if self._read_only:
            return keys.bookie_readonly(self.bookie_id)
        return keys.bookie_available(self.bookie_id)

    async def _register(self) -> None:
        self._session = await self.store.session(self.options.session_ttl)
        self._session.on_lost(self._on_session_lost)
        await identity.register(
            self.store,
            self._session,
            bookie_id=self.bookie_id,
            info=self._info(),
            wait=self.options.session_ttl * 1.5,
        )
        self._registered_key = keys.bookie_available(self.bookie_id)
        if self._key_for_state() != self._registered_key:
            await self._move_registration()

    def _on_session_lost(self) -> None:
        if not self._stopping:
            log.warning("bookie %s: metadata session lost; registering again", self.bookie_id)
            self._registered_key = None

    async def _move_registration(self) -> None:
        assert self._session is not None
        target = self._key_for_state()
        old = self._registered_key
        await self.store.put(target, json.dumps(self._info()).encode(), session=self._session)
        if old is not None and old != target:
            with contextlib.suppress(api.NotFoundError):
                await self.store.delete(old)
        self._registered_key = target

    async def _watch_state(self) -> None:
        while not self._stopping:
            await asyncio.sleep(1.0)
            try:
                await self._check_decommission()
                if self._registered_key is None:
                    await self._register()
                elif self._key_for_state() != self._registered_key:
                    log.info("bookie %s: read-only=%s", self.bookie_id, self._info()["readOnly"])
                    await self._move_registration()
            except Exception as err:  # keep retrying: the store may be unreachable for a while
                log.warning("bookie %s: registration: %s", self.bookie_id, err)

    async def stop(self) -> None:
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()
        if self._grpc is not None:
            await self._grpc.stop(grace=2.0)
        if self._http is not None:
            await self._http.cleanup()
        if self._collector is not None:
            metrics.REGISTRY.unregister(self._collector)
            self._collector = None
        if self.storage is not None:
            await self.storage.close()


async def run(
    metadata_url: str, options: BookieOptions, *, ready: asyncio.Event | None = None
) -> None:
    """Run a bookie until SIGTERM/SIGINT."""
    store = await open_store(metadata_url, tls=options.metadata_tls)
    server = BookieServer(store, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        print(f"bookie {server.bookie_id} ready", flush=True)
        if ready is not None:
            ready.set()
        aio.tune_gc_for_server()
        await stop.wait()
    finally:
        await server.stop()
        await store.close()
