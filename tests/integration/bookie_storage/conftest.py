"""Fixtures for bookie storage tests on a temporary directory: build a config, open storages
and always close them (even when the test fails)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookie.storage import api
from magnetar.bookie.storage.config import BookieStorageConfig
from magnetar.bookie.storage.db import DbLedgerStorage

MakeConfig = Callable[..., BookieStorageConfig]
Open = Callable[..., Any]


@pytest.fixture
def make_config(tmp_path: Path) -> MakeConfig:
    """A config on tmp_path; no periodic flush/GC unless a test asks (deterministic tests)."""

    def make(**overrides: Any) -> BookieStorageConfig:
        values: dict[str, Any] = {
            "journal_dir": tmp_path / "journal",
            "data_dir": tmp_path / "data",
            "flush_interval_s": 3600.0,
            "gc_interval_s": 3600.0,
            "disk_usage_threshold": 1.0,
            "disk_usage_lwm": 1.0,
        }
        values.update(overrides)
        return BookieStorageConfig(**values)

    return make


@pytest.fixture
async def open_storage(make_config: MakeConfig) -> AsyncIterator[Open]:
    """``await open_storage(**config_overrides)`` -> a started DbLedgerStorage."""
    opened: list[DbLedgerStorage] = []

    async def do_open(**overrides: Any) -> DbLedgerStorage:
        storage = DbLedgerStorage(make_config(**overrides))
        opened.append(storage)
        await storage.start()
        return storage

    yield do_open
    for storage in opened:
        await storage.close(flush=False)


def add(
    ledger: int,
    entry: int,
    data: bytes,
    *,
    key: bytes = b"key",
    lac: int = -1,
    recovery: bool = False,
) -> api.AddRequest:
    return api.AddRequest(api.LedgerId(ledger), api.EntryId(entry), key, lac, data, recovery)


def payload(ledger: int, entry: int, size: int = 64) -> bytes:
    """Deterministic, entry-specific bytes."""
    seed = f"{ledger}:{entry};".encode()
    return (seed * (size // len(seed) + 1))[:size]
