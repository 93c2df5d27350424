"""A real etcd and real bookie processes for the ledger-client suites."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.metadata import api, open_store
from tests.conftest import etcd_url
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


@pytest.fixture
def metadata_url(own_etcd: EtcdServer) -> str:
    return etcd_url(own_etcd, timeout=5.0)


@pytest.fixture
def bookies(metadata_url: str, tmp_path: Path) -> Iterator[Callable[..., list[BookieProc]]]:
    """Start bookies: ``bookies(3)`` or ``bookies(racks=["r1", "r2"])``."""
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
async def store(metadata_url: str) -> AsyncIterator[api.MetadataStore]:
    s = await open_store(metadata_url)
    yield s
    await s.close()


@pytest.fixture
async def ledgers(store: api.MetadataStore) -> AsyncIterator[LedgerClient]:
    client = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    yield client
    await client.close()


async def wait_bookies(client: LedgerClient, n: int, timeout: float = 10.0) -> None:
    async def enough() -> bool:
        return len(await client.bookies()) >= n

    await eventually(enough, timeout=timeout, interval=0.1, what=f"{n} bookies registered")
