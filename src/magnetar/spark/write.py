"""Writing Spark rows to a topic: ``value`` becomes the payload, ``key`` the partition key
(a partitioned sink routes by it), ``properties`` the message properties and ``eventTime``
the event time. Each write task publishes through its own producer of the official client
and reports success only when every message is acknowledged.

The streaming sink is exactly-once with the broker's deduplication: each write task's
producer is named after the query id and the Spark partition, and each message's sequence id
is ``batch id << 32 | (row position + 1)`` -- a micro-batch replayed after a failure (same batch
id, same rows in the same order, as the magnetar source plans them) carries sequence ids the
broker has already stored, and the broker drops them. Without ``deduplicationEnabled`` on the
sink's namespace or topic the sink is at-least-once."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType, TimestampType

from magnetar.spark import options as opts
from magnetar.spark.access import ALL_NAMES as ACCESS_OPTION_NAMES
from magnetar.spark.access import Access
from magnetar.spark.admin import check_service
from magnetar.spark.options import MagnetarSourceError

SOURCE_COLUMNS = frozenset(
    {"topic", "partition", "messageId", "messageIdString", "publishTime", "producerName"}
)
"""Columns of the source's rows the sink ignores, so a read can be written back unchanged."""

_ROW_BITS = 32
SEND_TIMEOUT_S = 120.0


@dataclass
class Written(WriterCommitMessage):
    rows: int


@dataclass(frozen=True)
class SinkSettings:
    service_url: str
    topic: str
    access: Access

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkSettings:
        opts.check_known(options, opts.WRITE_OPTION_NAMES + ACCESS_OPTION_NAMES, what="writes")
        service = opts.service_url(options)
        if not options.get("topic"):
            raise MagnetarSourceError("option topic is required for writes")
        topic = opts.full_topic_name(options["topic"])
        _check_columns(schema)
        security = Access.parse(options)
        check_service(service, security)
        return cls(service, topic, security)


def _check_columns(schema: StructType) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise MagnetarSourceError("the rows to write need a value column (binary or string)")
    wanted = {
        "value": (BinaryType, StringType),
        "key": (StringType,),
        "eventTime": (TimestampType,),
        "properties": (MapType,),
    }
    for name, kinds in wanted.items():
        if name in fields and not isinstance(fields[name], kinds):
            raise MagnetarSourceError(
                f"column {name} has type {fields[name].simpleString()}; "
                f"expected {' or '.join(k.typeName() for k in kinds)}"
            )
    unused = sorted(set(fields) - set(wanted) - SOURCE_COLUMNS)
    if unused:
        raise MagnetarSourceError(
            f"column(s) {', '.join(unused)} have no place in a message "
            "(the sink takes key, value, properties, eventTime)"
        )


class _Sender:
    """Send asynchronously, remember the first failure, wait for every receipt."""

    def __init__(self) -> None:
        self.pending = 0
        self.failure: str | None = None
        self.cond = threading.Condition()

    def callback(self, result: Any, _msg_id: Any) -> None:
        import pulsar

        with self.cond:
            self.pending -= 1
            if result != pulsar.Result.Ok and self.failure is None:
                self.failure = str(result)
            self.cond.notify_all()

    def sent(self) -> None:
        with self.cond:
            self.pending += 1

    def wait(self, topic: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.pending == 0, timeout=SEND_TIMEOUT_S):
                raise MagnetarSourceError(f"{self.pending} sends to {topic} unanswered")
            if self.failure is not None:
                raise MagnetarSourceError(f"sending to {topic} failed: {self.failure}")


def _message(row: Row) -> tuple[bytes, dict[str, Any]]:
    fields = row.asDict()
    value = fields["value"]
    content = value.encode() if isinstance(value, str) else bytes(value or b"")
    kwargs: dict[str, Any] = {}
    if fields.get("key") is not None:
        kwargs["partition_key"] = fields["key"]
    if fields.get("properties"):
        kwargs["properties"] = {str(k): str(v) for k, v in fields["properties"].items()}
    when = fields.get("eventTime")
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            when = when.astimezone()
        kwargs["event_timestamp"] = int(when.timestamp() * 1000)
    return content, kwargs


def _publish(
    settings: SinkSettings,
    rows: Iterator[Row],
    *,
    producer_name: str | None = None,
    first_sequence_id: int | None = None,
) -> int:
    import pulsar

    client = pulsar.Client(
        settings.service_url,
        **settings.access.official_client_options(),
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        exactly_once = producer_name is not None
        try:
            producer = client.create_producer(
                settings.topic,
                producer_name=producer_name,
                batching_enabled=not exactly_once,
                block_if_queue_full=True,
                max_pending_messages=5000,
                send_timeout_millis=0 if exactly_once else 30_000,
            )
        except pulsar.PulsarException as err:  # AuthorizationError, TopicNotFound, ...
            raise MagnetarSourceError(
                f"writing to {settings.topic}: the broker refused the producer: "
                f"{type(err).__name__}: {err}"
            ) from None
        sender = _Sender()
        n = 0
        for row in rows:
            content, kwargs = _message(row)
            if first_sequence_id is not None:
                kwargs["sequence_id"] = first_sequence_id + n
            sender.sent()
            producer.send_async(content, sender.callback, **kwargs)
            n += 1
        producer.flush()
        sender.wait(settings.topic)
        producer.close()
        return n
    finally:
        client.close()


class BatchWriter(DataSourceWriter):
    """``df.write.format("magnetar")``: each task publishes its rows."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = SinkSettings.parse(options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return Written(_publish(self.settings, iterator))


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("magnetar")``: exactly-once with broker deduplication."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = SinkSettings.parse(options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None, "a stream write runs in a Spark task"
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        if query_id is None or batch_id is None:
            raise MagnetarSourceError("the streaming sink runs outside a micro-batch query")
        name = f"spark-{query_id}-{ctx.partitionId()}"
        # + 1: the official Python client ignores sequence_id=0 (it tests the value for
        # truth) and numbers such a message itself, so no row may get sequence id 0
        first = (int(batch_id) << _ROW_BITS) + 1
        return Written(
            _publish(self.settings, iterator, producer_name=name, first_sequence_id=first)
        )
