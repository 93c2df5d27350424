"""Writing Spark rows to a topic: ``value`` becomes the payload, ``key`` (or the column named
by ``keyColumn``) the partition key (a partitioned sink routes by it), ``properties`` the
message properties, ``eventTime`` the event time and ``sequenceId`` the sequence id. Each
write task publishes through its own producer of the official client, configured by the
producer options (``compressionType``, ``batchingEnabled``, ``batchingMaxMessages``,
``batchingMaxPublishDelayMs``, ``messageRoutingMode``, ``producerName``), and reports success
only when every message is acknowledged. A write takes the options of a read too (one set of
connection options for both; see ``options.WRITE_OPTION_NAMES``).

A batch write with ``producerName`` names each task's producer ``<producerName>-<Spark
partition>``; with a ``sequenceId`` column and deduplication on the topic, a retried task's
rows that were already stored are dropped by the broker.

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
from typing import Any, Final

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

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
KEY_COLUMN = "key"
SEQUENCE_ID_COLUMN = "sequenceId"
COMPRESSION_TYPES: Final = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
"""Pulsar's ``CompressionType`` names."""
ROUTING_MODES: Final = ("RoundRobinPartition", "SinglePartition")
"""Pulsar's ``MessageRoutingMode`` names (CustomPartition needs a Java class): how messages
without a key are spread over a partitioned topic's partitions; a message with a key goes to
the partition of its key's hash in both."""


@dataclass(frozen=True)
class ProducerSettings:
    """The producer options of a write, checked on the driver."""

    compression: str = "NONE"
    batching: bool = True
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    routing: str = "RoundRobinPartition"
    key_column: str = KEY_COLUMN
    producer_name: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ProducerSettings:
        def option(name: str) -> str | None:
            value = options.get(name.lower())
            return value.strip() if value is not None and value.strip() else None

        compression = (option("compressionType") or "NONE").upper()
        if compression not in COMPRESSION_TYPES:
            raise MagnetarSourceError(
                f"option compressionType must be one of {', '.join(COMPRESSION_TYPES)}, "
                f"not {option('compressionType')!r}"
            )
        routing = option("messageRoutingMode") or "RoundRobinPartition"
        by_lower = {m.lower(): m for m in ROUTING_MODES}
        if routing.lower() not in by_lower:
            raise MagnetarSourceError(
                f"option messageRoutingMode must be {' or '.join(ROUTING_MODES)}, not {routing!r}"
            )
        batching = opts.boolean(options, "batchingEnabled", default=not streaming)
        if streaming and batching:
            raise MagnetarSourceError(
                "option batchingEnabled=true: the streaming sink sends one message per entry "
                "(its exactly-once numbering needs each message deduplicated on its own)"
            )
        name = option("producerName")
        if streaming and name is not None:
            raise MagnetarSourceError(
                "option producerName: the streaming sink names its producers after the query "
                "(spark-<query id>-<partition>) for its exactly-once numbering"
            )
        return cls(
            compression=compression,
            batching=batching,
            batching_max_messages=opts.positive_int(options, "batchingMaxMessages") or 1000,
            batching_max_publish_delay_ms=(
                opts.positive_int(options, "batchingMaxPublishDelayMs") or 10
            ),
            routing=by_lower[routing.lower()],
            key_column=option("keyColumn") or KEY_COLUMN,
            producer_name=name,
        )

    def official_producer_options(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client.create_producer`` for these settings."""
        import pulsar

        compression = {"ZLIB": "ZLib"}.get(self.compression, self.compression)
        routing = {
            "RoundRobinPartition": pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            "SinglePartition": pulsar.PartitionsRoutingMode.UseSinglePartition,
        }[self.routing]
        return {
            "compression_type": getattr(pulsar.CompressionType, compression),
            "batching_enabled": self.batching,
            "batching_max_messages": self.batching_max_messages,
            "batching_max_publish_delay_ms": self.batching_max_publish_delay_ms,
            "message_routing_mode": routing,
        }


@dataclass
class Written(WriterCommitMessage):
    rows: int


@dataclass(frozen=True)
class SinkSettings:
    service_url: str
    topic: str
    access: Access
    producer: ProducerSettings

    @classmethod
    def parse(
        cls, options: Mapping[str, str], schema: StructType, *, streaming: bool = False
    ) -> SinkSettings:
        opts.check_known(
            options,
            opts.WRITE_OPTION_NAMES + opts.PRODUCER_OPTION_NAMES + ACCESS_OPTION_NAMES,
            what="writes",
        )
        service = opts.service_url(options)
        if not options.get("topic"):
            raise MagnetarSourceError(
                "option topic is required for writes (topics and topicsPattern are for reads)"
            )
        topic = opts.full_topic_name(options["topic"])
        opts.admin_url(options, required=False)  # checked; a write does not need it
        producer = ProducerSettings.parse(options, streaming=streaming)
        _check_columns(schema, key_column=producer.key_column, streaming=streaming)
        security = Access.parse(options)
        check_service(service, security)
        return cls(service, topic, security, producer)


def _check_columns(schema: StructType, *, key_column: str, streaming: bool) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise MagnetarSourceError("the rows to write need a value column (binary or string)")
    if key_column != KEY_COLUMN and key_column not in fields:
        raise MagnetarSourceError(
            f"option keyColumn names {key_column!r}, which the rows do not have "
            f"(columns: {', '.join(fields)})"
        )
    if streaming and SEQUENCE_ID_COLUMN in fields:
        raise MagnetarSourceError(
            "column sequenceId: the streaming sink numbers its messages itself "
            "(batch id and row position, for exactly-once); drop the column"
        )
    wanted = {
        "value": (BinaryType, StringType),
        key_column: (StringType,),
        "eventTime": (TimestampType,),
        "properties": (MapType,),
        SEQUENCE_ID_COLUMN: (LongType, IntegerType),
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
            f"(the sink takes {key_column}, value, properties, eventTime, sequenceId)"
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


def _message(row: Row, *, key_column: str = KEY_COLUMN) -> tuple[bytes, dict[str, Any]]:
    fields = row.asDict()
    value = fields["value"]
    content = value.encode() if isinstance(value, str) else bytes(value or b"")
    kwargs: dict[str, Any] = {}
    if fields.get(key_column) is not None:
        kwargs["partition_key"] = fields[key_column]
    sequence_id = fields.get(SEQUENCE_ID_COLUMN)
    if sequence_id is not None:
        if sequence_id < 1:
            # the official Python client takes 0 as "none" and numbers the message itself
            raise MagnetarSourceError(
                f"column sequenceId: {sequence_id} is not a sequence id the sink can send "
                "(they start at 1)"
            )
        kwargs["sequence_id"] = int(sequence_id)
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
        exactly_once = first_sequence_id is not None
        try:
            producer = client.create_producer(
                settings.topic,
                producer_name=producer_name,
                **settings.producer.official_producer_options(),
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
            content, kwargs = _message(row, key_column=settings.producer.key_column)
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
        name = self.settings.producer.producer_name
        if name is not None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            assert ctx is not None, "a write runs in a Spark task"
            name = f"{name}-{ctx.partitionId()}"
        return Written(_publish(self.settings, iterator, producer_name=name))


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("magnetar")``: exactly-once with broker deduplication."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = SinkSettings.parse(options, schema, streaming=True)

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
