"""What both executor read loops share: the row schema, the input partition a task reads
(``Range``), and the Arrow record batch being filled (``Columns``).

Why a module of its own: there are two read loops (``read.read_range`` on the official
client's Reader, ``protocol_read`` on the Pulsar protocol with the project's codec) and they
must produce the same rows, batch for batch; keeping the conversion to Arrow in one place
is what makes that hold."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.spark.options import Position
from magnetar.spark.values import VERSION_COLUMN

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
_SUFFIXES: dict[int, Any] = {}
"""Per partition index: ``batchIndex:partition`` strings by batch index + 1 (``Columns``)."""


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


def arrow_schema(*, versions: bool = False) -> Any:
    """``SCHEMA`` as the Arrow schema Spark's Python worker expects of a reader's batches;
    with ``versions``, and the per-row schema version ``VERSION_COLUMN`` that
    ``values.Decoder`` decodes by (and removes)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    return schema.append(pa.field(VERSION_COLUMN, pa.int64())) if versions else schema


def spark_schema(value_type: DataType | None) -> StructType:
    """``SCHEMA``, with ``value`` of ``value_type`` when the values are decoded."""
    if value_type is None:
        return SCHEMA
    return StructType(
        [StructField("value", value_type) if f.name == "value" else f for f in SCHEMA.fields]
    )


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
    per entry, with the row the entry starts at, and repeated per row by the conversion; so
    is its event time, which a message may override (``event_rows``).
    Values are not copied out one by one: the loop registers the buffer holding them
    (``add_chunk``: an entry's payload, or one message's data) and appends each value's start
    and end in it to ``bounds``; the conversion copies them into the column in one pass.
    Properties are kept for the rows that have any (most have none)."""

    def __init__(self, parent: str, index: int) -> None:
        self.parent, self.index = parent, index
        self.keys: list[str | None] = []
        self.ids: list[bytes] = []
        self.batches: list[int] = []
        self.chunks: list[bytes] = []  # buffers holding the values, each with its first row
        self.chunk_starts: list[int] = []
        self.bounds: list[int] = []  # per row: start, end of its value in its chunk
        self.property_rows: list[int] = []  # the rows with properties, and theirs
        self.properties: list[list[tuple[str, str]]] = []
        self.event_rows: list[int] = []  # the rows with an event time of their own, and it
        self.event_times: list[int] = []
        # per entry: its first row, ledger, entry, publish time, producer, event time
        self.starts: list[int] = []
        self.ledgers: list[int] = []
        self.entries: list[int] = []
        self.published: list[int] = []
        self.producers: list[str] = []
        self.entry_events: list[int] = []
        self.versions: list[int] = []

    @property
    def rows(self) -> int:
        return len(self.keys)

    def start_entry(
        self,
        ledger: int,
        entry: int,
        published: int,
        producer: str,
        event: int = 0,
        version: int = -1,
    ) -> None:
        """The rows appended next belong to this entry (``event``: its messages' event time
        unless they set their own, 0 for none; ``version``: its schema version, -1 for
        none)."""
        self.starts.append(len(self.keys))
        self.ledgers.append(ledger)
        self.entries.append(entry)
        self.published.append(published)
        self.producers.append(producer)
        self.entry_events.append(event)
        self.versions.append(version)

    def add_chunk(self, data: bytes) -> None:
        """``data`` holds the values of the rows appended next (``bounds`` index into it)."""
        self.chunk_starts.append(len(self.keys))
        self.chunks.append(data)

    def add_row(
        self, key: str | None, value: bytes, event: int, properties: list[tuple[str, str]]
    ) -> None:
        """One row whose value is a buffer of its own (the id columns are appended apart);
        ``event``: its event time, 0 for its entry's."""
        row = len(self.keys)
        self.chunk_starts.append(row)
        self.chunks.append(value)
        self.bounds += (0, len(value))
        self.keys.append(key)
        if event:
            self.event_rows.append(row)
            self.event_times.append(event)
        if properties:
            self.property_rows.append(row)
            self.properties.append(properties)

    def split(self, rows: int) -> Columns:
        """Keep the first ``rows`` rows here; the others move to the returned ``Columns``
        (an entry or a chunk cut in two is recorded in both)."""
        rest = Columns(self.parent, self.index)
        for name in ("keys", "ids", "batches"):
            column = getattr(self, name)
            setattr(rest, name, column[rows:])
            del column[rows:]
        rest.bounds = self.bounds[2 * rows :]
        del self.bounds[2 * rows :]
        for at, values in (("property_rows", "properties"), ("event_rows", "event_times")):
            marked, column = getattr(self, at), getattr(self, values)
            cut = bisect_right(marked, rows - 1)
            setattr(rest, at, [row - rows for row in marked[cut:]])
            setattr(rest, values, column[cut:])
            del marked[cut:], column[cut:]
        left = len(rest.keys)
        for starts, records in (
            (
                "starts",
                ("ledgers", "entries", "published", "producers", "entry_events", "versions"),
            ),
            ("chunk_starts", ("chunks",)),
        ):
            firsts = getattr(self, starts)
            cut = bisect_right(firsts, rows - 1)  # entries (chunks) starting in the first part
            # the last of them goes on in the rest unless the rest starts with one
            spans = bool(cut and left) and (cut == len(firsts) or firsts[cut] > rows)
            first = cut - 1 if spans else cut
            for name in records:
                column = getattr(self, name)
                setattr(rest, name, column[first:])
                del column[cut:]
            setattr(rest, starts, [max(0, start - rows) for start in firsts[first:]])
            del firsts[cut:]
        return rest

    def batch(self, schema: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.keys)
        rows = pa.array(  # per row: the entry it belongs to
            np.repeat(np.arange(len(self.starts), dtype=np.int32), np.diff(self.starts, append=n))
        )
        # what entries share is converted once per entry, then repeated per row
        published = entry_times(self.published, schema.field("publishTime").type)
        pairs = zip(self.ledgers, self.entries, strict=True)
        entries = pa.array([f"{lg}:{e}:" for lg, e in pairs], pa.string()).take(rows)
        columns = [
            pa.array(self.keys, pa.string()),
            self._values(n),
            pa.repeat(pa.scalar(self.parent, pa.string()), n),
            pa.repeat(pa.scalar(self.index, pa.int32()), n),
            pa.array(self.ids, pa.binary()),
            pc.binary_join_element_wise(entries, self._batch_and_partition(), ""),
            published.take(rows),
            self._events(rows, schema.field("eventTime").type),
            self._properties(n, schema.field("properties").type),
            pa.array(self.producers, pa.string()).take(rows),
        ]
        if schema.get_field_index(VERSION_COLUMN) >= 0:
            columns.append(pa.array(self.versions, pa.int64()).take(rows))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _batch_and_partition(self) -> Any:
        """Per row ``batchIndex:partition``, the end of its id string: taken from a table of
        them (kept per partition index, grown to the largest batch index seen)."""
        import numpy as np
        import pyarrow as pa

        batches = np.asarray(self.batches, np.int64) + 1  # (-1: a message stored alone)
        need = int(batches.max(initial=0)) + 1
        table = _SUFFIXES.get(self.index)
        if table is None or len(table) < need:
            size = max(need, 2 * len(table) if table is not None else 1024)
            table = pa.array([f"{i - 1}:{self.index}" for i in range(size)], pa.string())
            _SUFFIXES[self.index] = table
        return table.take(pa.array(batches))

    def _values(self, n: int) -> Any:
        """The value column: the chunks laid end to end, read as an array whose elements
        alternate between a value and the bytes up to the next one (``bounds`` in order are
        its offsets), of which every other element is taken."""
        import numpy as np
        import pyarrow as pa

        if n == 0:
            return pa.array([], pa.binary())
        sizes = np.fromiter(map(len, self.chunks), np.int64, len(self.chunks))
        base = np.cumsum(sizes) - sizes  # where each chunk starts once laid end to end
        per_chunk = np.diff(self.chunk_starts, append=n)
        offsets = np.asarray(self.bounds, np.int64) + np.repeat(base, 2 * per_chunk)
        data = b"".join(self.chunks)
        wide = len(data) > 2**31 - 1
        kind = pa.large_binary() if wide else pa.binary()
        offsets = offsets if wide else offsets.astype(np.int32)
        spaced = pa.Array.from_buffers(
            kind, 2 * n - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        values = spaced.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
        return values.cast(pa.binary()) if wide else values

    def _events(self, rows: Any, kind: Any) -> Any:
        """Event times: the entry's unless the row has its own."""
        import numpy as np
        import pyarrow as pa

        if not self.event_rows:
            return entry_times(self.entry_events, kind).take(rows)
        millis = np.array(self.entry_events, np.int64)[rows.to_numpy()]  # (a new array)
        millis[self.event_rows] = self.event_times
        return timestamps(pa.array(millis), kind)

    def _properties(self, n: int, kind: Any) -> Any:
        """The properties column: an empty map on rows without properties."""
        import numpy as np
        import pyarrow as pa

        if not self.property_rows:
            empty = pa.array([], pa.string())
            offsets = pa.array(np.zeros(n + 1, np.int32))
            return pa.MapArray.from_arrays(offsets, empty, empty, type=kind)
        column: list[Any] = [()] * n
        for row, pairs in zip(self.property_rows, self.properties, strict=True):
            column[row] = pairs
        return pa.array(column, kind)


def entry_times(ms: list[int], kind: Any) -> Any:
    """``timestamps`` of a few values (one per entry), without compute kernels' set-up."""
    import pyarrow as pa

    return pa.array([t * 1000 if t > 0 else None for t in ms], kind)


def timestamps(ms: Any, kind: Any) -> Any:
    """Client times (an int64 array of milliseconds, 0 for none) as a timestamp column
    (microseconds, null for none)."""
    import pyarrow.compute as pc

    micros = pc.if_else(pc.greater(ms, 0), pc.multiply(ms, 1000), None)
    return micros.cast(kind)
