"""Cursors over a real managed ledger: reads, acknowledgements, backlog, batch acks,
moving the position, persistence across close and reopen, non-durable cursors."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from magnetar.managed_ledger import api
from magnetar.managed_ledger.acks import indexes_of_words
from magnetar.managed_ledger.api import EARLIEST, LATEST, InitialPosition, Position
from magnetar.managed_ledger.cursor import ManagedCursorImpl
from magnetar.managed_ledger.ledger import ManagedLedgerImpl
from tests.integration.managed_ledger.conftest import TEST_CONFIG, Env
from tests.support.wait import eventually

NAME = "public/default/persistent/cursors"


def cfg(**kw: object) -> api.ManagedLedgerConfig:
    return dataclasses.replace(TEST_CONFIG, **kw)  # type: ignore[arg-type]


async def fill(ml: ManagedLedgerImpl, n: int) -> list[Position]:
    return list(await asyncio.gather(*(ml.add_entry(b"e%d" % i) for i in range(n))))


async def test_read_ack_backlog(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=4))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 10)
    assert c.backlog() == 10
    assert c.has_more_entries()
    got = await c.read_entries(3)
    assert [e.position for e in got] == pos[:3]
    assert c.read_position == pos[3]
    got = await c.read_entries(100)
    assert [e.position for e in got] == pos[3:]
    assert not c.has_more_entries()
    # individual acks (across ledgers) and the mark-delete position following the prefix
    await c.delete([pos[1], pos[2], pos[5], pos[6]])
    assert c.mark_delete_position == Position(pos[0].ledger_id, -1)
    assert c.backlog() == 6
    assert c.stats().individually_deleted == (
        f"[({pos[1].ledger_id}:0..{pos[2]}], ({pos[5].ledger_id}:0..{pos[6]}]]"
    )
    assert c.is_deleted(pos[5]) and not c.is_deleted(pos[4])
    await c.delete([pos[0]])
    assert c.mark_delete_position == pos[2]
    assert c.backlog() == 5
    await c.mark_delete(pos[4])
    assert c.mark_delete_position == pos[6]  # absorbed 5, 6
    assert c.stats().individually_deleted == "[]"
    assert c.backlog() == 3
    assert c.stats().messages_consumed == 7
    # rewind reads only what is not acknowledged
    c.rewind()
    assert c.read_position == pos[7]
    await c.delete([pos[8]])
    got = await c.read_entries(10)
    assert [e.position for e in got] == [pos[7], pos[9]]
    await c.clear_backlog()
    assert c.backlog() == 0
    assert c.mark_delete_position == pos[9]
    with pytest.raises(api.InvalidPositionError):
        await c.mark_delete(Position(pos[9].ledger_id + 100, 0))
    internal = ml.internal_stats()
    assert internal["cursors"]["sub"]["markDeletePosition"] == str(pos[9])
    assert internal["numberOfEntries"] == sum(i["entries"] for i in internal["ledgers"])
    s = c.stats()
    assert s.durable and s.name == "sub" and s.state in ("Open", "NoLedger")


async def test_initial_positions_and_non_durable(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=3))
    pos = await fill(ml, 5)
    latest = await ml.open_cursor("latest")
    earliest = await ml.open_cursor("earliest", initial_position=InitialPosition.EARLIEST)
    assert latest.backlog() == 0 and earliest.backlog() == 5
    assert await latest.read_entries(10) == []
    r_all = await ml.new_non_durable_cursor("r-all", EARLIEST)
    r_latest = await ml.new_non_durable_cursor("r-latest", LATEST)
    r_incl = await ml.new_non_durable_cursor("r-incl", pos[2])
    r_excl = await ml.new_non_durable_cursor("r-excl", pos[2], inclusive=False)
    assert [e.position for e in await r_all.read_entries(10)] == pos
    assert await r_latest.read_entries(10) == []
    assert [e.position for e in await r_incl.read_entries(10)] == pos[2:]
    assert [e.position for e in await r_excl.read_entries(10)] == pos[3:]
    with pytest.raises(api.CursorAlreadyExistsError):
        await ml.new_non_durable_cursor("r-all", EARLIEST)
    new = await ml.add_entry(b"new")
    assert [e.position for e in await latest.read_entries(10)] == [new]
    assert [e.position for e in await r_latest.read_entries(10)] == [new]
    assert not r_all.durable and r_all.stats().cursor_ledger_id == -1
    await ml.delete_cursor("r-all")
    assert "r-all" not in ml.cursors
    await r_incl.close()
    assert "r-incl" not in ml.cursors  # a closed reader's cursor is gone
    await latest.close()
    assert "latest" in ml.cursors  # a closed durable cursor still holds its position
    await ml.close()
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=3))
    assert sorted(ml.cursors) == ["earliest", "latest"]  # non-durable ones are gone
    assert not ml.cursors["latest"].stats().state == "Closed"


async def test_batch_index_acks(env: Env) -> None:
    ml = await env.factory.open(NAME)
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 3)
    await c.delete_batch_indexes(pos[0], acked=[0, 2], batch_size=4)
    words = c.batch_ack_set(pos[0])
    assert words is not None and indexes_of_words(words) == [1, 3]
    assert not c.is_deleted(pos[0]) and c.backlog() == 3
    await c.delete_batch_indexes(pos[1], acked=range(70), batch_size=100)
    words = c.batch_ack_set(pos[1])
    assert words is not None and indexes_of_words(words) == list(range(70, 100))
    await c.delete_batch_indexes(pos[0], acked=[1, 3], batch_size=4)
    assert c.is_deleted(pos[0]) and c.batch_ack_set(pos[0]) is None
    assert c.mark_delete_position == pos[0]
    assert c.backlog() == 2
    # partial batch state survives a reopen
    await ml.close()
    ml = await env.factory.open(NAME)
    c2 = ml.cursors["sub"]
    words = c2.batch_ack_set(pos[1])
    assert words is not None and indexes_of_words(words) == list(range(70, 100))
    assert c2.mark_delete_position == pos[0]


async def test_seek_reset_skip(env: Env) -> None:
    # retention keeps the acknowledged ledgers, so a reset can go back into them
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=4, retention_time_s=-1))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 12)
    c.seek(pos[6])
    assert [e.position for e in await c.read_entries(2)] == pos[6:8]
    assert c.backlog() == 12  # seek does not acknowledge
    await c.skip(3)
    assert c.mark_delete_position == pos[2] and c.backlog() == 9
    await c.delete([pos[4], pos[5]])
    await c.skip(2)  # 3 and 6 (4 and 5 are acknowledged already)
    assert c.mark_delete_position == pos[6] and c.backlog() == 5
    await c.reset(pos[9])
    assert c.mark_delete_position == Position(pos[9].ledger_id, pos[9].entry_id - 1)
    assert c.read_position == pos[9]
    assert c.backlog() == 3
    await c.reset(pos[1])  # backwards: everything from pos[1] is unacknowledged again
    assert c.backlog() == 11
    assert [e.position for e in await c.read_entries(100)] == pos[1:]
    await c.reset(EARLIEST)
    assert c.backlog() == 12
    await c.reset(LATEST)
    assert c.backlog() == 0
    await c.skip(5)
    assert c.backlog() == 0
    # reset is persisted before it returns
    await c.reset(pos[5])
    record = await env.store.get(ml.path.cursor_key("sub"))
    assert record is not None
    await ml.close()
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=4))
    assert ml.cursors["sub"].read_position == pos[5]
    assert ml.cursors["sub"].backlog() == 7


async def test_persistence_across_close_and_reopen(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=5))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST, properties={"a": 1})
    pos = await fill(ml, 20)
    await c.mark_delete(pos[3], properties={"k": 7})
    await c.delete([pos[5], pos[9], pos[10], pos[17]])
    stats = c.stats()
    await ml.close()
    ml = await env.factory.open(NAME, cfg(max_entries_per_ledger=5))
    c2 = ml.cursors["sub"]
    assert c2.mark_delete_position == pos[3]
    assert c2.stats().individually_deleted == stats.individually_deleted
    assert c2.stats().properties == {"k": 7}
    assert c2.backlog() == 12
    got = await c2.read_entries(100)
    assert pos[5] not in [e.position for e in got] and got[0].position == pos[4]


async def test_persist_is_coalesced_and_rate_limited(env: Env) -> None:
    ml = await env.factory.open(NAME, cfg(cursor_persist_interval_s=0.3))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    assert isinstance(c, ManagedCursorImpl)
    pos = await fill(ml, 300)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for p in pos:
        await c.delete([p])
        await asyncio.sleep(0.003)  # paces the deletes: the rate limit is what is measured
    elapsed = loop.time() - start
    await c.flush()  # the last change, persisted now rather than by the next timer
    assert c.persists <= elapsed / 0.3 + 2
    assert c.persists >= 1
    cursor_ledger = c.stats().cursor_ledger_id
    assert cursor_ledger > 0
    # one entry per persist (a reader of the open ledger sees the LAC, one behind)
    handle = await env.ledgers.open(cursor_ledger)
    assert handle.last_add_confirmed in (c.persists - 1, c.persists - 2)


async def not_exists(env: Env, ledger_id: int) -> bool:
    return not await env.ledger_exists(ledger_id)


async def test_cursor_ledger_rolls(env: Env) -> None:
    f = env.new_factory(cursor_ledger_max_entries=3)
    ml = await f.open(NAME, cfg(cursor_persist_interval_s=0.01))
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    assert isinstance(c, ManagedCursorImpl)
    pos = await fill(ml, 10)
    seen = set()
    for p in pos:
        await c.mark_delete(p)
        await c.flush()
        seen.add(c.stats().cursor_ledger_id)
    assert len(seen) >= 3
    for lid in seen - {c.stats().cursor_ledger_id}:  # old cursor ledgers are deleted
        await eventually(lambda lid=lid: not_exists(env, lid), what=f"ledger {lid} deleted")
    await ml.close()
    ml = await f.open(NAME)
    assert ml.cursors["sub"].mark_delete_position == pos[-1]


async def test_delete_cursor(env: Env) -> None:
    ml = await env.factory.open(NAME)
    c = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    pos = await fill(ml, 3)
    await c.mark_delete(pos[0])
    await c.close()
    lid = c.stats().cursor_ledger_id
    assert lid > 0 and await env.ledger_exists(lid)
    await ml.delete_cursor("sub")
    assert not await env.ledger_exists(lid)
    assert await env.store.get(ml.path.cursor_key("sub")) is None
    with pytest.raises(api.CursorNotFoundError):
        await ml.delete_cursor("sub")
