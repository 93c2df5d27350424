"""Subscriptions driven through their contracts over an in-memory ledger and connection."""

from __future__ import annotations

import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions import TopicSubscriptionsImpl, hashing
from magnetar.managed_ledger.api import Position
from magnetar.wire import batch, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName
from tests.support.wait import eventually
from tests.unit.broker.subscriptions.fakes import (
    LEDGER,
    FakeCnx,
    Ledger,
    ack_cmd,
    entry_data,
    ids,
    settle,
    subscribe_cmd,
)

EXCLUSIVE = pb.CommandSubscribe.Exclusive
SHARED = pb.CommandSubscribe.Shared
FAILOVER = pb.CommandSubscribe.Failover
KEY_SHARED = pb.CommandSubscribe.Key_Shared


def topic_subs(ml: Ledger, name: str = "t", *, precise: bool = False) -> TopicSubscriptionsImpl:
    return TopicSubscriptionsImpl(TopicName.parse(name), ml, precise_flow_control=precise)


@pytest.fixture
def ml() -> Ledger:
    return Ledger()


async def test_by_default_a_permit_reads_an_entry_and_all_read_is_sent(ml: Ledger) -> None:
    """Pulsar's preciseDispatcherFlowControl off (its default)."""
    for _ in range(3):
        ml.add(entry_data(batch_size=4))
    ml.add(entry_data())
    ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(4)
    await settle()
    assert cnx.received(1) == [0, 1, 2, 3]  # four permits, four entries: 13 messages
    assert c.stats()["availablePermits"] == -9
    c.flow(9)
    await settle()
    assert cnx.received(1) == [0, 1, 2, 3]  # back to zero: nothing more
    c.flow(1)
    await settle()
    assert cnx.received(1) == [0, 1, 2, 3, 4]
    assert c.stats()["availablePermits"] == 0


async def test_precise_permits_bound_dispatch_and_batches_cost_their_size(ml: Ledger) -> None:
    for _ in range(3):
        ml.add(entry_data(batch_size=4))
    ml.add(entry_data())
    subs = topic_subs(ml, precise=True)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    await settle()
    assert cnx.messages == []  # no permits yet
    c.flow(4)
    await settle()
    assert cnx.received(1) == [0]  # one batch of 4 used all four permits
    c.flow(3)  # not a whole batch: the broker still sends it and goes below zero
    await settle()
    assert cnx.received(1) == [0, 1]
    assert c.stats()["availablePermits"] == -1
    c.flow(100)
    await settle()
    assert cnx.received(1) == [0, 1, 2, 3]
    assert c.stats()["unackedMessages"] == 13
    assert c.stats()["msgOutCounter"] == 13


async def test_not_writable_pauses_until_drained(ml: Ledger) -> None:
    subs = topic_subs(ml)
    cnx = FakeCnx(writable=False)
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    ml.add(entry_data())
    subs.on_entries_added()
    await settle()
    assert cnx.messages == []
    cnx.writable = True
    await eventually(lambda: cnx.received(1) == [0], timeout=5, what="dispatch once writable")


async def test_new_entries_wake_the_dispatcher(ml: Ledger) -> None:
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    await settle()
    ml.add(entry_data())  # no on_entries_added: the ledger's wait_for_entries wakes it
    await settle()
    assert cnx.received(1) == [0]


async def test_exclusive_second_consumer_and_type_change(ml: Ledger) -> None:
    subs = topic_subs(ml)
    c1 = await subs.subscribe(subscribe_cmd(1), FakeCnx())
    with pytest.raises(BrokerError) as err:
        await subs.subscribe(subscribe_cmd(2), FakeCnx())
    assert err.value.code == pb.ConsumerBusy
    with pytest.raises(BrokerError) as err:
        await subs.subscribe(subscribe_cmd(3, sub_type=SHARED), FakeCnx())
    assert err.value.code == pb.ConsumerBusy
    await c1.close()
    await subs.subscribe(subscribe_cmd(4, sub_type=SHARED), FakeCnx())
    await subs.subscribe(subscribe_cmd(5, sub_type=SHARED), FakeCnx())
    assert subs.stats()["s"]["type"] == "Shared"


