"""Adds, reads and positions across roll-overs; the entry cache; waiting for entries."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from magnetar.ledger import entry
from magnetar.managed_ledger import api
from magnetar.managed_ledger.ledger import ManagedLedgerImpl
from tests.integration.managed_ledger.conftest import TEST_CONFIG, Env, bookie_reads
from tests.support.wait import eventually

NAME = "public/default/persistent/t1"


def cfg(**kw: object) -> api.ManagedLedgerConfig:
    return dataclasses.replace(TEST_CONFIG, **kw)  # type: ignore[arg-type]


async def test_add_read_across_rollovers(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=7))
    payloads = [f"m{i}".encode() for i in range(50)]
    positions = await asyncio.gather(*(ml.add_entry(p) for p in payloads))
    assert positions == sorted(positions)
    assert len(set(positions)) == 50
    assert len({p.ledger_id for p in positions}) >= 7
    assert all(p.entry_id < 7 for p in positions)
    assert ml.number_of_entries == 50
    assert ml.last_confirmed_entry == positions[-1]
    ml.cache.clear()
    got = await ml.read_entries(positions[0], max_entries=100)
    assert [e.data for e in got] == payloads
    assert [e.position for e in got] == positions
    # next_position walks the same positions
    p = positions[0]
    walked = [p]
    for _ in range(49):
        p = ml.next_position(p)
        walked.append(p)
    assert walked == positions
    assert (await ml.read_entry(positions[20])).data == b"m20"
    infos = ml.ledgers()
    assert sum(i.entries for i in infos) == 50
    await ml.close()
    # reopen: same content, new ledger
    ml2 = await env.factory.open(NAME, cfg(max_entries_per_ledger=7))
    assert ml2 is not ml
    got = await ml2.read_entries(api.EARLIEST, max_entries=100)
    assert [e.data for e in got] == payloads
    pos = await ml2.add_entry(b"after")
    assert pos > positions[-1]


async def test_read_limits(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=5))
    for i in range(12):
        await ml.add_entry(bytes(100) + bytes([i]))
    first = ml.first_position
    got = await ml.read_entries(first, max_entries=4)
    assert len(got) == 4
    got = await ml.read_entries(first, max_entries=100, max_bytes=250)
    assert len(got) == 3  # stops once the budget is reached, at least one entry
    got = await ml.read_entries(first, max_entries=100, max_bytes=1)
    assert len(got) == 1
    assert await ml.read_entries(ml.next_position(ml.last_confirmed_entry), max_entries=5) == []


async def test_tail_reads_hit_the_cache(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub")
    for i in range(200):
        await ml.add_entry(b"x%d" % i)
    before = bookie_reads()
    got = await cursor.read_entries(500)
    assert len(got) == 200
    assert bookie_reads() == before
    assert ml.read_stats.bookie_entries == 0
    ml.cache.clear()
    cursor.rewind()
    got = await cursor.read_entries(500)
    assert len(got) == 200
    assert bookie_reads() - before == 200
    assert ml.read_stats.bookie_entries == 200


async def test_an_add_copies_the_callers_buffer_once_into_the_stored_entry(env: Env) -> None:
    """A SEND's payload reaches the managed ledger as a view into the frame it arrived in. The
    ledger copies it once, into the stored entry (behind the 8-byte envelope), and the cache
    and the reads hand out views into stored entries: nothing keeps the caller's buffer, and
    no other copy is made of a payload of ``entry.VIEW_MIN`` bytes or more (docs/architecture.md,
    "Copies on the publish and dispatch paths"). Smaller payloads are copied out instead."""
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub")
    size = entry.VIEW_MIN
    body = bytes(range(256)) * (size // 256)
    received = bytearray(b"frame-head|" + body + b"|small|next-frame")
    await ml.add_entry(memoryview(received)[11 : 11 + size].toreadonly())
    await ml.add_entry(memoryview(received)[12 + size : 17 + size].toreadonly())
    received[:] = b"X" * len(received)  # what held the frame is reused
    big, small = await cursor.read_entries(10)
    assert ml.read_stats.bookie_entries == 0
    assert big.data == body and small.data == b"small"
    assert isinstance(big.data, memoryview) and isinstance(big.data.obj, bytes)
    assert len(big.data.obj) == 8 + size, "a view into the stored entry, not a second copy"
    assert isinstance(small.data, bytes)
    ml.cache.clear()
    cursor.rewind()
    big, small = await cursor.read_entries(10)
    assert ml.read_stats.bookie_entries == 2
    assert big.data == body and small.data == b"small"
    assert isinstance(big.data, memoryview) and len(big.data.obj) == 8 + size


async def test_cache_is_bounded_by_the_budget_the_managed_ledgers_share(env: Env) -> None:
    factory = env.new_factory(cache_bytes=10_000)
    ml = await factory.open(NAME)
    await ml.open_cursor("sub")  # without a cursor nothing is cached (below)
    for _ in range(50):
        await ml.add_entry(bytes(1000))
    assert ml.cache.size <= 10_000
    assert len(ml.cache) == 10
    got = await ml.read_entries(ml.first_position, max_entries=100)
    assert len(got) == 50
    assert ml.read_stats.bookie_entries == 40
    # a second managed ledger takes its room from the first, the larger one
    other = await factory.open(NAME + "-2")
    await other.open_cursor("sub")
    for _ in range(5):
        await other.add_entry(bytes(1000))
    assert factory.cache.size == ml.cache.size + other.cache.size <= 10_000
    assert len(other.cache) == 5 and len(ml.cache) < 10
    await other.close()
    assert factory.cache.size == ml.cache.size and other.cache not in factory.cache.caches


async def test_adds_are_cached_only_while_a_cursor_is_open(env: Env) -> None:
    """As Pulsar caches adds only with active cursors: with none, nothing would read them
    from the cache; reads still find every entry (from the bookie)."""
    ml = await env.factory.open(NAME)
    first = await ml.add_entry(b"before")
    assert len(ml.cache) == 0
    cursor = await ml.open_cursor("sub", initial_position=api.InitialPosition.EARLIEST)
    await ml.add_entry(b"while open")
    assert len(ml.cache) == 1
    got = await cursor.read_entries(10)
    assert [e.data for e in got] == [b"before", b"while open"]
    await ml.delete_cursor("sub")
    await ml.add_entry(b"after")
    assert len(ml.cache) <= 1  # the entry added while the cursor was open, if not evicted
    got = await ml.read_entries(first, max_entries=10)
    assert [e.data for e in got] == [b"before", b"while open", b"after"]


def waiting(ml: ManagedLedgerImpl) -> int:
    return int(ml.internal_stats()["waitingCursorsCount"])


async def test_wait_for_entries_wakes(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub")
    lac = ml.last_confirmed_entry
    waiter = asyncio.create_task(ml.wait_for_entries(lac))
    reader = asyncio.create_task(cursor.read_entries_or_wait(10))
    await eventually(lambda: waiting(ml) == 2, what="both waiting")
    assert not waiter.done() and not reader.done()
    pos = await ml.add_entry(b"hello")
    await asyncio.wait_for(waiter, 2)
    got = await asyncio.wait_for(reader, 2)
    assert [(e.position, e.data) for e in got] == [(pos, b"hello")]
    # cancellable
    reader = asyncio.create_task(cursor.read_entries_or_wait(10))
    await eventually(lambda: waiting(ml) == 1, what="the reader waiting")
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    # terminate wakes with "no more entries"
    reader = asyncio.create_task(cursor.read_entries_or_wait(10))
    await eventually(lambda: waiting(ml) == 1, what="the reader waiting")
    last = await ml.terminate()
    assert last == pos
    with pytest.raises(api.ManagedLedgerTerminatedError):
        await asyncio.wait_for(reader, 2)
    with pytest.raises(api.ManagedLedgerTerminatedError):
        await ml.add_entry(b"no")


async def test_terminated_survives_reopen(env: Env) -> None:
    ml = await env.factory.open(NAME)
    for i in range(3):
        await ml.add_entry(b"%d" % i)
    last = await ml.terminate()
    await ml.close()
    ml = await env.factory.open(NAME)
    assert ml.terminated
    assert ml.last_confirmed_entry == last
    with pytest.raises(api.ManagedLedgerTerminatedError):
        await ml.add_entry(b"x")
    got = await ml.read_entries(api.EARLIEST, max_entries=10)
    assert [e.data for e in got] == [b"0", b"1", b"2"]


async def test_positions_in_deleted_ledgers_move_forward(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=3))
    positions = [await ml.add_entry(b"%d" % i) for i in range(9)]
    assert await ml.trim() == [positions[0].ledger_id, positions[3].ledger_id]  # no cursors
    got = await ml.read_entries(positions[0], max_entries=10)
    assert [e.position for e in got] == positions[6:]
    assert ml.first_position == positions[6]
    assert not await env.ledger_exists(positions[0].ledger_id)
    with pytest.raises(api.InvalidPositionError):
        await ml.read_entry(positions[1])


async def test_factory_list_exists_delete(env: Env) -> None:
    f = env.factory
    a = await f.open("t/ns/persistent/a")
    await f.open("t/ns/persistent/b%2Fc")
    await a.add_entry(b"x")
    cur = await a.open_cursor("s")
    await cur.mark_delete(a.last_confirmed_entry)
    assert await f.list("t/ns/persistent") == ["t/ns/persistent/a", "t/ns/persistent/b%2Fc"]
    assert await f.exists("t/ns/persistent/a")
    ids = [i.ledger_id for i in a.ledgers()]
    await a.close()
    await f.delete("t/ns/persistent/a")
    assert not await f.exists("t/ns/persistent/a")
    for lid in ids:
        assert not await env.ledger_exists(lid)
    with pytest.raises(ValueError):
        await f.open("bad-name")


@pytest.mark.parametrize("env", [3], indirect=True)
async def test_replicated_ensemble(env: Env) -> None:
    ml = await env.factory.open(
        NAME, cfg(ensemble_size=3, write_quorum=2, ack_quorum=2, max_entries_per_ledger=10)
    )
    positions = await asyncio.gather(*(ml.add_entry(b"%d" % i) for i in range(25)))
    assert positions == sorted(positions)
    ml.cache.clear()
    got = await ml.read_entries(ml.first_position, max_entries=100)
    assert [e.data for e in got] == [b"%d" % i for i in range(25)]


async def test_rollover_by_age_and_min_age(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_ledger_age_s=0.3))
    a = await ml.add_entry(b"a")
    await asyncio.sleep(0.35)  # the ledger ages past 0.3 s: elapsed time is the input
    b = await ml.add_entry(b"b")  # the add past the age rolls over after it
    c = await ml.add_entry(b"c")
    assert a.ledger_id == b.ledger_id != c.ledger_id
    # an idle ledger past its age is rolled over by the timer
    await eventually(lambda: ml.current_ledger_id != c.ledger_id, what="the timer's roll-over")
    assert [i.entries for i in ml.ledgers()][-1] == 0
    await ml.close()
    ml = await env.factory.open("public/default/persistent/young", cfg(
        max_entries_per_ledger=2, min_ledger_age_s=30
    ))  # fmt: skip
    positions = [await ml.add_entry(b"%d" % i) for i in range(6)]
    assert len({p.ledger_id for p in positions}) == 1


async def test_many_rollovers_under_pipelined_load(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=50))
    await ml.open_cursor("hold", initial_position=api.InitialPosition.EARLIEST)  # no trimming
    futures = [ml.append(b"%d" % i) for i in range(2000)]
    positions = await asyncio.gather(*futures)
    assert positions == sorted(positions) and len(set(positions)) == 2000
    assert len(ml.ledgers()) >= 40
    got = await ml.read_entries(positions[0], max_entries=5000)
    assert [e.data for e in got] == [b"%d" % i for i in range(2000)]


async def test_add_calls_back_in_order_never_from_inside_the_call(env: Env) -> None:
    """``ManagedLedger.add`` (the producers' path): the positions arrive in call order,
    across roll-overs, each from the event loop after the call returned; after close the
    error arrives the same way."""
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=50))
    seen: list[tuple[api.Position | None, BaseException | None, bool]] = []
    inside = False

    def done(pos: api.Position | None, error: BaseException | None) -> None:
        seen.append((pos, error, inside))

    for i in range(300):
        inside = True
        ml.add(f"m{i}".encode(), done)
        inside = False
    assert seen == []
    await eventually(lambda: len(seen) == 300, timeout=10.0, what="300 adds confirmed")
    positions = [pos for pos, _, _ in seen if pos is not None]
    assert len(positions) == 300
    assert all(err is None for _, err, _ in seen)
    assert not any(was_inside for _, _, was_inside in seen)
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions}) >= 6
    got = await ml.read_entries(positions[0], max_entries=300)
    assert [e.data for e in got] == [f"m{i}".encode() for i in range(300)]

    await ml.close()
    seen.clear()
    inside = True
    ml.add(b"late", done)
    inside = False
    assert seen == []
    await eventually(lambda: len(seen) == 1, timeout=5.0, what="the closed ledger's answer")
    ((pos, err, was_inside),) = seen
    assert pos is None
    assert isinstance(err, api.ManagedLedgerClosedError)
    assert not was_inside
