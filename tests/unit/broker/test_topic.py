"""PersistentTopic and Producer without sockets or storage: access modes, topic epochs,
in-order receipts, storage failures, termination."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.broker.topic import PersistentTopic
from magnetar.wire import pb
from magnetar.wire.topics import TopicName
from tests.support.wait import eventually
from tests.unit.broker.fakes import FaultyLedger
from tests.unit.broker.subscriptions.fakes import FakeCnx

_C = pb.BaseCommand


def _topic(ml: FaultyLedger | None = None) -> PersistentTopic:
    name = TopicName.parse("t")
    ml = ml or FaultyLedger()
    return PersistentTopic(
        name=name,
        managed_ledger=ml,
        subscriptions=TopicSubscriptionsImpl(topic=name, managed_ledger=ml),
    )


def _producer(
    topic: PersistentTopic,
    name: str,
    mode: AccessMode = AccessMode.SHARED,
    *,
    cnx: FakeCnx | None = None,
    pid: int = 1,
    epoch: int = 0,
    topic_epoch: int | None = None,
) -> Producer:
    return Producer(
        topic=topic,
        cnx=cnx or FakeCnx(),
        producer_id=pid,
        name=name,
        epoch=epoch,
        access_mode=mode,
        user_provided_name=True,
        topic_epoch=topic_epoch,
        metadata={},
    )


async def _add(topic: PersistentTopic, producer: Producer) -> Any:
    return await topic.add_producer(producer, on_queued=lambda: None)


async def test_shared_producers_coexist() -> None:
    topic = _topic()
    assert await _add(topic, _producer(topic, "a")) is None
    assert await _add(topic, _producer(topic, "b")) is None
    assert set(topic.producers) == {"a", "b"}


async def test_same_name_is_busy_unless_successor() -> None:
    topic = _topic()
    cnx = FakeCnx()
    first = _producer(topic, "a", cnx=cnx)
    await _add(topic, first)
    with pytest.raises(BrokerError) as err:
        await _add(topic, _producer(topic, "a"))
    assert err.value.code == pb.ProducerBusy
    successor = _producer(topic, "a", cnx=cnx, epoch=1)
    await _add(topic, successor)
    assert topic.producers["a"] is successor and first.closed


async def test_exclusive_modes() -> None:
    topic = _topic()
    excl = _producer(topic, "x", AccessMode.EXCLUSIVE)
    assert await _add(topic, excl) == 0
    with pytest.raises(BrokerError) as err:
        await _add(topic, _producer(topic, "y", AccessMode.EXCLUSIVE))
    assert err.value.code == pb.ProducerFenced
    with pytest.raises(BrokerError) as err:
        await _add(topic, _producer(topic, "s"))
    assert err.value.code == pb.ProducerBusy
    topic.remove_producer(excl)
    assert await _add(topic, _producer(topic, "y", AccessMode.EXCLUSIVE)) == 1


async def test_wait_for_exclusive_is_promoted_in_order() -> None:
    topic = _topic()
    holder = _producer(topic, "h", AccessMode.EXCLUSIVE)
    await _add(topic, holder)
    queued: list[str] = []
    w1 = _producer(topic, "w1", AccessMode.WAIT_FOR_EXCLUSIVE)
    w2 = _producer(topic, "w2", AccessMode.WAIT_FOR_EXCLUSIVE)
    t1 = asyncio.create_task(topic.add_producer(w1, on_queued=lambda: queued.append("w1")))
    t2 = asyncio.create_task(topic.add_producer(w2, on_queued=lambda: queued.append("w2")))
    await eventually(lambda: queued == ["w1", "w2"], timeout=5, what="both queued")
    assert not t1.done()
    topic.remove_producer(holder)
    assert await t1 == 1 and not t2.done()
    topic.remove_producer(w1)
    assert await t2 == 2


async def test_fencing_closes_others_and_stale_epochs_are_fenced() -> None:
    topic = _topic()
    cnx = FakeCnx()
    old = _producer(topic, "old", AccessMode.EXCLUSIVE, cnx=cnx)
    assert await _add(topic, old) == 0
    new = _producer(topic, "new", AccessMode.EXCLUSIVE_WITH_FENCING)
    assert await _add(topic, new) == 1
    assert old.closed and cnx.commands[-1].type == _C.CLOSE_PRODUCER
    topic.remove_producer(new)
    comeback = _producer(topic, "old", AccessMode.EXCLUSIVE, topic_epoch=0)
    with pytest.raises(BrokerError) as err:
        await _add(topic, comeback)
    assert err.value.code == pb.ProducerFenced


async def test_receipts_follow_send_order_even_when_adds_finish_out_of_order() -> None:
    ml = FaultyLedger()
    topic = _topic(ml)
    cnx = FakeCnx()
    producer = _producer(topic, "p", cnx=cnx)
    await _add(topic, producer)
    ml.delay = 0.01
    for seq in range(5):
        producer.publish(seq, seq, 1, b"m%d" % seq)
    ml.delay = 0.0
    for seq in range(5, 10):  # these complete first
        producer.publish(seq, seq, 1, b"m%d" % seq)
    await producer.drain(5)
    receipts = [c.send_receipt for c in cnx.commands if c.type == _C.SEND_RECEIPT]
    assert [r.sequence_id for r in receipts] == list(range(10))
    assert topic.msg_in == 10 and topic.bytes_in == sum(len(b"m%d" % i) for i in range(10))


async def test_storage_failure_is_a_persistence_error_for_that_send() -> None:
    ml = FaultyLedger()
    topic = _topic(ml)
    cnx = FakeCnx()
    producer = _producer(topic, "p", cnx=cnx)
    await _add(topic, producer)
    producer.publish(0, 0, 1, b"ok")
    await producer.drain(5)
    ml.fail_next = 1  # the next add to start fails
    producer.publish(1, 1, 1, b"fails")
    producer.publish(2, 2, 1, b"ok")
    await producer.drain(5)
    kinds = [
        (c.type, c.send_error.error if c.type == _C.SEND_ERROR else None) for c in cnx.commands
    ]
    assert kinds == [
        (_C.SEND_RECEIPT, None),
        (_C.SEND_ERROR, pb.PersistenceError),
        (_C.SEND_RECEIPT, None),
    ]


async def test_terminated_topic_refuses_producers_and_sends() -> None:
    topic = _topic()
    cnx = FakeCnx()
    producer = _producer(topic, "p", cnx=cnx)
    await _add(topic, producer)
    await topic.terminate()
    assert producer.closed
    with pytest.raises(BrokerError) as err:
        await _add(topic, _producer(topic, "q"))
    assert err.value.code == pb.TopicTerminatedError


async def test_close_notifies_producers_and_closes_the_ledger() -> None:
    ml = FaultyLedger()
    topic = _topic(ml)
    cnx = FakeCnx()
    await _add(topic, _producer(topic, "p", cnx=cnx))
    await topic.close(reason="test")
    assert ml.closed and not topic.producers
    assert cnx.commands[-1].type == _C.CLOSE_PRODUCER
    stats = topic.stats()
    assert stats["publishers"] == [] and stats["storageSize"] == 0
