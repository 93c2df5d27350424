"""Non-persistent subscriptions over an in-memory connection: hand out or drop, per type."""

from __future__ import annotations

import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions import NonPersistentSubscriptions
from magnetar.wire import pb
from magnetar.wire.topics import TopicName
from tests.unit.broker.subscriptions.fakes import FakeCnx, entry_data, subscribe_cmd

EXCLUSIVE = pb.CommandSubscribe.Exclusive
SHARED = pb.CommandSubscribe.Shared
FAILOVER = pb.CommandSubscribe.Failover
KEY_SHARED = pb.CommandSubscribe.Key_Shared


def subs() -> NonPersistentSubscriptions:
    return NonPersistentSubscriptions(TopicName.parse("non-persistent://public/default/t"))


async def test_no_permits_no_delivery_and_the_drop_is_counted() -> None:
    s = subs()
    cnx = FakeCnx()
    c = await s.subscribe(subscribe_cmd(1), cnx)
    s.broadcast(entry_data(b"a"))  # no FLOW yet
    assert cnx.messages == []
    c.flow(2)
    s.broadcast(entry_data(b"b"))
    s.broadcast(entry_data(b"c"))
    s.broadcast(entry_data(b"d"))  # permits spent
    assert len(cnx.messages) == 2
    stats = s.stats()["s"]
    assert stats["msgOutCounter"] == 2 and stats["msgDropCounter"] == 2
    assert stats["msgBacklog"] == 0 and stats["type"] == "Exclusive"


async def test_a_batch_costs_its_message_count() -> None:
    s = subs()
    cnx = FakeCnx()
    c = await s.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    s.broadcast(entry_data(batch_size=8))
    s.broadcast(entry_data(batch_size=8))  # 2 permits left: still sent, permits go negative
    s.broadcast(entry_data(b"x"))  # none left: dropped
    assert len(cnx.messages) == 2
    assert s.stats()["s"]["msgOutCounter"] == 16


async def test_unwritable_connection_drops() -> None:
    s = subs()
    cnx = FakeCnx(writable=False)
    c = await s.subscribe(subscribe_cmd(1), cnx)
    c.flow(100)
    s.broadcast(entry_data())
    assert cnx.messages == [] and s.stats()["s"]["msgDropCounter"] == 1


async def test_every_subscription_gets_its_copy() -> None:
    s = subs()
    cnx = FakeCnx()
    for i, name in enumerate(("a", "b", "c"), start=1):
        (await s.subscribe(subscribe_cmd(i, sub=name), cnx)).flow(10)
    s.broadcast(entry_data())
    assert sorted(m.consumer_id for m in cnx.messages) == [1, 2, 3]


async def test_shared_round_robin_skips_consumers_without_permits() -> None:
    s = subs()
    cnx = FakeCnx()
    a = await s.subscribe(subscribe_cmd(1, sub_type=SHARED), cnx)
    b = await s.subscribe(subscribe_cmd(2, sub_type=SHARED), cnx)
    a.flow(1)
    b.flow(10)
    for _ in range(5):
        s.broadcast(entry_data())
    assert len(cnx.received(1)) == 1 and len(cnx.received(2)) == 4


async def test_exclusive_and_type_conflicts() -> None:
    s = subs()
    cnx = FakeCnx()
    await s.subscribe(subscribe_cmd(1), cnx)
    with pytest.raises(BrokerError) as err:
        await s.subscribe(subscribe_cmd(2), cnx)
    assert err.value.code == pb.ConsumerBusy
    with pytest.raises(BrokerError) as err:
        await s.subscribe(subscribe_cmd(3, sub_type=SHARED), cnx)
    assert err.value.code == pb.ConsumerBusy


async def test_failover_active_consumer_and_events() -> None:
    s = subs()
    cnx = FakeCnx()
    b = await s.subscribe(subscribe_cmd(2, sub_type=FAILOVER, name="b"), cnx)
    a = await s.subscribe(subscribe_cmd(1, sub_type=FAILOVER, name="a"), cnx)
    a.flow(10)
    b.flow(10)
    s.broadcast(entry_data())
    assert cnx.received(1) == [0] and cnx.received(2) == []  # "a" sorts first
    assert (1, True) in cnx.active_events() and (2, False) in cnx.active_events()
    await a.close()
    s.broadcast(entry_data())
    assert cnx.received(2) == [0]
    assert cnx.active_events()[-1] == (2, True)


async def test_key_shared_routes_by_key() -> None:
    s = subs()
    cnx = FakeCnx()
    for i in (1, 2):
        (await s.subscribe(subscribe_cmd(i, sub_type=KEY_SHARED), cnx)).flow(1000)
    for i in range(60):
        s.broadcast(entry_data(key=f"k{i % 6}"))
    owner: dict[bytes, set[int]] = {}
    for m in cnx.messages:
        owner.setdefault(m.data, set()).add(m.consumer_id)
    assert all(len(v) == 1 for v in owner.values())
    assert len(cnx.messages) == 60


async def test_reader_subscription_goes_with_its_consumer() -> None:
    s = subs()
    cnx = FakeCnx()
    reader = await s.subscribe(subscribe_cmd(1, sub="reader", durable=False), cnx)
    durable = await s.subscribe(subscribe_cmd(2, sub="keep"), cnx)
    assert s.names() == ["keep", "reader"]
    await reader.close()
    await durable.close()
    assert s.names() == ["keep"]
    await s.delete("keep")
    assert s.names() == []
    with pytest.raises(BrokerError):
        await s.delete("keep")


async def test_delete_with_consumers_needs_force() -> None:
    s = subs()
    cnx = FakeCnx()
    await s.subscribe(subscribe_cmd(1), cnx)
    with pytest.raises(BrokerError) as err:
        await s.delete("s")
    assert err.value.code == pb.ConsumerBusy
    await s.delete("s", force=True)
    assert s.names() == [] and cnx.commands[-1].type == pb.BaseCommand.CLOSE_CONSUMER
