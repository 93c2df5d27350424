"""Fencing and recovery: B opens A's ledger with recovery while A still writes."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import LedgerClosedError, LedgerFencedError
from magnetar.ledger.metadata import LedgerState
from tests.integration.ledger.conftest import wait_bookies

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize(("e", "wq", "aq"), [(3, 3, 2), (3, 2, 2), (1, 1, 1)])
async def test_recovery_fences_the_old_writer(bookies, ledgers: LedgerClient, e, wq, aq) -> None:
    bookies(3)
    await wait_bookies(ledgers, 3)
    writer_a = await ledgers.create(ensemble_size=e, write_quorum=wq, ack_quorum=aq)
    acked_by_a = [await writer_a.add_entry(f"a-{i}".encode()) for i in range(200)]
    # leave a pipeline of un-awaited adds in flight when B recovers
    in_flight = [writer_a.append(f"a-{i}".encode()) for i in range(200, 400)]

    client_b = LedgerClient(ledgers.store, rpc_timeout=5.0)
    try:
        reader_b = await client_b.open(writer_a.ledger_id, recovery=True)
        results = await asyncio.gather(*in_flight, return_exceptions=True)
        acked_by_a += [r for r in results if isinstance(r, int)]
        failed = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, LedgerFencedError) for r in failed), failed

        # A's next adds fail with a fenced error
        with pytest.raises((LedgerFencedError, LedgerClosedError)):
            await writer_a.add_entry(b"after recovery")

        meta = reader_b.metadata
        assert meta.state is LedgerState.CLOSED
        last = meta.last_entry_id
        assert last >= max(acked_by_a), (last, max(acked_by_a))
        # readers of the closed ledger see exactly 0..last
        entries = await reader_b.read(0, last)
        assert [eid for eid, _ in entries] == list(range(last + 1))
        assert [d for _, d in entries] == [f"a-{i}".encode() for i in range(last + 1)]
        with pytest.raises(Exception, match="past the last add confirmed"):
            await reader_b.read(last + 1, last + 1)
        # the length recorded at recovery is the bytes of entries 0..last
        assert meta.length == sum(len(d) for _, d in entries)
    finally:
        await client_b.close()

    # A can no longer close the ledger at another end
    with pytest.raises(LedgerFencedError):
        await writer_a.close()


async def test_recovery_of_an_empty_open_ledger(bookies, ledgers: LedgerClient) -> None:
    bookies(2)
    await wait_bookies(ledgers, 2)
    writer = await ledgers.create(ensemble_size=2, write_quorum=2, ack_quorum=2)
    handle = await ledgers.open(writer.ledger_id, recovery=True)
    assert handle.metadata.closed and handle.metadata.last_entry_id == -1
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"x")
