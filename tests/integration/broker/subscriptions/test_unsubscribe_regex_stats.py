"""Unsubscribe, regex (multi-topic) subscriptions, subscription stats in /metrics."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

from tests.integration.broker.subscriptions.helpers import drain, publish, texts
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

EARLIEST = pulsar.InitialPosition.Earliest
SharedT = pulsar.ConsumerType.Shared


def test_unsubscribe_deletes_the_subscription(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, ["a", "b"])
    consumer.unsubscribe()
    # the cursor is gone: a new subscription of that name starts over at its initial position
    again = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Latest)
    publish(client, topic, ["c"])
    assert texts(drain(again)) == ["c"]


def test_unsubscribe_refused_while_others_are_connected(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "s", consumer_type=SharedT, initial_position=EARLIEST)
    c2 = client.subscribe(topic, "s", consumer_type=SharedT)
    with pytest.raises(pulsar.PulsarException):
        c1.unsubscribe()
    # nothing was deleted: both still consume
    publish(client, topic, [f"m{i}" for i in range(10)])
    assert len(drain(c1)) + len(drain(c2)) == 10
    c2.close()
    c1.unsubscribe()


def test_regex_subscription_reads_every_matching_topic(client: pulsar.Client) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    for t in topics:  # the topics exist before the pattern consumer looks them up
        client.create_producer(t).close()
    client.create_producer(f"persistent://public/default/other-{prefix}").close()
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "rx",
        initial_position=EARLIEST,
        pattern_auto_discovery_period=1,
    )
    for i, t in enumerate(topics):
        publish(client, t, [f"{i}-a", f"{i}-b"])
    publish(client, f"persistent://public/default/other-{prefix}", ["not-me"])
    got = texts(drain(consumer, idle_ms=1500))
    assert sorted(got) == sorted(f"{i}-{x}" for i in range(3) for x in "ab")


def _metric(standalone: StandaloneProc, topic: str, sub: str) -> float | None:
    for line in standalone.metrics().splitlines():
        if line.startswith("pulsar_subscription_back_log{") and f'topic="{topic}"' in line:
            if f'subscription="{sub}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return None


def test_backlog_in_metrics_follows_acks(
    client: pulsar.Client, topic: str, standalone: StandaloneProc
) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, [f"m{i}" for i in range(6)])
    wait_until(lambda: _metric(standalone, topic, "s") == 6, what="backlog 6")
    got = drain(consumer)
    for m in got[:4]:
        consumer.acknowledge(m)
    wait_until(lambda: _metric(standalone, topic, "s") == 2, what="backlog 2")