async def test_failover_priority_events_and_switch(ml: Ledger) -> None:
    for _ in range(4):
        ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    b = await subs.subscribe(subscribe_cmd(1, sub_type=FAILOVER, name="b"), cnx)
    assert cnx.active_events() == [(1, True)]
    a = await subs.subscribe(subscribe_cmd(2, sub_type=FAILOVER, name="a"), cnx)
    # the active consumer changed: every consumer hears about it
    assert cnx.active_events()[1:] == [(1, False), (2, True)]
    z = await subs.subscribe(subscribe_cmd(3, sub_type=FAILOVER, name="z", priority=1), cnx)
    assert cnx.active_events()[3:] == [(3, False)]  # only the newcomer: nothing changed
    for c in (a, b, z):
        c.flow(10)
    await settle()
    assert cnx.received(2) == [0, 1, 2, 3] and cnx.received(1) == []
    await a.ack(ack_cmd(2, 1, cumulative=True))
    await a.close()
    await settle()
    assert cnx.active_events()[4:] == [(1, True), (3, False)]
    # b takes over from the first unacknowledged entry; redelivered ones carry a count
    got = [(m.entry_id, m.redelivery_count) for m in cnx.messages if m.consumer_id == 1]
    assert got == [(2, 1), (3, 1)]
    assert subs.stats()["s"]["activeConsumerName"] == "b"


async def test_failover_high_priority_consumer_takes_over(ml: Ledger) -> None:
    subs = topic_subs(ml)
    cnx = FakeCnx()
    await subs.subscribe(subscribe_cmd(1, sub_type=FAILOVER, name="a", priority=5), cnx)
    await subs.subscribe(subscribe_cmd(2, sub_type=FAILOVER, name="z", priority=0), cnx)
    assert cnx.active_events()[-2:] == [(1, False), (2, True)]


async def test_failover_events_need_protocol_12(ml: Ledger) -> None:
    subs = topic_subs(ml)
    cnx = FakeCnx(protocol=11)
    await subs.subscribe(subscribe_cmd(1, sub_type=FAILOVER), cnx)
    assert cnx.active_events() == []


async def test_shared_close_redelivers_pending_to_others(ml: Ledger) -> None:
    for _ in range(6):
        ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c1 = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), cnx)
    c2 = await subs.subscribe(subscribe_cmd(2, sub_type=SHARED), cnx)
    c1.flow(10)
    c2.flow(10)
    await settle()
    assert cnx.received(1) == [0, 2, 4] and cnx.received(2) == [1, 3, 5]
    await c1.ack(ack_cmd(1, 2))
    await c1.close()
    await settle()
    again = [(m.entry_id, m.redelivery_count) for m in cnx.messages[6:]]
    assert again == [(0, 1), (4, 1)]
    assert subs.stats()["s"]["consumers"][0]["unackedMessages"] == 5


async def test_shared_redeliver_ids_and_counts(ml: Ledger) -> None:
    for _ in range(3):
        ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), cnx)
    c.flow(100)
    await settle()
    for expected in (1, 2, 3):
        c.redeliver_unacknowledged(ids(1))
        await settle()
        assert (cnx.messages[-1].entry_id, cnx.messages[-1].redelivery_count) == (1, expected)
    c.redeliver_unacknowledged([])  # everything this consumer holds
    await settle()
    assert sorted((m.entry_id, m.redelivery_count) for m in cnx.messages[-3:]) == [
        (0, 1),
        (1, 4),
        (2, 1),
    ]
    assert subs.stats()["s"]["msgOutCounter"] == 9
    await c.ack(ack_cmd(1, 0, 1, 2))
    assert c.stats()["unackedMessages"] == 0
    assert subs.stats()["s"]["msgBacklog"] == 0


async def test_cumulative_ack_refused_on_shared(ml: Ledger) -> None:
    ml.add(entry_data())
    subs = topic_subs(ml)
    c = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), FakeCnx())
    with pytest.raises(BrokerError) as err:
        await c.ack(ack_cmd(1, 0, cumulative=True))
    assert err.value.code == pb.NotAllowedError


