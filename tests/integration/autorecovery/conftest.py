"""A real etcd, real bookie processes and ``magnetar autorecovery`` processes for the
autorecovery suites (docs/operations.md, "Autorecovery and decommission")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import api, keys, open_store
from tests.conftest import etcd_url
from tests.support.autorecovery import FAST, AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.etcd


@pytest.fixture
def metadata_url(own_etcd: EtcdServer) -> str:
    return etcd_url(own_etcd, timeout=5.0)


@pytest.fixture
def bookies(metadata_url: str, tmp_path: Path) -> Iterator[Callable[..., list[BookieProc]]]:
    """Start bookies: ``bookies(5)`` or ``bookies(racks=["r1", "r2"])``."""
    started: list[BookieProc] = []

    def start(n: int = 0, *, racks: list[str] | None = None, **kw: object) -> list[BookieProc]:
        specs = racks or ["/default-rack"] * n
        new = [BookieProc(metadata_url, tmp_path, rack=r, **kw) for r in specs]  # type: ignore[arg-type]
        for b in new:
            started.append(b)
            b.start()
        return new

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def autorecovery(metadata_url: str, tmp_path: Path) -> Iterator[Callable[..., AutorecoveryProc]]:
    """Start ``magnetar autorecovery`` processes (``extra_args``: its flags, FAST by default)."""
    started: list[AutorecoveryProc] = []

    def start(extra_args: tuple[str, ...] = FAST) -> AutorecoveryProc:
        proc = AutorecoveryProc(metadata_url, tmp_path, extra_args=extra_args)
        started.append(proc)
        return proc.start()

    yield start
    for p in started:
        p.stop()


@pytest.fixture
async def store(metadata_url: str) -> AsyncIterator[api.MetadataStore]:
    s = await open_store(metadata_url)
    yield s
    await s.close()


@pytest.fixture
async def ledgers(store: api.MetadataStore) -> AsyncIterator[LedgerClient]:
    client = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    yield client
    await client.close()


async def all_ledgers(store: api.MetadataStore) -> list[LedgerMetadata]:
    return [LedgerMetadata.from_json(r.value) async for r in store.scan_all(keys.LEDGERS)]


async def referencing(store: api.MetadataStore, bookie_id: str) -> list[int]:
    """Ledgers whose ensembles still name ``bookie_id``."""
    return [
        m.ledger_id
        for m in await all_ledgers(store)
        if any(bookie_id in f.ensemble for f in m.fragments)
    ]


async def healed(store: api.MetadataStore, bookie_id: str) -> bool:
    """No ledger names ``bookie_id`` and no ledger is marked under-replicated."""
    return not await referencing(store, bookie_id) and not await ur.marks(store)
