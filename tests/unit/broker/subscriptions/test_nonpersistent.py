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


async def test_acks_redeliveries_and_seeks_are_accepted_and_change_nothing() -> None:
    s = subs()
    cnx = FakeCnx()
    c = await s.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    s.broadcast(entry_data(b"a"))
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
    ack.message_id.add(ledgerId=0, entryId=0)
    await c.ack(ack)
    c.redeliver_unacknowledged([])
    await c.seek(pb.CommandSeek(consumer_id=1, request_id=1, message_publish_time=0))
    assert len(cnx.messages) == 1  # nothing came back
    assert s.stats()["s"]["unackedMessages"] == 0
    assert (await c.get_last_message_id()).last.ledger_id == -1


async def test_admin_operations_on_stored_messages_are_refused() -> None:
    s = subs()
    await s.subscribe(subscribe_cmd(1), FakeCnx())
    with pytest.raises(BrokerError) as err:
        await s.create("new", start=None)
    assert err.value.code == pb.NotAllowedError and "only be done through client" in str(err.value)
    with pytest.raises(BrokerError) as err:
        await s.reset("s", publish_time=0)
    assert err.value.code == pb.NotAllowedError and s.names() == ["s"]


async def test_an_idle_subscription_takes_the_type_of_its_next_consumer() -> None:
    s = subs()
    cnx = FakeCnx()
    ex = await s.subscribe(subscribe_cmd(1), cnx)
    await ex.close()
    assert s.stats()["s"]["consumers"] == []  # durable: it stays
    s.broadcast(entry_data())
    assert s.stats()["s"]["msgDropCounter"] == 1  # nobody to take it
    a = await s.subscribe(subscribe_cmd(2, sub_type=SHARED), cnx)
    b = await s.subscribe(subscribe_cmd(3, sub_type=SHARED), cnx)
    a.flow(5)
    b.flow(5)
    for _ in range(4):
        s.broadcast(entry_data())
    assert len(cnx.received(2)) == len(cnx.received(3)) == 2
    assert s.stats()["s"]["type"] == "Shared"


async def test_sticky_key_shared_ranges_must_not_overlap() -> None:
    s = subs()
    cnx = FakeCnx()
    await s.subscribe(subscribe_cmd(1, sub_type=KEY_SHARED, sticky=[(0, 32767)]), cnx)
    with pytest.raises(BrokerError) as err:
        await s.subscribe(subscribe_cmd(2, sub_type=KEY_SHARED, sticky=[(32000, 65535)]), cnx)
    assert err.value.code == pb.ConsumerAssignError
