"""Managed ledgers over real bookies.

* ``env`` — an embedded metadata store and 1..3 in-process :class:`BookieServer` instances
  (free loopback ports, data under tmp_path, short session TTL) in the test's event loop,
  a :class:`LedgerClient` and a factory. ``@pytest.mark.parametrize("env", [3],
  indirect=True)`` asks for three bookies. ``env.new_factory()`` is "another broker"
  (its own ledger client on the same store).
* ``proc_env`` (in test_crash.py) — etcd and bookie processes, for SIGKILL tests.

In-process bookies share one Prometheus registry: only the first exports storage gauges.
Bookie reads are counted by the process-wide ``bookie_read_entries`` counter, which the
service increments per entry served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookie import metrics as bookie_metrics
from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.api import ManagedLedgerConfig
from magnetar.managed_ledger.factory import ManagedLedgerFactoryImpl
from magnetar.metadata import api, open_store
from tests.support.procs import LOOPBACK, free_port

TEST_CONFIG = ManagedLedgerConfig(cursor_persist_interval_s=0.2)


def bookie_reads() -> int:
    value = bookie_metrics.REGISTRY.get_sample_value("bookie_read_entries_total")
    return int(value or 0)


@dataclass
class Env:
    store: api.MetadataStore
    bookies: list[BookieServer]
    ledgers: LedgerClient
    factory: ManagedLedgerFactoryImpl
    tmp_path: Path
    extra: list[tuple[ManagedLedgerFactoryImpl, LedgerClient]] = field(default_factory=list)

    def new_factory(
        self, config: ManagedLedgerConfig = TEST_CONFIG, **kw: Any
    ) -> ManagedLedgerFactoryImpl:
        """A second "broker": its own ledger client and factory on the same store."""
        client = LedgerClient(self.store, add_timeout=5.0, rpc_timeout=5.0)
        factory = ManagedLedgerFactoryImpl(self.store, client, default_config=config, **kw)
        self.extra.append((factory, client))
        return factory

    async def ledger_exists(self, ledger_id: int) -> bool:
        from magnetar.metadata import keys

        return await self.store.get(keys.ledger(ledger_id)) is not None


@contextlib.asynccontextmanager
async def open_env(tmp_path: Path, n: int = 1) -> AsyncIterator[Env]:
    """An embedded store, ``n`` in-process bookies, a ledger client and a factory."""
    store = await open_store(f"embedded://{tmp_path / 'metadata'}")
    bookies: list[BookieServer] = []
    for i in range(n):
        opts = BookieOptions(
            data_dir=tmp_path / f"bookie-{i}",
            port=free_port(),
            http_port=free_port(),
            bind_address=LOOPBACK,
            advertised_address=LOOPBACK,
            session_ttl=2.0,
        )
        server = BookieServer(store, opts)
        await server.start()
        bookies.append(server)
    ledgers = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    factory = ManagedLedgerFactoryImpl(
        store, ledgers, default_config=TEST_CONFIG, trim_interval_s=0.5
    )
    e = Env(store, bookies, ledgers, factory, tmp_path)
    try:
        yield e
    finally:
        for f, c in [*e.extra, (factory, ledgers)]:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(f.close(), 10)
            await c.close()
        for b in bookies:
            await b.stop()
        await store.close()


@pytest.fixture
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Env]:
    async with open_env(tmp_path, int(getattr(request, "param", 1))) as e:
        yield e
