"""Produce and consume with the official client: the end-to-end path through broker core,
managed ledger and subscriptions (the subscription semantics have their own suites)."""

from __future__ import annotations

import pulsar


def test_produce_consume_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=True)
    sent = [f"message-{i}".encode() for i in range(500)]
    for payload in sent:
        producer.send_async(payload, None)
    producer.flush()
    got = []
    for _ in sent:
        msg = consumer.receive(timeout_millis=10_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == sent


def test_payload_bytes_are_untouched(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, compression_type=pulsar.CompressionType.LZ4)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    payloads = [bytes(range(256)) * 40, b"", b"\x00" * 10_000, "unicode ✓".encode()]
    props = {"k": "v", "n": "1"}
    for p in payloads:
        producer.send(p, properties=props, partition_key="key")
    for p in payloads:
        msg = reader.read_next(timeout_millis=10_000)
        assert msg.data() == p
        assert msg.properties() == props
        assert msg.partition_key() == "key"


def test_chunked_message_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * (12 * 1024 * 1024 // 256)  # 12 MiB: three chunks
    producer.send(big)
    producer.send(b"after")
    msg = consumer.receive(timeout_millis=20_000)
    assert msg.data() == big
    consumer.acknowledge(msg)
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
