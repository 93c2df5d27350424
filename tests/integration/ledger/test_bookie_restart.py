"""A bookie killed with SIGKILL comes back with everything it acknowledged; a journal whose
tail was torn mid-record restarts cleanly, losing only that record."""

from __future__ import annotations

import pytest

from magnetar.ledger.client import LedgerClient
from tests.integration.ledger.conftest import wait_bookies

pytestmark = pytest.mark.etcd


async def write(ledgers: LedgerClient, n: int) -> tuple[int, list[bytes]]:
    """n entries: all but the last pipelined, then the last one alone (so that it is the
    journal's last record: the journal writes one record per add request)."""
    handle = await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    data = [f"entry-{i}".encode() * 20 for i in range(n)]
    futures = [handle.append(d) for d in data[:-1]]
    for i, f in enumerate(futures):
        assert await f == i
    assert await handle.add_entry(data[-1]) == n - 1
    return handle.ledger_id, data


async def test_killed_bookie_serves_every_acknowledged_entry(bookies, store) -> None:
    (bookie,) = bookies(1)
    writer = LedgerClient(store, add_timeout=3.0, rpc_timeout=3.0)
    await wait_bookies(writer, 1)
    ledger_id, data = await write(writer, 3000)
    bookie.kill()  # acknowledged entries may still be only in the journal
    await writer.close()
    bookie.start()

    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        await wait_bookies(reader, 1)
        handle = await reader.open(ledger_id, recovery=True)
        assert handle.metadata.last_entry_id == len(data) - 1
        got = await handle.read(0, len(data) - 1)
        assert [d for _, d in got] == data
    finally:
        await reader.close()


async def test_torn_journal_tail_is_cut_on_restart(bookies, store) -> None:
    (bookie,) = bookies(1, extra_args=["--flush-interval", "600"])
    writer = LedgerClient(store, add_timeout=3.0, rpc_timeout=3.0)
    await wait_bookies(writer, 1)
    ledger_id, data = await write(writer, 500)
    bookie.kill()
    await writer.close()

    journals = sorted(
        (p for p in bookie.journal_dir.iterdir() if p.is_file() and p.name != "COOKIE"),
        key=lambda p: p.stat().st_mtime,
    )
    newest = journals[-1]
    size = newest.stat().st_size
    with open(newest, "r+b") as f:  # cut the last record (the last entry) mid-way: torn
        f.truncate(size - 60)

    bookie.start()
    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        await wait_bookies(reader, 1)
        handle = await reader.open(ledger_id, recovery=True)
        last = handle.metadata.last_entry_id
        assert last == len(data) - 2, "exactly the torn record is lost"
        got = await handle.read(0, last)
        assert [d for _, d in got] == data[: last + 1]
        # and the bookie takes new work
        h2 = await reader.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
        assert await h2.add_entry(b"after restart") == 0
        await h2.close()
    finally:
        await reader.close()
    assert "journal" in bookie.proc.tail(200).lower()
