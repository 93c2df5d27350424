"""A bookie lost for good: its ledgers are re-replicated from the surviving copies, and the
restored copies serve when a second bookie is lost (issue 22, acceptance 1, at the ledger
level; test_broker_recovery.py does it through a broker and the official client)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from magnetar.ledger import entry
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.entry import unwrap
from magnetar.ledger.errors import BookieError, LedgerError
from magnetar.metadata import api
from tests.integration.autorecovery.conftest import healed, referencing
from tests.support.autorecovery import FAST, AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


def metric_values(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def payload(ledger: int, entry: int) -> bytes:
    return f"ledger-{ledger}-entry-{entry}-".encode() * 20


async def wait_registered(ledgers: LedgerClient, n: int) -> None:
    async def enough() -> bool:
        return len(await ledgers.bookies()) >= n

    await eventually(enough, timeout=20, interval=0.2, what=f"{n} bookies registered")


async def test_lost_bookie_is_rereplicated_and_copies_serve(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
) -> None:
    procs = {b.bookie_id: b for b in bookies(5)}
    await wait_registered(ledgers, 5)
    written: dict[int, list[bytes]] = {}
    handles = []
    for _ in range(4):
        h = await ledgers.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
        written[h.ledger_id] = []
        for i in range(60):
            data = payload(h.ledger_id, i)
            await h.add_entry(data)
            written[h.ledger_id].append(data)
        handles.append(h)
    for h in handles[:3]:
        await h.close()
    writer = handles[3]  # stays open: its writer replaces the lost bookie itself
    recovery = autorecovery()

    victim = writer.metadata.last_fragment.ensemble[0]
    on_victim = await referencing(store, victim)
    procs[victim].kill()
    for i in range(60, 90):
        data = payload(writer.ledger_id, i)
        await writer.add_entry(data)
        written[writer.ledger_id].append(data)
    assert victim not in writer.metadata.last_fragment.ensemble

    async def victim_healed() -> bool:
        return await healed(store, victim)

    await eventually(victim_healed, timeout=90, interval=0.5, what=f"ledgers moved off {victim}")

    async def elected() -> bool:  # (a lease lost on this loaded machine: elected again)
        return metric_values(recovery.metrics())["autorecovery_auditor_elected"] == 1

    await eventually(elected, timeout=30, interval=0.5, what="the process is the auditor")
    figures = metric_values(recovery.metrics())
    # E=3, Wq=2: the victim held 2 of every 3 of the first 60 entries of each of its ledgers
    # (more when a copy failed part-way on this loaded machine and was done again)
    assert figures["autorecovery_rereplicated_entries_total"] >= 40 * len(on_victim)
    assert figures["autorecovery_rereplicated_bytes_total"] > 40 * len(on_victim) * 340
    assert figures["autorecovery_recovered_ledgers_total"] == len(on_victim)

    # The writer closes over the metadata the worker changed under it (CAS, kept ensembles).
    await writer.close()
    assert writer.metadata.closed and writer.metadata.last_entry_id == 89

    # A second bookie lost: every entry still has a copy, the restored ones included.
    load = {b: len(await referencing(store, b)) for b in procs if b != victim}
    second = max(load, key=lambda b: load[b])
    procs[second].kill()
    reader = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    try:
        for ledger_id, entries in written.items():
            handle = await reader.open(ledger_id)
            got = await handle.read(0, len(entries) - 1)
            assert [data for _, data in got] == entries, f"ledger {ledger_id}"
    finally:
        await reader.close()


async def test_idle_open_ledger_is_fenced_recovered_and_moved(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
) -> None:
    """A writer that stays silent after losing a bookie of its last fragment: past the grace
    period the worker fences the ledger, closes it at its last entry and moves the fragment;
    the old writer's next add fails (never two writers) and every entry it had confirmed
    reads back."""
    procs = {b.bookie_id: b for b in bookies(5)}
    await wait_registered(ledgers, 5)
    writer = await ledgers.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
    entries = [payload(writer.ledger_id, i) for i in range(40)]
    for data in entries:
        await writer.add_entry(data)
    victim = writer.metadata.last_fragment.ensemble[1]
    procs[victim].kill()
    autorecovery()

    async def moved() -> bool:
        return await healed(store, victim)

    await eventually(moved, timeout=90, interval=0.5, what="the open ledger moved")
    meta, _ = await ledgers.read_metadata(writer.ledger_id)
    assert meta.closed and meta.last_entry_id == len(entries) - 1
    with pytest.raises(LedgerError):
        await writer.add_entry(b"too late")
    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        got = await (await reader.open(writer.ledger_id)).read(0, len(entries) - 1)
        assert [d for _, d in got] == entries
    finally:
        await reader.close()


async def test_periodic_check_finds_a_replica_that_lost_its_entries(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
) -> None:
    """auditorPeriodicCheckInterval: a live bookie that no longer has a closed ledger's
    entries (deleted there through its own API) is found, and the ledger moved off it."""
    bookies(4)
    await wait_registered(ledgers, 4)
    h = await ledgers.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
    entries = [payload(h.ledger_id, i) for i in range(30)]
    for data in entries:
        await h.add_entry(data)
    await h.close()
    emptied = h.metadata.last_fragment.ensemble[2]
    await ledgers.bookie(emptied).delete_ledger(h.ledger_id)
    autorecovery((*FAST, "--periodic-check-interval", "2"))

    async def moved() -> bool:
        return await healed(store, emptied)

    await eventually(moved, timeout=60, interval=0.5, what=f"the ledger moved off {emptied}")
    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        handle = await reader.open(h.ledger_id)
        for entry_id, data in enumerate(entries):  # every replica that remains holds its copy
            for bookie in handle.metadata.write_set(entry_id):
                got = await reader.bookie(bookie).read(h.ledger_id, entry_id, entry_id)
                assert [d for _, d in got] and unwrap(got[0][1])[1] == data
    finally:
        await reader.close()


async def test_a_decommissioning_bookie_refuses_writers_but_takes_recovery_adds(
    bookies: Callable[..., list[BookieProc]], ledgers: LedgerClient, store: api.MetadataStore
) -> None:
    (proc,) = bookies(1)
    await wait_registered(ledgers, 1)
    h = await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    await h.add_entry(b"before")
    status = await ur.start_decommission(store, proc.bookie_id)
    assert status.state is ur.BookieState.DECOMMISSIONING

    async def read_only() -> bool:
        listed = {s.bookie_id: s for s in await ur.bookie_statuses(store)}
        return not await ledgers.bookies() and listed[proc.bookie_id].registered

    await eventually(read_only, timeout=20, interval=0.2, what="the bookie turned read-only")
    bookie = ledgers.bookie(proc.bookie_id)
    with pytest.raises(BookieError, match="being decommissioned"):
        await bookie.add_future(
            ledger_id=h.ledger_id, entry_id=1, master_key=h.metadata.password, lac=0,
            data=entry.wrap(3, b"w1"),
        )  # fmt: skip
    await bookie.add_future(
        ledger_id=h.ledger_id, entry_id=1, master_key=h.metadata.password, lac=0,
        data=entry.wrap(3, b"r1"), recovery=True,
    )  # fmt: skip
    got = await bookie.read(h.ledger_id, 1, 1, past_lac=True)
    assert entry.unwrap(got[0][1])[1] == b"r1"
