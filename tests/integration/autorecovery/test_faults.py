"""Autorecovery under faults (issue 22, acceptance 4), with real bookie and
``magnetar autorecovery`` processes: the elected auditor killed while it marks, a recovery
worker killed while it copies, and two workers racing for the same ledgers. Each time the
lost bookie's ledgers end up moved, and after a second bookie is lost every entry still reads
back by content. (The race runs two workers in this process, so that both go through the
same marks at the same moment.)"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable

import pytest

from magnetar.autorecovery.auditor import Auditor, AuditorOptions
from magnetar.autorecovery.worker import ReplicationWorker, WorkerOptions
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import api, keys, open_store
from tests.integration.autorecovery.conftest import healed, referencing
from tests.support.autorecovery import AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


async def start_cluster(
    bookies: Callable[..., list[BookieProc]], ledgers: LedgerClient
) -> dict[str, BookieProc]:
    procs = {b.bookie_id: b for b in bookies(5)}

    async def registered() -> bool:
        return len(await ledgers.bookies()) == 5

    await eventually(registered, timeout=20, interval=0.2, what="5 bookies registered")
    return procs


async def write(
    ledgers: LedgerClient, count: int, entries: int, size: int
) -> dict[int, list[bytes]]:
    written: dict[int, list[bytes]] = {}
    for _ in range(count):
        h = await ledgers.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
        data = [(b"%d-%d-" % (h.ledger_id, e)).ljust(size, b"x") for e in range(entries)]
        futures = [h.append(d) for d in data]
        await asyncio.gather(*futures)
        await h.close()
        written[h.ledger_id] = data
    return written


async def victim_of(store: api.MetadataStore, procs: dict[str, BookieProc]) -> str:
    load = {b: len(await referencing(store, b)) for b in procs}
    return max(load, key=lambda b: load[b])


async def wait_healed(store: api.MetadataStore, victim: str, timeout: float = 120) -> None:
    async def done() -> bool:
        return await healed(store, victim)

    await eventually(done, timeout=timeout, interval=0.5, what=f"ledgers moved off {victim}")


async def lose_another_and_read_all(
    store: api.MetadataStore,
    procs: dict[str, BookieProc],
    gone: str,
    written: dict[int, list[bytes]],
) -> None:
    second = await victim_of(store, {b: p for b, p in procs.items() if b != gone})
    procs[second].kill()
    reader = LedgerClient(store, rpc_timeout=5.0)
    try:
        for ledger_id, entries in written.items():
            got = await (await reader.open(ledger_id)).read(0, len(entries) - 1)
            assert [d for _, d in got] == entries, f"ledger {ledger_id}"
    finally:
        await reader.close()


async def test_auditor_killed_while_marking(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
) -> None:
    procs = await start_cluster(bookies, ledgers)
    written = await write(ledgers, 120, 4, 64)
    first = autorecovery()

    async def elected() -> bool:
        return bool(first.health()["auditor"])

    await eventually(elected, timeout=20, interval=0.2, what="first process elected auditor")
    second = autorecovery()
    assert second.health()["auditor"] is False
    victim = await victim_of(store, procs)
    procs[victim].kill()

    async def marking() -> bool:
        return bool(await ur.marks(store))

    await eventually(marking, timeout=30, interval=0.02, what="the auditor's first mark")
    first.kill()  # as soon as its first mark appears: mid-audit or just after
    await wait_healed(store, victim)
    assert second.health()["auditor"] is True
    await lose_another_and_read_all(store, procs, victim, written)


async def test_worker_killed_while_copying(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
) -> None:
    procs = await start_cluster(bookies, ledgers)
    written = await write(ledgers, 1, 3000, 16 * 1024)
    (ledger_id,) = written
    victim = (await ledgers.read_metadata(ledger_id))[0].last_fragment.ensemble[0]
    procs[victim].kill()
    first = autorecovery()

    async def claimed() -> bool:
        return await store.get(keys.underreplication_lock(ledger_id)) is not None

    await eventually(claimed, timeout=60, interval=0.01, what="a worker claimed the ledger")
    first.kill()
    assert await ur.mark_of(store, ledger_id) is not None, "killed before it could finish"
    assert victim in (await ledgers.read_metadata(ledger_id))[0].last_fragment.ensemble
    autorecovery()  # takes the ledger over once the killed worker's claim expired
    await wait_healed(store, victim)
    await lose_another_and_read_all(store, procs, victim, written)


@pytest.mark.parametrize("rate_bytes", [-1, 256 << 10], ids=["unlimited", "256KiB-per-s"])
async def test_two_workers_race_for_the_same_ledgers(
    bookies: Callable[..., list[BookieProc]],
    ledgers: LedgerClient,
    store: api.MetadataStore,
    metadata_url: str,
    caplog: pytest.LogCaptureFixture,
    rate_bytes: int,
) -> None:
    """Two workers (each its own store connection, session and ledger client) go through the
    same marks at the same moment: each ledger is claimed, copied and swapped by one only;
    also with each worker held to 256 KiB/s (``replicationRateByBytes``)."""
    procs = await start_cluster(bookies, ledgers)
    written = await write(ledgers, 12, 200, 1024)
    victim = await victim_of(store, procs)
    moved = await referencing(store, victim)
    procs[victim].kill()

    async def unregistered() -> bool:
        return victim not in {b.bookie_id for b in await ledgers.bookies()}

    await eventually(unregistered, timeout=20, interval=0.2, what=f"{victim}'s lease expired")
    auditor = Auditor(store, ledgers, AuditorOptions(lost_bookie_recovery_delay=0), name="aud")
    await auditor.audit()
    assert sorted(m.ledger_id for m in await ur.marks(store)) == sorted(moved)

    stores = [await open_store(metadata_url) for _ in range(2)]
    clients = [LedgerClient(s, rpc_timeout=5.0) for s in stores]
    workers = [
        ReplicationWorker(s, c, WorkerOptions(rate_bytes=rate_bytes), name=f"w{i}")
        for i, (s, c) in enumerate(zip(stores, clients, strict=True))
    ]
    sessions = [await s.session(5.0) for s in stores]
    try:
        caplog.set_level(logging.INFO, logger="magnetar.autorecovery.worker")
        while await ur.marks(store):
            await asyncio.gather(*(w.run_once(s) for w, s in zip(workers, sessions, strict=True)))
    finally:
        for session in sessions:
            await session.close()
        for c in clients:
            await c.close()
        for s in stores:
            await s.close()
    assert sum(w.recovered for w in workers) == len(moved)
    copies: Counter[tuple[str, str, str]] = Counter()
    for record in caplog.records:
        m = re.search(r"ledger (\d+): fragment (\d+) position (\d+) ", record.getMessage())
        if m:
            copies[(m[1], m[2], m[3])] += 1
    assert {int(k[0]) for k in copies} == set(moved)
    assert set(copies.values()) == {1}, copies
    assert await healed(store, victim)
    await lose_another_and_read_all(store, procs, victim, written)


async def test_etcd_unavailable_for_a_while(
    bookies: Callable[..., list[BookieProc]],
    autorecovery: Callable[..., AutorecoveryProc],
    ledgers: LedgerClient,
    store: api.MetadataStore,
    own_etcd: EtcdServer,
) -> None:
    """etcd killed right after the bookie loss and back 8 s later (longer than every lease):
    sessions are renewed or re-created, the auditor is elected again, recovery completes."""
    procs = await start_cluster(bookies, ledgers)
    written = await write(ledgers, 10, 100, 512)
    proc = autorecovery()
    victim = await victim_of(store, procs)
    procs[victim].kill()
    own_etcd.kill()
    await asyncio.sleep(8)
    own_etcd.start()
    await wait_healed(store, victim)
    assert proc.alive()
    await lose_another_and_read_all(store, procs, victim, written)