async def test_batch_index_acks_and_partial_redelivery(ml: Ledger) -> None:
    ml.add(entry_data(batch_size=5))
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), cnx)
    c.flow(10)
    await settle()
    assert cnx.messages[0].ack_set is None
    # indexes 0 and 3 acknowledged: the ack set lists the others as not yet acked
    await c.ack(ack_cmd(1, 0, ack_set=batch.ack_set_from_unacked([1, 2, 4]), batch_size=5))
    assert c.stats()["unackedMessages"] == 3
    c.redeliver_unacknowledged(ids(0))
    await settle()
    resent = cnx.messages[-1]
    assert batch.unacked_from_ack_set(resent.ack_set or []) == [1, 2, 4]
    assert resent.data == cnx.messages[0].data  # the stored entry, unchanged
    await c.ack(ack_cmd(1, 0, ack_set=batch.ack_set_from_unacked([]), batch_size=5))
    assert c.stats()["unackedMessages"] == 0
    assert subs.stats()["s"]["msgBacklog"] == 0


async def test_cumulative_ack_inside_a_batch(ml: Ledger) -> None:
    ml.add(entry_data())
    ml.add(entry_data(batch_size=4))
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    await settle()
    # cumulative up to index 1 of the batch: entry 0 done, batch half acked
    await c.ack(ack_cmd(1, 1, cumulative=True, ack_set=batch.ack_set_from_unacked([2, 3])))
    cursor = ml.cursors["s"]
    assert cursor.mark_delete_position == Position(LEDGER, 0)
    assert batch.unacked_from_ack_set(cursor.batch_ack_set(Position(LEDGER, 1)) or []) == [2, 3]
    assert c.stats()["unackedMessages"] == 2


async def test_key_shared_routes_by_key_hash(ml: Ledger) -> None:
    keys = [f"k{i}" for i in range(10)]
    for i in range(40):
        ml.add(entry_data(key=keys[i % 10]))
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c1 = await subs.subscribe(subscribe_cmd(1, sub_type=KEY_SHARED), cnx)
    c2 = await subs.subscribe(subscribe_cmd(2, sub_type=KEY_SHARED), cnx)
    c1.flow(100)
    c2.flow(100)
    await settle()
    # c2 joined second: it owns the lower half of the slots (Pulsar's auto-split)
    for m in cnx.messages:
        slot = hashing.key_slot(keys[m.entry_id % 10].encode())
        assert m.consumer_id == (2 if slot <= 32768 else 1)
    assert len(cnx.messages) == 40
    stats = subs.stats()["s"]["consumers"]
    assert stats[0]["keyHashRanges"] == ["[32769, 65536]"]
    assert stats[1]["keyHashRanges"] == ["[0, 32768]"]


async def test_key_shared_busy_key_waits_and_keeps_order(ml: Ledger) -> None:
    # key owners: find two keys on different consumers
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c1 = await subs.subscribe(subscribe_cmd(1, sub_type=KEY_SHARED), cnx)
    c2 = await subs.subscribe(subscribe_cmd(2, sub_type=KEY_SHARED), cnx)
    low = next(f"k{i}" for i in range(100) if hashing.key_slot(f"k{i}".encode()) <= 32768)
    high = next(f"k{i}" for i in range(100) if hashing.key_slot(f"k{i}".encode()) > 32768)
    for i in range(6):
        ml.add(entry_data(key=low if i % 2 else high))
    subs.on_entries_added()
    c2.flow(1)  # c2 (low keys) can take one; c1 (high keys) none yet
    await settle()
    assert cnx.received(2) == [1]
    c1.flow(10)
    await settle()
    assert cnx.received(1) == [0, 2, 4]
    c2.flow(10)
    await settle()
    assert cnx.received(2) == [1, 3, 5]  # the low key's entries waited, in order


