"""The managed-ledger contract, checked against both implementations alike: the one over
bookies (:mod:`magnetar.managed_ledger.ledger`, an embedded store and an in-process bookie)
and the in-memory one (:mod:`magnetar.managed_ledger.memory`) that the broker core's
in-process tests use. A behaviour the broker relies on belongs here, so the in-memory ledger
cannot drift from the real one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.managed_ledger import api
from magnetar.managed_ledger.api import EARLIEST, LATEST, InitialPosition, Position
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from tests.integration.managed_ledger.conftest import TEST_CONFIG, open_env
from tests.support.wait import eventually

NAME = "public/default/persistent/contract"
SMALL = dataclasses.replace(TEST_CONFIG, max_entries_per_ledger=3)
"""Three entries a ledger: every test crosses ledger boundaries."""


@pytest.fixture(params=["bookies", "memory"])
async def factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[api.ManagedLedgerFactory]:
    if request.param == "bookies":
        async with open_env(tmp_path) as env:
            yield env.factory
        return
    memory = MemoryManagedLedgerFactory(SMALL)
    yield memory
    await memory.close()


async def fill(ml: api.ManagedLedger, n: int, prefix: str = "e") -> list[Position]:
    return [await ml.add_entry(f"{prefix}{i}".encode()) for i in range(n)]


def data(entries: list[api.Entry]) -> list[bytes]:
    return [e.data for e in entries]


async def test_adds_are_ordered_and_read_back_across_ledgers(
    factory: api.ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, SMALL)
    futures = [ml.append(b"p%d" % i) for i in range(4)]  # pipelined
    positions = [await f for f in futures] + await fill(ml, 6)
    assert positions == sorted(positions) and len(set(positions)) == 10
    assert len({p.ledger_id for p in positions}) >= 3  # rolled over
    assert ml.last_confirmed_entry == positions[-1]
    assert ml.number_of_entries == 10 and ml.entries_added == 10
    assert ml.total_size == sum(len(b"p0") for _ in range(10))
    got = await ml.read_entries(ml.first_position, max_entries=100)
    assert [e.position for e in got] == positions
    assert data(got)[:5] == [b"p0", b"p1", b"p2", b"p3", b"e0"]
    assert [ml.next_position(p) for p in positions[:-1]] == positions[1:]
    assert (await ml.read_entry(positions[5])).data == b"e1"
    assert data(await ml.read_entries(positions[2], max_entries=2)) == [b"p2", b"p3"]
    assert len(await ml.read_entries(positions[0], max_entries=100, max_bytes=5)) < 10
    with pytest.raises(api.InvalidPositionError):
        await ml.read_entry(Position(positions[-1].ledger_id, positions[-1].entry_id + 5))
    stored = [i for i in ml.ledgers() if i.entries > 0]
    assert sum(i.entries for i in stored) == 10
    await ml.close()


async def test_durable_cursor_acks_and_state_after_reopen(
    factory: api.ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, SMALL)
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    assert c.durable and c.name == "sub" and ml.cursors["sub"] is c
    pos = await fill(ml, 7)
    assert c.backlog() == 7 and c.has_more_entries()
    assert [e.position for e in await c.read_entries(10)] == pos
    assert not c.has_more_entries()
    await c.delete([pos[0], pos[1], pos[4]])
    assert c.mark_delete_position == pos[1]  # contiguous from the start
    assert c.is_deleted(pos[4]) and not c.is_deleted(pos[3])
    assert c.backlog() == 4
    await c.mark_delete(pos[2], properties={"k": 7})
    assert c.mark_delete_position == pos[2] and c.backlog() == 3
    with pytest.raises(api.InvalidPositionError):
        await c.mark_delete(Position(pos[-1].ledger_id + 100, 0))
    await ml.close()

    ml = await factory.open(NAME, SMALL)
    c = ml.cursors["sub"]
    assert c.mark_delete_position == pos[2]
    assert c.is_deleted(pos[4]) and c.backlog() == 3
    assert dict(c.properties) == {"k": 7}
    again = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    assert again is c
    assert [e.position for e in await c.read_entries(10)] == [pos[3], pos[5], pos[6]]
    await ml.close()


async def test_cursor_positions_latest_earliest_and_moves(
    factory: api.ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, SMALL)
    await ml.open_cursor("hold", initial_position=InitialPosition.EARLIEST)  # nothing trimmed
    pos = await fill(ml, 5)
    latest = await ml.open_cursor("late")  # LATEST: only what comes next
    assert latest.backlog() == 0 and await latest.read_entries(10) == []
    newer = await fill(ml, 2, "n")
    assert data(await latest.read_entries(10)) == [b"n0", b"n1"]

    c = await ml.open_cursor("c", initial_position=InitialPosition.EARLIEST)
    assert c.backlog() == 7
    await c.skip(4)
    assert c.mark_delete_position == pos[3] and c.backlog() == 3
    await c.reset(pos[1])  # back: acks after it are dropped
    assert c.backlog() == 6 and c.read_position == pos[1]
    c.seek(newer[0])
    assert data(await c.read_entries(1)) == [b"n0"]
    c.rewind()
    assert data(await c.read_entries(1)) == [b"e1"]
    await c.clear_backlog()
    assert c.backlog() == 0 and c.mark_delete_position == newer[-1]
    await c.reset(EARLIEST)
    assert c.backlog() == 7
    await c.reset(LATEST)
    assert c.backlog() == 0
    await ml.close()


async def test_non_durable_cursors_start_where_asked(factory: api.ManagedLedgerFactory) -> None:
    ml = await factory.open(NAME, SMALL)
    pos = await fill(ml, 5)
    earliest = await ml.new_non_durable_cursor("r1", EARLIEST)
    assert not earliest.durable and len(await earliest.read_entries(10)) == 5
    inclusive = await ml.new_non_durable_cursor("r2", pos[2])
    assert data(await inclusive.read_entries(10)) == [b"e2", b"e3", b"e4"]
    exclusive = await ml.new_non_durable_cursor("r3", pos[2], inclusive=False)
    assert data(await exclusive.read_entries(10)) == [b"e3", b"e4"]
    latest = await ml.new_non_durable_cursor("r4", LATEST)
    assert await latest.read_entries(10) == []
    with pytest.raises(api.CursorAlreadyExistsError):
        await ml.new_non_durable_cursor("r1", EARLIEST)
    await earliest.close()
    assert "r1" not in ml.cursors  # a reader's cursor goes with it
    await ml.close()


async def test_batch_index_acks(factory: api.ManagedLedgerFactory) -> None:
    ml = await factory.open(NAME, SMALL)
    c = await ml.open_cursor("b", initial_position=InitialPosition.EARLIEST)
    (p,) = await fill(ml, 1)
    await c.delete_batch_indexes(p, acked=[0, 2], batch_size=4)
    assert c.batch_ack_set(p) is not None and not c.is_deleted(p)
    await c.delete_batch_indexes(p, acked=[1, 3], batch_size=4)
    assert c.is_deleted(p) and c.backlog() == 0
    await ml.close()


async def test_waiting_readers_wake_on_adds_and_on_terminate(
    factory: api.ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, SMALL)
    c = await ml.open_cursor("w")
    reader = asyncio.create_task(c.read_entries_or_wait(10))
    waiter = asyncio.create_task(ml.wait_for_entries(ml.last_confirmed_entry))
    await asyncio.sleep(0)  # one loop turn, no time: the tasks start and must still wait
    assert not reader.done() and not waiter.done()
    (p,) = await fill(ml, 1)
    await asyncio.wait_for(waiter, 10)
    assert [e.position for e in await asyncio.wait_for(reader, 10)] == [p]

    reader = asyncio.create_task(c.read_entries_or_wait(10))
    await asyncio.sleep(0)  # one loop turn, no time: the reader starts before the terminate
    assert await ml.terminate() == p
    assert ml.terminated
    with pytest.raises(api.ManagedLedgerTerminatedError):
        await asyncio.wait_for(reader, 10)
    with pytest.raises(api.ManagedLedgerTerminatedError):
        await ml.add_entry(b"late")
    assert await ml.terminate() == p  # again: the same end
    await ml.close()
    ml = await factory.open(NAME, SMALL)
    assert ml.terminated and ml.last_confirmed_entry == p
    await ml.close()


async def test_acknowledged_ledgers_are_trimmed(factory: api.ManagedLedgerFactory) -> None:
    ml = await factory.open(NAME, SMALL)
    c = await ml.open_cursor("t", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 8)  # ledgers [0..2] [3..5] [6, 7]
    first_ledger = pos[0].ledger_id
    await c.mark_delete(pos[4])  # the first ledger is fully acknowledged
    await eventually(
        lambda: ml.ledgers()[0].ledger_id != first_ledger, what="the first ledger trimmed"
    )
    assert ml.first_position == pos[3]
    got = await ml.read_entries(pos[0], max_entries=10)  # a trimmed position moves on
    assert [e.position for e in got] == pos[3:]
    await ml.close()


async def test_cursors_are_deleted_and_the_factory_lists_ledgers(
    factory: api.ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, SMALL)
    await ml.open_cursor("gone")
    await ml.delete_cursor("gone")
    assert "gone" not in ml.cursors
    with pytest.raises(api.CursorNotFoundError):
        await ml.delete_cursor("gone")
    await fill(ml, 2)
    await ml.close()
    other = await factory.open("public/default/persistent/other", SMALL)
    await other.close()
    assert await factory.exists(NAME)
    assert await factory.list("public/default/persistent") == [
        "public/default/persistent/contract",
        "public/default/persistent/other",
    ]
    await factory.delete(NAME)
    assert not await factory.exists(NAME)
    reopened = await factory.open(NAME, SMALL)
    assert reopened.number_of_entries == 0 and not reopened.cursors
    await reopened.close()


async def test_a_closed_managed_ledger_refuses_adds(factory: api.ManagedLedgerFactory) -> None:
    ml = await factory.open(NAME, SMALL)
    await fill(ml, 1)
    await ml.close()
    with pytest.raises(api.ManagedLedgerClosedError):
        await ml.add_entry(b"after close")
