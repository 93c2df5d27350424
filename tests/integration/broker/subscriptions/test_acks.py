"""Individual, cumulative and batch-index acknowledgements survive a reconnect."""

from __future__ import annotations

import pulsar

from tests.integration.broker.subscriptions.helpers import drain, publish, receive, texts

EARLIEST = pulsar.InitialPosition.Earliest


def test_individual_acks_only_unacked_come_back(client: pulsar.Client, topic: str) -> None:
    sent = [f"m{i}" for i in range(10)]
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, sent)
    for i, m in enumerate(receive(consumer, 10)):
        if i % 2 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "s")
    assert texts(drain(consumer)) == sent[1::2]


def test_cumulative_ack(client: pulsar.Client, topic: str) -> None:
    sent = [f"m{i}" for i in range(10)]
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, sent)
    got = receive(consumer, 10)
    consumer.acknowledge_cumulative(got[5])
    consumer.close()
    consumer = client.subscribe(topic, "s")
    assert texts(drain(consumer)) == sent[6:]


def test_cumulative_ack_is_refused_on_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    publish(client, topic, ["x"])
    m = consumer.receive(5000)
    try:
        consumer.acknowledge_cumulative(m)
    except pulsar.CumulativeAcknowledgementNotAllowedError:
        pass  # the client refuses it itself, as the broker would
    consumer.close()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    assert texts(drain(consumer)) == ["x"]


def test_batch_index_acks(client: pulsar.Client, topic: str) -> None:
    sent = [f"m{i}" for i in range(10)]
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST, batch_index_ack_enabled=True)
    ids = publish(client, topic, sent, batch=True, batching_max_messages=100)
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 1, "expected one batch entry"
    got = receive(consumer, 10)
    for i, m in enumerate(got):
        if i % 3 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "s", batch_index_ack_enabled=True)
    # only the unacknowledged messages of the batch come back
    again = drain(consumer)
    assert texts(again) == [s for i, s in enumerate(sent) if i % 3 != 0]
    for m in again:
        consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "s", batch_index_ack_enabled=True)
    assert drain(consumer) == []


def test_whole_batch_acked_message_by_message(client: pulsar.Client, topic: str) -> None:
    sent = [f"m{i}" for i in range(8)]
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    publish(client, topic, sent, batch=True, batching_max_messages=100)
    for m in receive(consumer, 8):
        consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "s")
    assert drain(consumer) == []
