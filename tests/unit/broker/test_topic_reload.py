"""A topic loaded again while its unload is still closing it (a client reconnecting at once):
the new load waits for the close, so it never shares the managed ledger the old topic is
still settling on. Deduplication replays what is stored when a topic loads: an add the old
topic settled afterwards would be missing from that state, and the client's resend of that
message would be stored twice."""

from __future__ import annotations

import asyncio

from magnetar.broker.service import BrokerService
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.broker.topic import PersistentTopic
from magnetar.wire.topics import TopicName
from tests.support.inprocess import TOPIC, Client


async def _held_unload(
    service: BrokerService, name: TopicName
) -> tuple[asyncio.Lock, PersistentTopic]:
    """Load the topic with a subscription and hold that subscription's lock, as a dispatch
    round does while it reads from the bookies: an unload started now stays in the close."""
    c = Client(service)
    await c.connect()
    await c.subscribe(1, "s")
    topic = service.topics[name.full_name]
    assert isinstance(topic, PersistentTopic)
    assert isinstance(topic.subscriptions, TopicSubscriptionsImpl)
    sub = topic.subscriptions.subscription("s")
    assert sub is not None
    await sub.lock.acquire()
    return sub.lock, topic


async def test_a_load_during_an_unload_waits_for_the_close(service: BrokerService) -> None:
    name = TopicName.parse(TOPIC)
    lock, old = await _held_unload(service, name)
    unloading = asyncio.create_task(service.unload(name.full_name))
    loading = asyncio.create_task(service.get_topic(name))
    await asyncio.sleep(0.05)
    assert name.full_name not in service.topics  # out of service while it closes
    assert not unloading.done() and not loading.done()  # the load waits for the close
    lock.release()
    new = await loading
    assert await unloading
    assert isinstance(new, PersistentTopic) and new is not old
    assert new.managed_ledger is not old.managed_ledger
    assert service.topics[name.full_name] is new


async def test_a_load_during_a_broker_wide_unload_waits_too(service: BrokerService) -> None:
    name = TopicName.parse(TOPIC)
    lock, old = await _held_unload(service, name)
    closing = asyncio.create_task(service.unload_all(reason="test"))
    loading = asyncio.create_task(service.get_topic(name))
    await asyncio.sleep(0.05)
    assert not closing.done() and not loading.done()
    lock.release()
    new = await loading
    await closing
    assert isinstance(new, PersistentTopic) and new.managed_ledger is not old.managed_ledger
