"""A real bookie inside the test's own process, on an embedded metadata store, with a ledger
client that adds to it through the local transport: the quickest way to get real ledgers
for suites that test what is built on top of them (offload, benchmarks)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import api, open_store
from tests.support.procs import LOOPBACK, free_port
from tests.support.wait import eventually


@dataclass
class LocalLedgers:
    store: api.MetadataStore
    bookie: BookieServer
    client: LedgerClient


@contextlib.asynccontextmanager
async def local_ledgers(
    base: Path, *, timeout: float = 10.0, client_timeout: float = 10.0
) -> AsyncIterator[LocalLedgers]:
    """Store under ``base/metadata``, bookie under ``base/bookie`` (free loopback ports),
    registered before this yields (within ``timeout``); the client's add and RPC timeouts
    are ``client_timeout``. Everything is closed on exit."""
    store = await open_store(f"embedded://{base / 'metadata'}")
    bookie = BookieServer(
        store,
        BookieOptions(
            data_dir=base / "bookie",
            port=free_port(),
            http_port=free_port(),
            bind_address=LOOPBACK,
            advertised_address=LOOPBACK,
            session_ttl=2.0,
        ),
    )
    await bookie.start()
    assert bookie.service is not None
    client = LedgerClient(
        store,
        add_timeout=client_timeout,
        rpc_timeout=client_timeout,
        local_bookies={bookie.bookie_id: bookie.service},
    )
    try:
        await eventually(client.bookies, timeout=timeout, what="the bookie registered")
        yield LocalLedgers(store, bookie, client)
    finally:
        await client.close()
        await bookie.stop()
        await store.close()
