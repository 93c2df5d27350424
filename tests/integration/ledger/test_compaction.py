"""Deleting ledgers and compacting lowers the bookie's data directory size (measured)."""

from __future__ import annotations

import asyncio
import os

import pytest

from magnetar.ledger.client import LedgerClient
from tests.integration.ledger.conftest import wait_bookies
from tests.support.bookies import dir_size
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


async def test_delete_and_compaction_reclaim_space(bookies, ledgers: LedgerClient) -> None:
    (bookie,) = bookies(1, extra_args=["--flush-interval", "0.5", "--gc-interval", "1"])
    await wait_bookies(ledgers, 1)
    handles = [
        await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1) for _ in range(3)
    ]
    blob = os.urandom(64 * 1024)
    for _ in range(60):  # interleaved: the three ledgers share entry logs
        await asyncio.gather(*(h.add_entry(blob) for h in handles))
    for h in handles:
        await h.close()

    def flushed() -> int:  # the data directory's size once the entries are in entry logs
        size = dir_size(bookie.ledgers_dir)
        return size if size > 3 * 60 * len(blob) * 0.9 else 0

    before = await eventually(flushed, what="the entries flushed to entry logs")

    for h in handles[:2]:
        await ledgers.delete(h.ledger_id)
    await eventually(
        lambda: dir_size(bookie.ledgers_dir) <= before * 0.6,
        timeout=20,
        interval=0.5,
        what=f"compaction below 60% of {before} bytes",
    )
    after = dir_size(bookie.ledgers_dir)
    print(f"data dir: {before} bytes before, {after} after deleting 2 of 3 ledgers")

    kept = await ledgers.open(handles[2].ledger_id)
    got = await kept.read(0, 59)
    assert all(d == blob for _, d in got) and len(got) == 60
    deleted = await asyncio.gather(
        *(
            ledgers.bookie(bookie.bookie_id).read(h.ledger_id, 0, 0, past_lac=True)
            for h in handles[:2]
        ),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in deleted), deleted