async def test_key_shared_recently_joined_waits_for_older_acks(ml: Ledger) -> None:
    low = next(f"k{i}" for i in range(100) if hashing.key_slot(f"k{i}".encode()) <= 32768)
    ml.add(entry_data(key=low))
    ml.add(entry_data(key=low))
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c1 = await subs.subscribe(subscribe_cmd(1, sub_type=KEY_SHARED), cnx)
    c1.flow(10)
    await settle()
    assert cnx.received(1) == [0, 1]
    c2 = await subs.subscribe(subscribe_cmd(2, sub_type=KEY_SHARED), cnx)  # takes the low half
    c2.flow(10)
    ml.add(entry_data(key=low))
    subs.on_entries_added()
    await settle()
    assert cnx.received(2) == []  # entry 2 waits: c1 still holds 0 and 1 of that key
    assert subs.stats()["s"]["consumers"][1]["readPositionWhenJoining"] == f"{LEDGER}:2"
    await c1.ack(ack_cmd(1, 0, 1))
    await settle()
    assert cnx.received(2) == [2]


async def test_key_shared_sticky_ranges(ml: Ledger) -> None:
    subs = topic_subs(ml)
    await subs.subscribe(subscribe_cmd(1, sub_type=KEY_SHARED, sticky=[(0, 30000)]), FakeCnx())
    with pytest.raises(BrokerError) as err:
        await subs.subscribe(
            subscribe_cmd(2, sub_type=KEY_SHARED, sticky=[(20000, 40000)]), FakeCnx()
        )
    assert err.value.code == pb.ConsumerAssignError
    with pytest.raises(BrokerError) as err:  # auto-split consumer on a sticky subscription
        await subs.subscribe(subscribe_cmd(3, sub_type=KEY_SHARED), FakeCnx())
    assert err.value.code == pb.ConsumerBusy


async def test_delayed_delivery_on_shared(ml: Ledger) -> None:
    import time

    now = int(time.time() * 1000)
    ml.add(entry_data(deliver_at=now + 150))
    ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), cnx)
    c.flow(10)
    await settle()
    assert cnx.received(1) == [1]
    assert subs.stats()["s"]["msgDelayed"] == 1
    await eventually(lambda: cnx.received(1) == [1, 0], timeout=5, what="the delayed message")


async def test_seek_resets_then_closes_consumers(ml: Ledger) -> None:
    for _ in range(5):
        ml.add(entry_data(publish_time=100 + 10 * ml.number_of_entries))
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    await settle()
    await c.ack(ack_cmd(1, 4, cumulative=True))
    await c.seek(pb.CommandSeek(consumer_id=1, request_id=9, message_publish_time=125))
    assert ml.cursors["s"].read_position == Position(LEDGER, 3)  # first with time >= 125
    closes = [x for x in cnx.commands if x.type == pb.BaseCommand.CLOSE_CONSUMER]
    assert [x.close_consumer.consumer_id for x in closes] == [1]
    # the client subscribes again and reads from the new position
    c2 = await subs.subscribe(subscribe_cmd(1), cnx)
    c2.flow(10)
    await settle()
    assert cnx.received(1)[-2:] == [3, 4]
    seek = pb.CommandSeek(consumer_id=1, request_id=10)
    MessageId(LEDGER, 1).fill(seek.message_id)
    await c2.seek(seek)
    assert ml.cursors["s"].read_position == Position(LEDGER, 1)


async def test_acks_of_a_consumer_detached_by_a_seek_do_not_count(ml: Ledger) -> None:
    """A client's grouped acks can reach the broker while its seek is under way (after the
    consumer was detached, before CLOSE_CONSUMER went out): they must not acknowledge what the
    seek made pending again, or the re-subscribed consumer receives nothing."""
    for _ in range(5):
        ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    await settle()
    assert cnx.received(1) == [0, 1, 2, 3, 4]
    seek = pb.CommandSeek(consumer_id=1, request_id=9)
    MessageId(LEDGER, 1).fill(seek.message_id)
    await c.seek(seek)
    with pytest.raises(BrokerError) as err:
        await c.ack(ack_cmd(1, 0, 1, 2, 3, 4))  # the old consumer's late acks
    assert err.value.code == pb.ConsumerNotFound
    c2 = await subs.subscribe(subscribe_cmd(1), cnx)
    c2.flow(10)
    await settle()
    assert cnx.received(1)[5:] == [1, 2, 3, 4]


