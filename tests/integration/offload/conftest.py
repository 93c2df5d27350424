"""A real MinIO (tests/support/minio.py), a real bookie in this process and a ledger client
for the offload suites. Ledgers are written through the ledger client, closed, and handed to
the offloader exactly as the managed ledger will hand them."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.offload.config import MiB, S3Config
from magnetar.offload.offloader import (
    Offloader,
    OffloadLocation,
    OffloadResult,
    ReadableLedger,
)
from magnetar.offload.reader import OffloadedLedgerReader
from tests.support.local_bookie import local_ledgers
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available
from tests.support.procs import started

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
    with started(MinioServer(tmp_path_factory.mktemp("minio"))) as server:
        yield server


@pytest.fixture
def own_minio(tmp_path: Path) -> Iterator[MinioServer]:
    """A private MinIO, for tests that stop, pause or restart it."""
    _need_minio()
    with started(MinioServer(tmp_path / "own-minio")) as server:
        yield server


def config_for(server: MinioServer, bucket: str, **overrides: Any) -> S3Config:
    """Generous timeouts (a loaded machine can stall MinIO's disk writes for seconds); the
    tests of a stalled S3 override them."""
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
        connect_timeout_s=5.0,
        read_timeout_s=60.0,
        max_attempts=3,
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
    async with local_ledgers(tmp_path) as env:
        yield LedgerEnv(env.client)


async def offload_and_open(
    offloader: Offloader, ledger: ReadableLedger, *, topic: str = ""
) -> tuple[OffloadResult, OffloadedLedgerReader]:
    """Offload ``ledger`` in a new attempt and open a reader from the record it returns."""
    result = await offloader.offload(ledger, offloader.begin(ledger.ledger_id), topic=topic)
    location = OffloadLocation.from_record(ledger.ledger_id, result.to_record())
    return result, await offloader.open_reader(location, topic=topic)


def payloads(sizes: Sequence[int], seed: int = 0) -> list[bytes]:
    """Distinct, non-repeating payloads of the given sizes (a misplaced byte shows)."""
    out = []
    for i, n in enumerate(sizes):
        head = f"{seed}:{i}:".encode()
        block = (head * (n // max(1, len(head)) + 1))[:n]
        out.append(os.urandom(min(n, 64)) + block[min(n, 64) :])
    return out
