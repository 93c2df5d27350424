"""NonPersistentTopic without sockets: receipts at once with message id 0:0, entries handed
to the subscriptions (or dropped), producer access modes shared with persistent topics, the
idleness the broker's inactivity rule reads, and its stats shape."""

from __future__ import annotations

import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.subscriptions import NonPersistentSubscriptions
from magnetar.broker.topic import NonPersistentTopic
from magnetar.wire import pb
from magnetar.wire.topics import TopicName
from tests.support.wait import eventually
from tests.unit.broker.subscriptions.fakes import FakeCnx, entry_data, subscribe_cmd

_C = pb.BaseCommand


def _topic() -> NonPersistentTopic:
    name = TopicName.parse("non-persistent://public/default/t")
    return NonPersistentTopic(name=name, subscriptions=NonPersistentSubscriptions(name))


def _producer(topic: NonPersistentTopic, name: str, mode: AccessMode, cnx: FakeCnx) -> Producer:
    return Producer(
        topic=topic,
        cnx=cnx,
        producer_id=1,
        name=name,
        epoch=0,
        access_mode=mode,
        user_provided_name=True,
        topic_epoch=None,
        metadata={},
    )


async def _receipts(cnx: FakeCnx, n: int) -> list[pb.CommandSendReceipt]:
    def got() -> list[pb.CommandSendReceipt]:
        found = [c.send_receipt for c in cnx.commands if c.type == _C.SEND_RECEIPT]
        return found if len(found) >= n else []

    return await eventually(got, what=f"{n} receipts")


async def test_receipts_carry_0_0_and_entries_reach_the_consumers_connected_now() -> None:
    topic = _topic()
    pcnx = FakeCnx()
    producer = _producer(topic, "p", AccessMode.SHARED, pcnx)
    await topic.add_producer(producer, on_queued=lambda: None)
    producer.publish(0, 0, 1, entry_data(b"nobody"))  # no subscription yet: gone
    ccnx = FakeCnx()
    consumer = await topic.subscriptions.subscribe(subscribe_cmd(1), ccnx)
    consumer.flow(10)
    producer.publish(1, 1, 1, entry_data(b"seen"))
    receipts = await _receipts(pcnx, 2)
    assert [r.sequence_id for r in receipts] == [0, 1]
    assert {(r.message_id.ledgerId, r.message_id.entryId) for r in receipts} == {(0, 0)}
    assert len(ccnx.messages) == 1 and ccnx.messages[0].data.endswith(b"seen")
    stats = topic.stats()
    assert stats["msgInCounter"] == 2 and stats["storageSize"] == 0
    assert stats["subscriptions"]["s"]["msgOutCounter"] == 1
    assert stats["publishers"][0]["msgDropRate"] == 0.0 and "msgDropRate" in stats
    assert topic.entries_in == 2


async def test_access_modes_as_for_persistent_topics() -> None:
    topic = _topic()
    first = _producer(topic, "a", AccessMode.EXCLUSIVE, FakeCnx())
    assert await topic.add_producer(first, on_queued=lambda: None) == 0
    with pytest.raises(BrokerError) as err:
        await topic.add_producer(
            _producer(topic, "b", AccessMode.SHARED, FakeCnx()), on_queued=lambda: None
        )
    assert err.value.code == pb.ProducerBusy
    with pytest.raises(BrokerError) as err:
        await topic.add_producer(
            _producer(topic, "a", AccessMode.SHARED, FakeCnx()), on_queued=lambda: None
        )
    assert err.value.code == pb.ProducerBusy  # the name is taken


async def test_idle_without_producers_and_consumers() -> None:
    topic = _topic()
    assert topic.idle()
    consumer = await topic.subscriptions.subscribe(subscribe_cmd(1), FakeCnx())
    assert not topic.idle()
    await consumer.close()
    assert topic.idle() and topic.subscriptions.names() == ["s"]  # kept, yet holds nothing
    producer = _producer(topic, "p", AccessMode.SHARED, FakeCnx())
    await topic.add_producer(producer, on_queued=lambda: None)
    assert not topic.idle()
    producer.disconnect(notify=False)
    assert topic.idle()


async def test_close_tells_every_client() -> None:
    topic = _topic()
    pcnx, ccnx = FakeCnx(), FakeCnx()
    await topic.add_producer(_producer(topic, "p", AccessMode.SHARED, pcnx), on_queued=lambda: None)
    await topic.subscriptions.subscribe(subscribe_cmd(7), ccnx)
    await topic.close(reason="test")
    assert [c.type for c in pcnx.commands] == [_C.CLOSE_PRODUCER]
    assert [c.type for c in ccnx.commands] == [_C.CLOSE_CONSUMER]
    with pytest.raises(BrokerError):
        await topic.add_producer(
            _producer(topic, "q", AccessMode.SHARED, FakeCnx()), on_queued=lambda: None
        )
