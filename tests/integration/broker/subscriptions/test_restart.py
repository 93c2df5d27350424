"""Subscriptions survive a broker restart: acknowledgements and types come back."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar

from tests.integration.broker.subscriptions.helpers import drain, publish, receive, texts
from tests.support.standalone import StandaloneProc


def test_acks_survive_a_clean_restart(tmp_path: Path) -> None:
    proc = StandaloneProc(tmp_path / "data").start()
    topic = f"persistent://public/default/restart-{uuid.uuid4().hex[:8]}"
    sent = [f"m{i}" for i in range(10)]
    try:
        client = pulsar.Client(
            proc.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        publish(client, topic, sent)
        for i, m in enumerate(receive(consumer, 10)):
            if i % 2:
                consumer.acknowledge(m)
        consumer.close()  # flushes the grouped acks
        client.close()
        proc.stop()
        proc.start()
        client = pulsar.Client(
            proc.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        # the recovered subscription takes the type of its next consumer
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover)
        assert texts(drain(consumer, idle_ms=1000)) == sent[0::2]
        client.close()
    finally:
        proc.stop()
