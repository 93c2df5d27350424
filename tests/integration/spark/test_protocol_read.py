"""The protocol read path (``magnetar.spark.protocol_read``, the default ``readPath``) against
a real standalone, without Spark: the same ranges read by it and by the official client's
loop (``read.read_range``) give equal Arrow batches -- batched and non-batched entries, keys,
properties, event times, a start and an end inside a batch, partitions, every compression
codec; its message ids are the official client's bytes; a chunked message hands over to the
client's loop; it reads through a proxy and across a topic unload; a refused topic and a
range that never completes fail naming the problem."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pytest

from magnetar.spark import protocol_read
from magnetar.spark.admin import Admin
from magnetar.spark.options import BEFORE_ALL, MagnetarSourceError, Position
from magnetar.spark.read import Range, read_range
from tests.integration.spark.conftest import admin_call, create_topic, make_namespace
from tests.support.proxy import ProxyProc
from tests.support.standalone import StandaloneProc

NS = "public/spark-protocol"


def _protocol(service_url: str, r: Range, poll_timeout_ms: int = 30_000) -> list[Any]:
    def client_from(after: Position) -> Iterator[Any]:
        rest = Range(r.topic, after, Position.parse(r.until))
        return read_range(service_url, rest, poll_timeout_ms=poll_timeout_ms)

    return list(
        protocol_read.read_range(
            service_url, r, poll_timeout_ms=poll_timeout_ms, fallback=client_from
        )
    )


def _same(
    service_url: str, r: Range, *, reference: str | None = None, batchwise: bool = True
) -> list[Any]:
    """Read ``r`` both ways (the client's loop on ``reference`` when given); the batches
    must be equal, batch for batch (``batchwise=False``: the rows, where the protocol loop
    handed over to the client's loop and so ended a batch early)."""
    ours = _protocol(service_url, r)
    theirs = list(read_range(reference or service_url, r, poll_timeout_ms=30_000))
    if not batchwise:
        ours, theirs = [pa.Table.from_batches(ours)], [pa.Table.from_batches(theirs)]
    assert [b.num_rows for b in ours] == [b.num_rows for b in theirs]
    for mine, client in zip(ours, theirs, strict=True):
        if not mine.equals(client):  # a readable difference first
            assert mine.to_pylist() == client.to_pylist()
        assert mine.equals(client)
    return ours


def _rows(batches: list[Any]) -> list[dict[str, Any]]:
    return [row for b in batches for row in b.to_pylist()]


def _produce_mixed(client: pulsar.Client, topic: str, **producer_args: Any) -> list[Any]:
    """Batched entries of 10, then messages stored alone, then batches again; keys,
    properties (several, in no particular order) and event times on some messages."""
    ids: list[Any] = []

    def send(producer: Any, i: int, *, sync: bool) -> None:
        kwargs: dict[str, Any] = {}
        if i % 3:
            kwargs["partition_key"] = f"k{i % 4}"
        if i % 2:
            kwargs["properties"] = {"z": str(i), "a": "first", "m": "x" * (i % 5)}
        if i % 5:
            kwargs["event_timestamp"] = 1_700_000_000_000 + i
        payload = f"value-{i}".encode() * (1 + i % 7)
        if sync:
            ids.append(producer.send(payload, **kwargs))
        else:
            producer.send_async(payload, lambda res, mid: ids.append(mid), **kwargs)

    batched = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=60_000,  # entries close at 10 messages
        **producer_args,
    )
    for i in range(40):
        send(batched, i, sync=False)
    batched.flush()
    alone = client.create_producer(topic, batching_enabled=False, **producer_args)
    for i in range(40, 46):
        send(alone, i, sync=True)
    for i in range(46, 71):
        send(batched, i, sync=False)
    batched.flush()
    batched.close()
    alone.close()
    assert len(ids) == 71
    return ids


def _new_topic(standalone: StandaloneProc, name: str, partitions: int = 0) -> str:
    make_namespace(standalone, NS)
    create_topic(standalone, f"{NS}/{name}", partitions)
    return f"persistent://{NS}/{name}"


def _mixed_topic(
    standalone: StandaloneProc, client: pulsar.Client, name: str, **producer_args: Any
) -> tuple[str, list[Any], Position]:
    """A new topic of ``NS`` holding ``_produce_mixed``'s messages: its name, their ids and
    its last message id."""
    topic = _new_topic(standalone, name)
    ids = _produce_mixed(client, topic, **producer_args)
    last = Admin.at(standalone.http_url).state(topic).last
    assert last is not None
    return topic, ids, last


def _at(mid: Any, shift: int = 0) -> Position:
    return Position(mid.ledger_id(), mid.entry_id(), mid.batch_index() + shift)


def test_the_same_rows_as_the_client_for_batched_and_single_messages_and_ranges_inside_batches(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    topic, ids, last = _mixed_topic(standalone, client, "mixed")
    url = standalone.service_url

    rows = _rows(_same(url, Range(topic, BEFORE_ALL, last)))
    assert len(rows) == 71
    assert [r["value"] for r in rows] == [f"value-{i}".encode() * (1 + i % 7) for i in range(71)]
    assert rows[1]["properties"] == [("a", "first"), ("m", "x"), ("z", "1")]  # ordered by key
    assert rows[0]["key"] is None and rows[0]["properties"] == [] and rows[0]["eventTime"] is None
    assert ids[3].batch_index() == 3 and ids[40].batch_index() == -1  # batched, then alone

    # a start inside a batch (after its 4th message), an end inside another (its 7th)
    got = _rows(_same(url, Range(topic, _at(ids[3]), _at(ids[26]))))
    assert [r["value"] for r in got] == [rows[i]["value"] for i in range(4, 27)]
    # from a message stored alone (inclusive: batch index - 1) to the middle of a batch
    got = _rows(_same(url, Range(topic, _at(ids[41], -1), _at(ids[50]))))
    assert [r["messageIdString"] for r in got] == [
        rows[i]["messageIdString"] for i in range(41, 51)
    ]
    # one message of a batch; the end exclusive at the start of a batch entry
    assert len(_rows(_same(url, Range(topic, _at(ids[12], -1), _at(ids[12]))))) == 1
    got = _rows(_same(url, Range(topic, _at(ids[30]), _at(ids[46], -1))))
    assert [r["value"] for r in got] == [rows[i]["value"] for i in range(31, 46)]


def test_message_ids_are_the_official_clients_bytes(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    topic = _new_topic(standalone, "ids", 2)
    ids = _produce_mixed(client, topic)
    admin = Admin.at(standalone.http_url)
    seen = 0
    for p in range(2):
        partition = f"{topic}-partition-{p}"
        last = admin.state(partition).last
        if last is None:
            continue
        rows = _rows(_same(standalone.service_url, Range(partition, BEFORE_ALL, last)))
        seen += len(rows)
        for row in rows:
            raw = bytes(row["messageId"])
            mid = pulsar.MessageId.deserialize(raw)
            ledger, entry, batch, index = (int(x) for x in row["messageIdString"].split(":"))
            assert (mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.partition()) == (
                ledger,
                entry,
                batch,
                p,
            )
            assert index == p and row["partition"] == p and row["topic"] == topic
            # the client's own serialisation of the id it reads back: the same bytes
            assert mid.serialize() == raw
            if batch < 0:  # an id the client builds from its parts, for a message alone
                assert pulsar.MessageId(p, ledger, entry, -1).serialize() == raw
    assert seen == len(ids)


@pytest.mark.parametrize("codec", ["LZ4", "ZLib", "ZSTD", "SNAPPY"])
def test_compressed_topics_give_the_same_rows(
    standalone: StandaloneProc, client: pulsar.Client, codec: str
) -> None:
    compression = getattr(pulsar.CompressionType, codec)
    topic, ids, last = _mixed_topic(
        standalone, client, f"compressed-{codec.lower()}", compression_type=compression
    )
    assert len(_rows(_same(standalone.service_url, Range(topic, BEFORE_ALL, last)))) == len(ids)
    _same(standalone.service_url, Range(topic, _at(ids[5]), _at(ids[52])))


def test_a_chunked_message_is_read_by_the_client_loop_from_there_on(
    standalone: StandaloneProc, client: pulsar.Client, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _new_topic(standalone, "chunked")
    plain = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        plain.send(f"before-{i}".encode(), properties={"i": str(i)})
    chunky = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = os.urandom(6 * 1024 * 1024)  # above the broker's 5 MiB: two chunks
    chunky.send(big, partition_key="big")
    for i in range(3):
        plain.send(f"after-{i}".encode())
    plain.close()
    chunky.close()
    last = Admin.at(standalone.http_url).state(topic).last
    assert last is not None

    with caplog.at_level(logging.WARNING, logger=protocol_read.__name__):
        rows = _rows(_same(standalone.service_url, Range(topic, BEFORE_ALL, last), batchwise=False))
    assert [r["value"] for r in rows] == [
        *(f"before-{i}".encode() for i in range(5)),
        big,
        *(f"after-{i}".encode() for i in range(3)),
    ]
    assert "chunk of a larger message" in caplog.text


@pytest.fixture(scope="module")
def proxy(standalone: StandaloneProc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    proc = ProxyProc(
        tmp_path_factory.mktemp("proxy"),
        args=[
            "--broker-service-url", standalone.service_url,
            "--broker-web-service-url", standalone.http_url,
        ],
    ).start()  # fmt: skip
    try:
        yield proc
    finally:
        proc.stop()


def test_reading_through_a_proxy(
    standalone: StandaloneProc, client: pulsar.Client, proxy: ProxyProc
) -> None:
    topic, ids, last = _mixed_topic(standalone, client, "proxied")
    # the protocol loop through the proxy, the client's loop straight to the broker
    rows = _rows(
        _same(proxy.service_url, Range(topic, BEFORE_ALL, last), reference=standalone.service_url)
    )
    assert len(rows) == len(ids)


def test_a_topic_unloaded_during_the_read_is_read_on_after_subscribing_again(
    standalone: StandaloneProc, client: pulsar.Client, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _new_topic(standalone, "unloaded")
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=100, block_if_queue_full=True
    )
    n = 3 * protocol_read.PERMITS  # more than the broker sends before the next FLOW
    for i in range(n):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    producer.close()
    last = Admin.at(standalone.http_url).state(topic).last
    assert last is not None

    with caplog.at_level(logging.INFO, logger=protocol_read.__name__):
        batches = protocol_read.read_range(
            standalone.service_url,
            Range(topic, BEFORE_ALL, last),
            poll_timeout_ms=30_000,
            fallback=lambda after: pytest.fail(f"fell back after {after}"),
        )
        first = next(batches)  # subscribed and reading: now the broker lets the topic go
        admin_call(standalone.http_url, "PUT", f"/persistent/{NS}/unloaded/unload")
        rest = list(batches)
    values = [bytes(v) for b in [first, *rest] for v in b.column("value").to_pylist()]
    assert values == [str(i).encode() for i in range(n)]
    assert "subscribing again" in caplog.text


def test_a_refused_topic_and_an_incomplete_range_fail_naming_the_problem(
    standalone: StandaloneProc, client: pulsar.Client, tmp_path: Path
) -> None:
    missing = "persistent://no-such-tenant/no-ns/t"
    with pytest.raises(MagnetarSourceError, match=r"reading persistent://no-such-tenant.*refused"):
        _protocol(standalone.service_url, Range(missing, BEFORE_ALL, Position(5, 5, -1)))

    topic = _new_topic(standalone, "short")
    producer = client.create_producer(topic, batching_enabled=False)
    mid = producer.send(b"only")
    producer.close()
    beyond = Position(mid.ledger_id(), mid.entry_id() + 3, -1)  # never written
    with pytest.raises(MagnetarSourceError, match="no message within pollTimeoutMs=700"):
        _protocol(standalone.service_url, Range(topic, BEFORE_ALL, beyond), poll_timeout_ms=700)
