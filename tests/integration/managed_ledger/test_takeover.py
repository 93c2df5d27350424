"""Ownership moves: a second broker opens the managed ledger while the first is writing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from magnetar.managed_ledger import api
from magnetar.managed_ledger.api import EARLIEST, InitialPosition, Position
from magnetar.managed_ledger.ledger import State
from tests.integration.managed_ledger.conftest import Env
from tests.support.wait import eventually, holds_for_async

NAME = "public/default/persistent/owned"


@pytest.mark.parametrize("env", [2], indirect=True)
async def test_takeover_fences_the_old_owner(env: Env) -> None:
    ml1 = await env.factory.open(
        NAME,
        api.ManagedLedgerConfig(
            ensemble_size=2, write_quorum=2, ack_quorum=2, max_entries_per_ledger=40
        ),
    )
    cur1 = await ml1.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
    confirmed: dict[Position, bytes] = {}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def produce(worker: int) -> None:
        i = 0
        while not stop.is_set():
            data = b"w%d-%d" % (worker, i)
            i += 1
            try:
                confirmed[await ml1.add_entry(data)] = data
            except api.ManagedLedgerError as err:
                failures.append(err)
                return

    producers = [asyncio.create_task(produce(w)) for w in range(4)]
    await eventually(lambda: len(confirmed) >= 150, timeout=30, what="150 entries confirmed")
    positions = sorted(confirmed)
    await cur1.mark_delete(positions[10])
    await cur1.flush()  # type: ignore[attr-defined]

    ml2 = await env.new_factory().open(NAME)
    await asyncio.wait_for(asyncio.gather(*producers), 10)
    stop.set()
    assert failures and all(isinstance(f, api.ManagedLedgerFencedError) for f in failures)
    assert ml1.state is State.FENCED
    with pytest.raises(api.ManagedLedgerFencedError):
        await ml1.add_entry(b"late")

    got = {e.position: e.data for e in await ml2.read_entries(EARLIEST, max_entries=100_000)}
    missing = [p for p in confirmed if got.get(p) != confirmed[p]]
    assert not missing, f"confirmed entries lost in the take-over: {missing[:5]}"
    assert ml2.cursors["sub"].mark_delete_position >= positions[10]
    new = await ml2.add_entry(b"new owner")
    assert new > max(confirmed)
    # the old owner's cursor stopped persisting: its later acks do not reach the new owner
    assert cur1.stats().state == "Fenced"
    with contextlib.suppress(api.ManagedLedgerError):
        await cur1.mark_delete(positions[20])

    async def not_reached() -> bool:
        record = await env.store.get(ml2.path.cursor_key("sub"))
        assert record is not None
        return ml2.cursors["sub"].mark_delete_position < positions[20]

    await holds_for_async(not_reached, 0.3, what="the fenced cursor's ack stays out")
    await ml1.close()
    await ml2.close()


async def test_concurrent_open_in_one_factory_shares_the_instance(env: Env) -> None:
    a, b = await asyncio.gather(env.factory.open(NAME), env.factory.open(NAME))
    assert a is b


async def test_open_after_crash_without_close(env: Env) -> None:
    """The first owner vanishes without closing: the next one recovers its open ledger."""
    f1 = env.new_factory()
    ml1 = await f1.open(NAME)
    data = [b"%d" % i for i in range(30)]
    positions = await asyncio.gather(*(ml1.add_entry(d) for d in data))
    ml2 = await env.factory.open(NAME)
    got = await ml2.read_entries(EARLIEST, max_entries=100)
    assert [e.data for e in got] == data
    assert [e.position for e in got] == list(positions)
    assert ml2.number_of_entries == 30