async def test_publish_time_search(ml: Ledger) -> None:
    subs = topic_subs(ml)
    assert await subs.position_for_publish_time(5) == Position(LEDGER, 0)  # empty
    for t in (10, 20, 20, 30, 40, 50, 60):
        ml.add(entry_data(publish_time=t))
    assert await subs.position_for_publish_time(0) == Position(LEDGER, 0)
    assert await subs.position_for_publish_time(20) == Position(LEDGER, 1)
    assert await subs.position_for_publish_time(21) == Position(LEDGER, 3)
    assert await subs.position_for_publish_time(60) == Position(LEDGER, 6)
    assert await subs.position_for_publish_time(61) == Position(LEDGER, 7)  # after the last


async def test_last_message_id(ml: Ledger) -> None:
    subs = topic_subs(ml, "t-partition-2")
    c = await subs.subscribe(subscribe_cmd(1), FakeCnx())
    last = await c.get_last_message_id()
    assert (last.last.ledger_id, last.last.entry_id) == (LEDGER, -1)  # empty topic
    ml.add(entry_data())
    ml.add(entry_data(batch_size=3))
    last = await c.get_last_message_id()
    assert last.last == MessageId(LEDGER, 1, 2, 2)  # last index of the last batch
    assert last.mark_delete == MessageId(LEDGER, -1, 2)


async def test_reader_start_positions(ml: Ledger) -> None:
    for _ in range(4):
        ml.add(entry_data())
    subs = topic_subs(ml)
    cases = {
        MessageId(-1, -1): 0,
        MessageId(2**63 - 1, 2**63 - 1): 4,
        MessageId(LEDGER, 2): 2,  # at the id: the client drops it when not inclusive
        MessageId(LEDGER, 99): 4,  # past the end: initial position (latest)
    }
    for i, (start, first) in enumerate(cases.items()):
        cnx = FakeCnx()
        cmd = subscribe_cmd(i, sub=f"reader-{i}", durable=False, earliest=False, start=start)
        c = await subs.subscribe(cmd, cnx)
        assert ml.cursors[f"reader-{i}"].read_position == Position(LEDGER, first), start
        await c.close()
        assert f"reader-{i}" not in ml.cursors  # a reader's cursor goes with it
    assert subs.names() == []


async def test_unsubscribe(ml: Ledger) -> None:
    subs = topic_subs(ml)
    c1 = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED), FakeCnx())
    c2 = await subs.subscribe(subscribe_cmd(2, sub_type=SHARED), FakeCnx())
    with pytest.raises(BrokerError):
        await c1.unsubscribe()
    assert subs.names() == ["s"]
    await c2.close()
    await c1.unsubscribe()
    assert subs.names() == [] and "s" not in ml.cursors


async def test_stats_fields(ml: Ledger) -> None:
    ml.add(entry_data(batch_size=2))
    subs = topic_subs(ml)
    c = await subs.subscribe(subscribe_cmd(1, sub_type=SHARED, name="me"), FakeCnx())
    c.flow(5)
    await settle()
    st = subs.stats()["s"]
    for k in (
        "msgBacklog",
        "unackedMessages",
        "type",
        "msgRateOut",
        "msgThroughputOut",
        "msgOutCounter",
        "bytesOutCounter",
        "msgRateRedeliver",
        "consumers",
        "isDurable",
    ):
        assert k in st
    assert (st["msgBacklog"], st["unackedMessages"], st["type"]) == (1, 2, "Shared")
    assert st["isDurable"] is True
    cs = st["consumers"][0]
    assert cs["consumerName"] == "me" and cs["availablePermits"] == 3
    assert cs["unackedMessages"] == 2 and cs["msgOutCounter"] == 2 and "msgRateOut" in cs


