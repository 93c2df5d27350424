"""Aux ledgers (a compacted topic's ledger) through a managed ledger over a real bookie:
written, closed, read back by id, deleted; a cursor owning one by its properties deletes it
with itself, also when the managed ledger is deleted by another owner after a crash that
left the cursor's pointer naming an older one."""

from __future__ import annotations

import pytest

from magnetar.managed_ledger.api import (
    OWNED_LEDGER_PROPERTIES,
    InitialPosition,
    StorageUnavailableError,
)
from magnetar.managed_ledger.ledger import ManagedLedgerImpl
from tests.integration.managed_ledger.conftest import Env

PROPERTY = OWNED_LEDGER_PROPERTIES[0]


async def _aux(ml: ManagedLedgerImpl, entries: list[bytes]) -> int:
    ledger = await ml.create_aux_ledger("compacted")
    for data in entries:
        await ledger.append(data)
    await ledger.close()
    return ledger.ledger_id


async def test_write_read_delete(env: Env) -> None:
    ml = await env.factory.open("t/ns/persistent/aux")
    lid = await _aux(ml, [b"a", b"bb", b"ccc"])
    reader = await ml.open_aux_ledger(lid)
    assert reader.last_add_confirmed == 2 and reader.length == 6
    assert await reader.read(1, 2) == [(1, b"bb"), (2, b"ccc")]
    await ml.delete_aux_ledger(lid)
    assert not await env.ledger_exists(lid)
    with pytest.raises(StorageUnavailableError):
        await ml.open_aux_ledger(lid)


async def test_a_cursor_deletes_the_ledger_it_owns(env: Env) -> None:
    ml = await env.factory.open("t/ns/persistent/owned")
    await ml.add_entry(b"x")
    cursor = await ml.open_cursor("__compaction", initial_position=InitialPosition.EARLIEST)
    lid = await _aux(ml, [b"v"])
    await cursor.mark_delete(ml.last_confirmed_entry, properties={PROPERTY: lid})
    await cursor.flush()
    await ml.delete_cursor("__compaction")
    assert not await env.ledger_exists(lid)


async def test_deleted_by_another_owner_after_a_crash(env: Env) -> None:
    ml = await env.factory.open("t/ns/persistent/crashed")
    await ml.add_entry(b"x")
    cursor = await ml.open_cursor("__compaction", initial_position=InitialPosition.EARLIEST)
    first = await _aux(ml, [b"v1"])
    await cursor.mark_delete(ml.last_confirmed_entry, properties={PROPERTY: first})
    await cursor.flush()  # the pointer names `first` (the cursor's first state entry)
    await ml.add_entry(b"y")
    second = await _aux(ml, [b"v2"])
    await cursor.mark_delete(ml.last_confirmed_entry, properties={PROPERTY: second})
    await cursor.flush()  # a later entry of the cursor ledger names `second`
    await ml.delete_aux_ledger(first)
    # the owner is gone without closing anything; another broker deletes the topic
    await env.new_factory().delete("t/ns/persistent/crashed")
    assert not await env.ledger_exists(second)
