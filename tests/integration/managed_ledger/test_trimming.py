"""Trimming deletes ledgers every durable cursor has acknowledged; retention keeps them."""

from __future__ import annotations

import dataclasses

from magnetar.managed_ledger import api
from magnetar.managed_ledger.api import EARLIEST, InitialPosition, Position
from magnetar.managed_ledger.ledger import ManagedLedgerImpl
from tests.integration.managed_ledger.conftest import TEST_CONFIG, Env
from tests.support.wait import eventually

NAME = "public/default/persistent/trim"


def cfg(**kw: object) -> api.ManagedLedgerConfig:
    return dataclasses.replace(TEST_CONFIG, max_entries_per_ledger=3, **kw)  # type: ignore[arg-type]


async def fill(ml: ManagedLedgerImpl, n: int) -> list[Position]:
    return [await ml.add_entry(bytes(100)) for _ in range(n)]


async def gone(env: Env, ledger_id: int) -> bool:
    """The ledger's metadata key is gone (deleted after the list no longer names it)."""
    return not await env.ledger_exists(ledger_id)


async def test_fully_acknowledged_ledgers_are_deleted(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg())
    slow = await ml.open_cursor("slow", initial_position=InitialPosition.EARLIEST)
    fast = await ml.open_cursor("fast", initial_position=InitialPosition.EARLIEST)
    reader = await ml.new_non_durable_cursor("reader", EARLIEST)
    pos = await fill(ml, 10)  # ledgers: [0..2] [3..5] [6..8] [9]
    l1, l2, l3 = pos[0].ledger_id, pos[3].ledger_id, pos[6].ledger_id
    await fast.clear_backlog()
    await slow.mark_delete(pos[4])  # ledger 1 fully acknowledged, ledger 2 not
    await eventually(lambda: ml.ledgers()[0].ledger_id == l2)
    await eventually(lambda: gone(env, l1))
    assert await env.ledger_exists(l2)
    await slow.delete([pos[5]])  # individual ack completing ledger 2
    await eventually(lambda: ml.ledgers()[0].ledger_id == l3)
    await eventually(lambda: gone(env, l2))
    assert ml.first_position == pos[6]
    # a non-durable reader does not hold data: it moves on to what exists
    got = await reader.read_entries(100)
    assert [e.position for e in got] == pos[6:]
    # the ledger list in the metadata store says the same
    record = await env.store.get(ml.path.info_key)
    assert record is not None and f'"ledgerId":{l1},'.encode() not in record.value
    # the current ledger is never deleted, even when everything is acknowledged
    await slow.clear_backlog()
    await eventually(lambda: len(ml.ledgers()) == 1)
    assert ml.ledgers()[0].ledger_id == ml.current_ledger_id
    assert ml.number_of_entries == 1 and slow.backlog() == 0


async def test_retention_time_unlimited_keeps_everything(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(retention_time_s=-1))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 10)
    await c.clear_backlog()
    assert await ml.trim() == []
    assert len(ml.ledgers()) == 4
    assert [e.position for e in await ml.read_entries(EARLIEST, max_entries=100)] == pos


async def test_retention_time_window(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(retention_time_s=0.6))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 10)
    await c.clear_backlog()
    assert await ml.trim() == []  # just closed: within the window
    # the timer trims them once they are older than the window
    await eventually(lambda: len(ml.ledgers()) == 1, timeout=5)
    await eventually(lambda: gone(env, pos[0].ledger_id))


async def test_retention_size(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(retention_bytes=650))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 10)  # 1000 bytes in 4 ledgers of 300, 300, 300, 100
    await c.clear_backlog()
    deleted = await ml.trim()
    # delete oldest ledgers while more than 650 bytes would stay: 1000 -> 700 -> 400
    assert deleted == [pos[0].ledger_id, pos[3].ledger_id]
    assert ml.total_size == 400


async def test_unacknowledged_data_is_kept_without_retention(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg())
    await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 10)
    assert await ml.trim() == []
    assert [e.position for e in await ml.read_entries(EARLIEST, max_entries=100)] == pos
