"""A bookie killed with SIGKILL during 10,000 pipelined adds: the writer changes its
ensemble and carries on without an error, and every acknowledged entry reads back intact."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.metadata import LedgerState
from tests.integration.ledger.conftest import wait_bookies

pytestmark = pytest.mark.etcd

N = 10_000
WINDOW = 500


def payload(i: int) -> bytes:
    return f"entry-{i:05d}-".encode() + hashlib.sha256(str(i).encode()).digest() * 8


@pytest.mark.parametrize(("e", "wq", "aq"), [(3, 3, 2), (3, 2, 2)])
async def test_bookie_killed_during_adds(bookies, ledgers: LedgerClient, e, wq, aq) -> None:
    # Three bookies hold the ensemble; a fourth is the spare an ensemble change moves to.
    procs = bookies(4)
    await wait_bookies(ledgers, 4)
    handle = await ledgers.create(ensemble_size=e, write_quorum=wq, ack_quorum=aq)
    victim_id = handle.metadata.last_fragment.ensemble[1]
    victim = next(b for b in procs if b.bookie_id == victim_id)

    acked: dict[int, int] = {}  # entry id -> i
    inflight: set[asyncio.Future[int]] = set()
    for i in range(N):
        fut = handle.append(payload(i))
        fut.add_done_callback(lambda f, i=i: acked.__setitem__(f.result(), i))
        inflight.add(fut)
        if len(inflight) >= WINDOW:
            done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for f in done:
                f.result()  # an error to the caller fails the test here
        if i == N // 3:
            victim.kill()
    for f in asyncio.as_completed(inflight):
        await f
    await handle.close()

    assert sorted(acked) == list(range(N))
    assert all(acked[eid] == eid for eid in acked), "entry ids follow append order"
    meta, _ = await ledgers.read_metadata(handle.ledger_id)
    assert meta.state is LedgerState.CLOSED and meta.last_entry_id == N - 1
    assert len(meta.fragments) >= 2, "the ledger metadata records the ensemble change"
    assert victim_id in meta.fragments[0].ensemble
    assert victim_id not in meta.last_fragment.ensemble
    assert 0 < meta.last_fragment.first_entry_id < N

    reader = LedgerClient(ledgers.store, rpc_timeout=5.0)
    try:
        h = await reader.open(handle.ledger_id)
        got: list[tuple[int, bytes]] = []
        for first in range(0, N, 1000):
            got += await h.read(first, min(N - 1, first + 999))
        assert [eid for eid, _ in got] == list(range(N))
        bad = [eid for eid, data in got if data != payload(eid)]
        assert not bad, f"{len(bad)} entries differ, first {bad[:5]}"
        assert h.length == sum(len(payload(i)) for i in range(N))
    finally:
        await reader.close()
