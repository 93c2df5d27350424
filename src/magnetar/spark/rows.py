"""What both executor read loops share: the row schema, the input partition a task reads
(``Range``), and the Arrow record batch being filled (``Columns``).

Why a module of its own: there are two read loops (``read.read_range`` on the official
client's Reader, ``protocol_read`` on the Pulsar protocol with the project's codec) and they
must produce the same rows, batch for batch; keeping the conversion to Arrow in one place
is what makes that hold."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.spark.options import Position

SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("messageId", BinaryType()),
        StructField("messageIdString", StringType()),
        StructField("publishTime", TimestampType()),
        StructField("eventTime", TimestampType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("producerName", StringType()),
    ]
)
ARROW_BATCH_ROWS = 4096
"""Rows per Arrow record batch handed to Spark (tuples would be converted one by one)."""

_PARTITION_SUFFIX = "-partition-"


class Range(InputPartition):
    """One Spark input partition: the messages of ``topic`` in ``(after, until]``."""

    def __init__(self, topic: str, after: Position, until: Position) -> None:
        super().__init__((topic, after.text(), until.text()))
        self.topic = topic
        self.after = after.text()
        self.until = until.text()


def parent_and_index(partition: str) -> tuple[str, int]:
    base, sep, index = partition.rpartition(_PARTITION_SUFFIX)
    if sep and index.isdigit():
        return base, int(index)
    return partition, -1


def arrow_schema() -> Any:
    """``SCHEMA`` as the Arrow schema Spark's Python worker expects of a reader's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


def poll_timeout_message(topic: str, after: Position, until: str, poll_timeout_ms: int) -> str:
    """The task's error when the next message of its range did not come in time."""
    return (
        f"reading {topic} from after {after.text()} to {until}: no message within "
        f"pollTimeoutMs={poll_timeout_ms} (was the data removed?)"
    )


class Columns:
    """One Arrow record batch of ``SCHEMA`` being filled: a plain list per column that the
    read loop appends to, converted column by column (no per-row tuples, no transpose).
    What a stored entry's messages share (ledger, entry, publish time, producer) is kept once
    per entry, with the row the entry starts at, and repeated per row by the conversion."""

    def __init__(self, parent: str, index: int) -> None:
        self.parent, self.index = parent, index
        self.keys: list[str | None] = []
        self.values: list[bytes] = []
        self.ids: list[bytes] = []
        self.batches: list[int] = []
        self.events: list[int] = []
        self.properties: list[Any] = []
        self.starts: list[int] = []  # per entry: its first row, ledger, entry, time, producer
        self.ledgers: list[int] = []
        self.entries: list[int] = []
        self.published: list[int] = []
        self.producers: list[str] = []

    def appenders(self) -> tuple[Callable[[Any], None], ...]:
        """The per-row columns' ``append`` methods, for the read loop to hold."""
        return (
            self.keys.append,
            self.values.append,
            self.ids.append,
            self.batches.append,
            self.events.append,
            self.properties.append,
        )

    def start_entry(self, ledger: int, entry: int, published: int, producer: str) -> None:
        self.starts.append(len(self.values))
        self.ledgers.append(ledger)
        self.entries.append(entry)
        self.published.append(published)
        self.producers.append(producer)

    def split(self, rows: int) -> Columns:
        """Keep the first ``rows`` rows here; the others move to the returned ``Columns``
        (an entry cut in two is recorded in both)."""
        rest = Columns(self.parent, self.index)
        for name in ("keys", "values", "ids", "batches", "events", "properties"):
            column = getattr(self, name)
            setattr(rest, name, column[rows:])
            del column[rows:]
        starts = self.starts
        cut = bisect_right(starts, rows - 1)  # entries starting in the first part
        # the last of them goes on in the rest unless the rest starts with an entry
        spans = bool(cut and rest.values) and (cut == len(starts) or starts[cut] > rows)
        first = cut - 1 if spans else cut
        for name in ("ledgers", "entries", "published", "producers"):
            column = getattr(self, name)
            setattr(rest, name, column[first:])
            del column[cut:]
        rest.starts = [max(0, start - rows) for start in self.starts[first:]]
        del self.starts[cut:]
        return rest

    def batch(self, schema: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.values)
        ends = [*self.starts[1:], n]
        rows = pa.array(  # per row: the entry it belongs to
            chain.from_iterable(
                repeat(i, end - start)
                for i, (start, end) in enumerate(zip(self.starts, ends, strict=True))
            ),
            pa.int32(),
        )

        def per_row(values: list[Any], kind: Any) -> Any:
            return pa.array(values, kind).take(rows)

        pairs = zip(self.ledgers, self.entries, strict=True)
        entries = per_row([f"{lg}:{e}" for lg, e in pairs], pa.string())
        batches = pc.cast(pa.array(self.batches, pa.int64()), pa.string())
        columns = [
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.parent, pa.string()), n),
            pa.repeat(pa.scalar(self.index, pa.int32()), n),
            pa.array(self.ids, pa.binary()),
            pc.binary_join_element_wise(entries, batches, str(self.index), ":"),
            timestamps(per_row(self.published, pa.int64()), schema.field("publishTime").type),
            timestamps(pa.array(self.events, pa.int64()), schema.field("eventTime").type),
            pa.array(self.properties, schema.field("properties").type),
            per_row(self.producers, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def timestamps(ms: Any, kind: Any) -> Any:
    """Client times (an int64 array of milliseconds, 0 for none) as a timestamp column
    (microseconds, null for none)."""
    import pyarrow.compute as pc

    micros = pc.if_else(pc.greater(ms, 0), pc.multiply(ms, 1000), None)
    return micros.cast(kind)
