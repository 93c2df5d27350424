"""Shared subscriptions: round-robin, redelivery of a closed consumer's messages."""

from __future__ import annotations

import pulsar

from magnetar.wire import commands, pb
from tests.integration.broker.subscriptions.helpers import drain, publish, texts
from tests.support.raw_client import FrameLog
from tests.support.standalone import StandaloneProc

SharedT = pulsar.ConsumerType.Shared


def test_shared_round_robin_each_message_once(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "sh", consumer_type=SharedT)
    c2 = client.subscribe(topic, "sh", consumer_type=SharedT)
    sent = [f"m{i}" for i in range(40)]
    publish(client, topic, sent)
    got1, got2 = texts(drain(c1)), texts(drain(c2))
    assert sorted(got1 + got2, key=lambda s: int(s[1:])) == sent  # each exactly once
    # round-robin per entry: an even split, each consumer's share in publish order
    assert 15 <= len(got1) <= 25, (got1, got2)
    assert got1 == sorted(got1, key=lambda s: int(s[1:]))
    assert got2 == sorted(got2, key=lambda s: int(s[1:]))


def test_unacked_messages_of_a_closed_consumer_go_to_the_others(
    client: pulsar.Client, topic: str
) -> None:
    c1 = client.subscribe(topic, "sh", consumer_type=SharedT, receiver_queue_size=10)
    c2 = client.subscribe(topic, "sh", consumer_type=SharedT, receiver_queue_size=10)
    sent = [f"m{i}" for i in range(20)]
    publish(client, topic, sent)
    held = drain(c1)  # c1 never acknowledges
    seen2 = drain(c2)
    for m in seen2:
        c2.acknowledge(m)
    assert held and sorted(texts(held) + texts(seen2)) == sorted(sent)
    c1.close()
    again = drain(c2)
    assert sorted(texts(again)) == sorted(texts(held))  # exactly the unacked ones
    assert all(m.redelivery_count() == 1 for m in again)
    for m in again:
        c2.acknowledge(m)
    assert drain(c2) == []


def test_shared_flow_control_respects_receiver_queue(client: pulsar.Client, topic: str) -> None:
    # a small receiver queue: the broker never runs far ahead of what the client asked for
    slow = client.subscribe(topic, "sh", consumer_type=SharedT, receiver_queue_size=5)
    publish(client, topic, [f"m{i}" for i in range(30)])
    fast = client.subscribe(topic, "sh", consumer_type=SharedT, receiver_queue_size=100)
    got_fast = drain(fast)
    got_slow = drain(slow)
    assert len(got_fast) + len(got_slow) == 30
    # slow only ever had ~5 permits: most of the backlog went to the new consumer
    assert len(got_fast) >= 20, (len(got_fast), len(got_slow))


def test_connection_drop_redelivers_to_the_others(
    client: pulsar.Client, topic: str, standalone: StandaloneProc
) -> None:
    """A consumer whose connection dies (no CLOSE_CONSUMER) gives its messages back too."""
    raw = FrameLog(standalone.port)
    try:
        ok = raw.subscribe(topic, "sh", 1, sub_type=pb.CommandSubscribe.Shared, name="raw")
        assert ok.type == pb.BaseCommand.SUCCESS
        raw.command(commands.flow(consumer_id=1, permits=5))
        publish(client, topic, [f"m{i}" for i in range(5)])
        got = []
        while len(got) < 5:
            raw.pump(0.5)
            got += raw.messages(1)
    finally:
        raw.close()  # dies holding all five, unacknowledged
    other = client.subscribe(topic, "sh", consumer_type=SharedT)
    again = drain(other, idle_ms=1000)
    assert sorted(texts(again)) == [f"m{i}" for i in range(5)]
    assert {m.redelivery_count() for m in again} == {1}
