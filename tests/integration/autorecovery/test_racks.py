"""Rack-aware placement kept by re-replication (issue 22, acceptance 3): bookies in three
racks, every ensemble of many ledgers spans min(E, racks) racks, and still does after the
ledgers of a killed bookie were moved — here by the autorecovery daemons running inside the
bookies (``--autorecovery true``, BookKeeper's autoRecoveryDaemonEnabled)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import api
from tests.integration.autorecovery.conftest import all_ledgers, healed
from tests.support.autorecovery import FAST
from tests.support.bookies import BookieProc
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd

RACKS = ["/r1", "/r1", "/r2", "/r2", "/r3", "/r3"]


async def test_ensembles_span_racks_before_and_after_rereplication(
    bookies: Callable[..., list[BookieProc]], ledgers: LedgerClient, store: api.MetadataStore
) -> None:
    procs = bookies(racks=RACKS, extra_args=("--autorecovery", "true", *FAST))
    rack_of = {p.bookie_id: r for p, r in zip(procs, RACKS, strict=True)}

    async def registered() -> bool:
        return len(await ledgers.bookies()) == len(RACKS)

    await eventually(registered, timeout=20, interval=0.2, what="bookies registered")

    # autoRecoveryDaemonEnabled: one of the bookies is the auditor, on its own /metrics
    async def one_auditor() -> bool:
        return sum("autorecovery_auditor_elected 1.0" in p.metrics() for p in procs) == 1

    await eventually(one_auditor, timeout=20, interval=0.5, what="exactly one auditor")
    listed = {s.bookie_id: s for s in await ur.bookie_statuses(store)}
    assert {b: s.rack for b, s in listed.items()} == rack_of
    assert {s.state for s in listed.values()} == {ur.BookieState.RW}

    written = {}
    for i in range(24):
        h = await ledgers.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
        written[h.ledger_id] = [b"l%d-e%d" % (i, e) for e in range(12)]
        for data in written[h.ledger_id]:
            await h.add_entry(data)
        await h.close()

    def spans(metas: list) -> list[set[str]]:  # type: ignore[type-arg]
        return [{rack_of[b] for b in f.ensemble} for m in metas for f in m.fragments]

    assert all(len(r) == 3 for r in spans(await all_ledgers(store)))

    victim = procs[0]  # rack /r1: its only rack-mate is the one replacement keeping the rule
    victim.kill()

    async def moved() -> bool:
        return await healed(store, victim.bookie_id)

    await eventually(moved, timeout=90, interval=0.5, what="ledgers moved off the victim")
    after = await all_ledgers(store)
    assert all(len(r) == 3 for r in spans(after)), spans(after)
    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        for ledger_id, entries in written.items():
            got = await (await reader.open(ledger_id)).read(0, len(entries) - 1)
            assert [d for _, d in got] == entries
    finally:
        await reader.close()
