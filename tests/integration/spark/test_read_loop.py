"""The executors' read loops (``magnetar.spark.read.read_range`` on the official client,
``magnetar.spark.protocol_read.read_range`` on the protocol) run directly against a real
standalone, without Spark: a range longer than one Arrow batch, whose batch boundary falls
inside a stored entry and whose messages span several ledgers, comes back complete, in
order, once each, with every column filled from its own message or entry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.spark import protocol_read
from magnetar.spark.admin import Admin
from magnetar.spark.options import BEFORE_ALL
from magnetar.spark.read import ARROW_BATCH_ROWS, Range, read_range
from tests.integration.spark.conftest import create_topic, make_namespace
from tests.support.standalone import StandaloneProc

NS = "public/spark-loop"
PER_ENTRY = 100
N = ARROW_BATCH_ROWS + 904  # the boundary at row 4,096 falls inside entry 40 (rows 4000-4099)


def _no_fallback(after: Any) -> Iterator[Any]:
    raise AssertionError(f"the protocol loop handed over to the client after {after}")


@pytest.mark.parametrize("path", ["client", "protocol"])
def test_a_range_longer_than_one_arrow_batch_reads_every_message_once_with_its_columns(
    standalone: StandaloneProc, client: pulsar.Client, path: str
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/long-{path}"
    create_topic(standalone, f"{NS}/long-{path}")
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=PER_ENTRY,
        batching_max_publish_delay_ms=60_000,  # entries close at PER_ENTRY messages only
        block_if_queue_full=True,
        max_pending_messages=PER_ENTRY * 4,
    )
    sent: list[Any] = []
    for i in range(N):
        producer.send_async(
            f"v{i}".encode(),
            lambda res, mid: sent.append(mid),
            partition_key=f"k{i}",
            properties={"i": str(i)} if i % 2 else {},
            event_timestamp=1_700_000_000_000 + i if i % 3 else 0,
        )
    producer.flush()
    name = producer.producer_name()
    producer.close()
    assert len(sent) == N

    last = Admin.at(standalone.http_url).state(topic).last
    assert last is not None
    r = Range(topic, BEFORE_ALL, last)
    if path == "client":
        batches = list(read_range(standalone.service_url, r, poll_timeout_ms=30_000))
    else:
        batches = list(
            protocol_read.read_range(
                standalone.service_url, r, poll_timeout_ms=30_000, fallback=_no_fallback
            )
        )
    assert [b.num_rows for b in batches] == [ARROW_BATCH_ROWS, N - ARROW_BATCH_ROWS]
    rows = [row for b in batches for row in b.to_pylist()]

    assert [bytes(r["value"]) for r in rows] == [f"v{i}".encode() for i in range(N)]
    ids = [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in sent]
    assert [r["messageIdString"] for r in rows] == [f"{lg}:{e}:{b}:-1" for lg, e, b in ids]
    assert len({(lg, e) for lg, e, _ in ids}) == N // PER_ENTRY  # whole entries of 100
    assert len({lg for lg, _, _ in ids}) > 1  # more than one ledger
    assert ids[ARROW_BATCH_ROWS - 1][:2] == ids[ARROW_BATCH_ROWS][:2]  # an entry split
    for i, r in enumerate(rows):
        mid = pulsar.MessageId.deserialize(bytes(r["messageId"]))
        assert (mid.ledger_id(), mid.entry_id(), mid.batch_index()) == ids[i]
        assert (r["key"], r["topic"], r["partition"], r["producerName"]) == (
            f"k{i}",
            topic,
            -1,
            name,
        )
        assert r["publishTime"] is not None
        assert dict(r["properties"]) == ({"i": str(i)} if i % 2 else {})
        event = r["eventTime"]
        if i % 3:
            assert event is not None and int(event.timestamp() * 1000) == 1_700_000_000_000 + i
        else:
            assert event is None
