"""Failover at the wire level: priority levels and ACTIVE_CONSUMER_CHANGE events, which the
official Python client does not expose."""

from __future__ import annotations

import pulsar

from magnetar.wire import commands, pb
from tests.integration.broker.subscriptions.helpers import publish
from tests.support.raw_client import FrameLog
from tests.support.standalone import StandaloneProc


def test_priority_and_active_consumer_change_events(
    standalone: StandaloneProc, client: pulsar.Client, topic: str
) -> None:
    raw = FrameLog(standalone.port)
    try:
        assert raw.subscribe(topic, "fo", 1, name="a", priority=2).type == pb.BaseCommand.SUCCESS
        assert raw.active_events() == [(1, True)]
        # a better priority level beats the smaller name; everyone hears of the change
        assert raw.subscribe(topic, "fo", 2, name="z", priority=0).type == pb.BaseCommand.SUCCESS
        assert sorted(raw.active_events()) == [(1, False), (2, True)]
        # a newcomer that changes nothing is told it is inactive, and only it
        assert raw.subscribe(topic, "fo", 3, name="b", priority=2).type == pb.BaseCommand.SUCCESS
        assert raw.active_events() == [(3, False)]
        for cid in (1, 2, 3):
            raw.command(commands.flow(consumer_id=cid, permits=100))
        publish(client, topic, ["m0", "m1"])
        raw.wait_for(lambda f: f.type == pb.BaseCommand.MESSAGE, timeout=5)
        raw.pump(0.3)
        assert raw.messages(1) == [] and raw.messages(3) == []
        # the active consumer leaves: the next (priority 2, name "a") takes over
        close = pb.BaseCommand(type=pb.BaseCommand.CLOSE_CONSUMER)
        close.close_consumer.consumer_id = 2
        close.close_consumer.request_id = raw.request_id()
        raw.command(close)
        raw.wait_for(lambda f: f.type == pb.BaseCommand.SUCCESS)
        assert sorted(raw.active_events()) == [(1, True), (3, False)]
        got = []
        while len(got) < 2:
            raw.pump(0.5)
            got += raw.messages(1)
        assert [m.command.message.redelivery_count for m in got] == [1, 1]
        assert raw.messages(3) == []
    finally:
        raw.close()