async def test_admin_create_and_delete(ml: Ledger) -> None:
    subs = topic_subs(ml)
    await subs.create("adm", start="earliest")
    assert subs.names() == ["adm"]
    with pytest.raises(BrokerError):
        await subs.create("adm", start="earliest")
    cnx = FakeCnx()
    await subs.subscribe(subscribe_cmd(1, sub="adm"), cnx)
    with pytest.raises(BrokerError):
        await subs.delete("adm")
    await subs.delete("adm", force=True)
    assert [x.type for x in cnx.commands][-1] == pb.BaseCommand.CLOSE_CONSUMER
    assert subs.names() == []
    with pytest.raises(BrokerError) as err:
        await subs.delete("adm")
    assert err.value.code == pb.SubscriptionNotFound


async def test_consumer_epoch_only_after_a_redeliver_carried_one(ml: Ledger) -> None:
    ml.add(entry_data())
    subs = topic_subs(ml)
    sent: list[int | None] = []
    cnx = FakeCnx()
    original = cnx.send_message

    def spy(**kw: object) -> None:
        sent.append(kw.get("consumer_epoch"))  # type: ignore[arg-type]
        original(**kw)  # type: ignore[arg-type]

    cnx.send_message = spy  # type: ignore[method-assign]
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    c.flow(10)
    await settle()
    c.redeliver_unacknowledged([], consumer_epoch=3)
    await settle()
    assert sent == [None, 3]


async def test_reached_end_of_a_terminated_topic(ml: Ledger) -> None:
    ml.add(entry_data())
    subs = topic_subs(ml)
    cnx = FakeCnx()
    c = await subs.subscribe(subscribe_cmd(1), cnx)
    await ml.terminate()
    c.flow(10)
    await settle()

    def ends() -> int:
        return len([x for x in cnx.commands if x.type == pb.BaseCommand.REACHED_END_OF_TOPIC])

    # as Pulsar: only once every message is acknowledged (the Go client drops the
    # connection on REACHED_END_OF_TOPIC, losing what it had not handed out yet)
    assert cnx.received(1) == [0] and ends() == 0
    await c.ack(ack_cmd(1, 0))
    await settle()
    assert ends() == 1
    c.flow(10)
    await settle()
    assert ends() == 1


async def test_reader_rollback_duration(ml: Ledger) -> None:
    import time

    now = int(time.time() * 1000)
    for t in (now - 60_000, now - 30_000, now - 1_000):
        ml.add(entry_data(publish_time=t))
    subs = topic_subs(ml)
    cmd = subscribe_cmd(1, sub="reader-r", durable=False)
    cmd.start_message_rollback_duration_sec = 10
    await subs.subscribe(cmd, FakeCnx())
    assert ml.cursors["reader-r"].read_position == Position(LEDGER, 2)


async def test_ack_failure_is_a_broker_error(ml: Ledger) -> None:
    from magnetar.managed_ledger.api import StorageUnavailableError

    ml.add(entry_data())
    subs = topic_subs(ml)
    c = await subs.subscribe(subscribe_cmd(1), FakeCnx())

    async def broken(positions: object) -> None:
        raise StorageUnavailableError("bookies down")

    ml.cursors["s"].delete = broken  # type: ignore[method-assign]
    with pytest.raises(BrokerError) as err:
        await c.ack(ack_cmd(1, 0))
    assert err.value.code == pb.PersistenceError
    await c.ack(ack_cmd(1, 5, cumulative=True))  # past the end: ignored, as Pulsar does


async def test_close_all_closes_consumers_and_drops_readers(ml: Ledger) -> None:
    subs = topic_subs(ml)
    cnx = FakeCnx()
    await subs.subscribe(subscribe_cmd(1, sub="durable"), cnx)
    await subs.subscribe(subscribe_cmd(2, sub="reader-x", durable=False), cnx)
    await subs.close_all(reason="unload")
    closed = sorted(
        x.close_consumer.consumer_id
        for x in cnx.commands
        if x.type == pb.BaseCommand.CLOSE_CONSUMER
    )
    assert closed == [1, 2]
    assert "durable" in ml.cursors and "reader-x" not in ml.cursors
    assert subs.names() == ["durable"]  # the durable subscription stays (its cursor does)
