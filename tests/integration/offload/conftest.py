"""A real MinIO (tests/support/minio.py), a real bookie in this process and a ledger client
for the offload suites. Ledgers are written through the ledger client, closed, and handed to
the offloader exactly as the managed ledger will hand them."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookie.server import BookieOptions, BookieServer
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.metadata import api, open_store
from magnetar.offload.config import MiB, S3Config
from magnetar.offload.offloader import Offloader
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available
from tests.support.procs import LOOPBACK, free_port

BLOCK = 5 * MiB
"""The smallest block S3 allows: several blocks per ledger without writing much."""
_bucket_numbers = itertools.count(1)


def _need_minio() -> None:
    if not minio_available():
        pytest.skip(f"the MinIO binary is not built (run {INSTALL_SCRIPT}; `make test` does)")


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """One MinIO for the session; every test gets its own bucket."""
    _need_minio()
    server = MinioServer(tmp_path_factory.mktemp("minio")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_minio(tmp_path: Path) -> Iterator[MinioServer]:
    """A private MinIO, for tests that stop, pause or restart it."""
    _need_minio()
    server = MinioServer(tmp_path / "own-minio").start()
    try:
        yield server
    finally:
        server.stop()


def config_for(server: MinioServer, bucket: str, **overrides: Any) -> S3Config:
    base = S3Config(
        bucket=bucket,
        driver="S3",
        region=server.region,
        endpoint_url=server.endpoint,
        path_style=True,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        block_size=BLOCK,
        read_cache_bytes=4 * BLOCK,
        connect_timeout_s=2.0,
        read_timeout_s=10.0,
        max_attempts=2,
    )
    return replace(base, **overrides)


def new_bucket(server: MinioServer) -> str:
    return server.create_bucket(f"offload-{os.getpid()}-{next(_bucket_numbers)}")


@pytest.fixture
def bucket(minio: MinioServer) -> str:
    return new_bucket(minio)


@pytest.fixture
async def offloader(minio: MinioServer, bucket: str) -> AsyncIterator[Offloader]:
    o = Offloader(config_for(minio, bucket))
    yield o
    await o.close()


@dataclass
class LedgerEnv:
    store: api.MetadataStore
    bookie: BookieServer
    client: LedgerClient

    async def write(self, payloads: Sequence[bytes]) -> LedgerHandle:
        """A closed ledger holding ``payloads``, opened for reading as the managed ledger
        opens closed ledgers."""
        writer = await self.client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
        futures = [writer.append(p) for p in payloads]
        if futures:
            await asyncio.gather(*futures)
        await writer.close()
        return await self.client.open(writer.ledger_id)


@pytest.fixture
async def ledgers(tmp_path: Path) -> AsyncIterator[LedgerEnv]:
    store = await open_store(f"embedded://{tmp_path / 'metadata'}")
    bookie = BookieServer(
        store,
        BookieOptions(
            data_dir=tmp_path / "bookie",
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
        store, add_timeout=10.0, rpc_timeout=10.0, local_bookies={bookie.bookie_id: bookie.service}
    )
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not await client.bookies():
            assert asyncio.get_running_loop().time() < deadline, "bookie never registered"
            await asyncio.sleep(0.05)
        yield LedgerEnv(store, bookie, client)
    finally:
        await client.close()
        await bookie.stop()
        await store.close()


def payloads(sizes: Sequence[int], seed: int = 0) -> list[bytes]:
    """Distinct, non-repeating payloads of the given sizes (a misplaced byte shows)."""
    out = []
    for i, n in enumerate(sizes):
        head = f"{seed}:{i}:".encode()
        block = (head * (n // max(1, len(head)) + 1))[:n]
        out.append(os.urandom(min(n, 64)) + block[min(n, 64) :])
    return out


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(0.02)
