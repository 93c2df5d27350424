"""``valueSchema=auto``: the ``value`` column decoded with the topic's schema from the schema
registry, instead of the payload's bytes.

Why this module exists: a topic with an AVRO, JSON or primitive schema holds encoded values
(Avro binary, JSON text, Pulsar's big-endian numbers); a Spark query wants their fields as
columns. The driver reads the schema history of each topic read (the admin API's
``/schemas/{topic}/schemas``) and takes the latest version as the *reader* schema: its Spark
type is the ``value`` column's type (a struct for a record). On the executors every message
is decoded with the version it was written with (its ``schema_version``; the latest for a
message without one) resolved to the reader schema by Apache Avro's ``DatumReader`` -- so
fields added or removed by a compatible evolution read as Avro resolves them. The read loops
keep the raw payload and the entry's schema version (``rows.Columns``); :meth:`Decoder.apply`
replaces the column, so reads without a schema pay nothing.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.spark.options import MagnetarSourceError

VALUE_SCHEMA_BYTES: Final = "bytes"
VALUE_SCHEMA_AUTO: Final = "auto"
VERSION_COLUMN: Final = "__schemaVersion"
"""The read loops' per-row schema version (-1: none), removed by :meth:`Decoder.apply`."""

_RECORD_TYPES: Final = frozenset({"AVRO", "JSON"})
_PRIMITIVES: Final[dict[str, tuple[DataType, Callable[[bytes], Any]]]] = {
    "STRING": (StringType(), lambda b: b.decode("utf-8")),
    "BYTES": (BinaryType(), bytes),
    "BOOLEAN": (BooleanType(), lambda b: b[0] != 0),
    "INT8": (ByteType(), lambda b: struct.unpack(">b", b)[0]),
    "INT16": (ShortType(), lambda b: struct.unpack(">h", b)[0]),
    "INT32": (IntegerType(), lambda b: struct.unpack(">i", b)[0]),
    "INT64": (LongType(), lambda b: struct.unpack(">q", b)[0]),
    "FLOAT": (FloatType(), lambda b: struct.unpack(">f", b)[0]),
    "DOUBLE": (DoubleType(), lambda b: struct.unpack(">d", b)[0]),
}
"""Pulsar's encodings of its primitive schemas (big-endian, as its Java serializers)."""


def value_schema(options: Mapping[str, str]) -> str:
    raw = (options.get("valueschema") or "").strip().lower()
    if raw in ("", VALUE_SCHEMA_BYTES):
        return VALUE_SCHEMA_BYTES
    if raw == VALUE_SCHEMA_AUTO:
        return VALUE_SCHEMA_AUTO
    raise MagnetarSourceError(
        f"option valueSchema must be {VALUE_SCHEMA_BYTES} or {VALUE_SCHEMA_AUTO}, "
        f"not {options.get('valueschema')!r}"
    )


@dataclass(frozen=True)
class Version:
    """One version of a topic's schema, as the registry answers it."""

    version: int
    type: str
    definition: str


def versions(answer: Any, topic: str) -> tuple[Version, ...]:
    """The versions in the admin API's ``getSchemaResponses`` answer, oldest first."""
    try:
        found = tuple(
            Version(int(s["version"]), str(s["type"]).upper(), str(s.get("data") or ""))
            for s in answer["getSchemaResponses"]
        )
    except (KeyError, TypeError, ValueError) as err:
        raise MagnetarSourceError(f"topic {topic}: unexpected schema answer: {err}") from None
    return tuple(sorted(found, key=lambda v: v.version))


def _parse_avro(definition: str, topic: str) -> Any:
    import avro.errors
    import avro.schema

    try:
        return avro.schema.parse(definition)
    except (avro.errors.AvroException, ValueError) as err:
        raise MagnetarSourceError(f"topic {topic}: the schema is not Avro: {err}") from None


def spark_type_of(avro_schema: Any, *, topic: str, seen: frozenset[str] = frozenset()) -> DataType:
    """The Spark type of an Avro schema (a record: a struct; ``["null", T]``: T, nullable)."""
    kind = avro_schema.type
    logical = avro_schema.props.get("logicalType") if hasattr(avro_schema, "props") else None
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if logical == "date":
        return DateType()
    if logical == "decimal":
        props = avro_schema.props
        return DecimalType(int(props.get("precision", 10)), int(props.get("scale", 0)))
    if logical in ("time-millis", "time-micros"):
        raise MagnetarSourceError(
            f"topic {topic}: valueSchema=auto has no Spark column type for Avro's {logical}"
        )
    simple: dict[str, DataType] = {
        "null": StringType(),
        "boolean": BooleanType(),
        "int": IntegerType(),
        "long": LongType(),
        "float": FloatType(),
        "double": DoubleType(),
        "bytes": BinaryType(),
        "string": StringType(),
        "fixed": BinaryType(),
        "enum": StringType(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return ArrayType(spark_type_of(avro_schema.items, topic=topic, seen=seen))
    if kind == "map":
        return MapType(StringType(), spark_type_of(avro_schema.values, topic=topic, seen=seen))
    if kind == "union":
        branches = [b for b in avro_schema.schemas if b.type != "null"]
        if len(branches) != 1:
            raise MagnetarSourceError(
                f"topic {topic}: valueSchema=auto does not decode a union of several types "
                f"({', '.join(b.type for b in avro_schema.schemas)}) into a column"
            )
        return spark_type_of(branches[0], topic=topic, seen=seen)
    if kind in ("record", "error"):
        if avro_schema.fullname in seen:
            raise MagnetarSourceError(
                f"topic {topic}: valueSchema=auto does not decode the recursive record "
                f"{avro_schema.fullname} into columns"
            )
        inner = seen | {avro_schema.fullname}
        return StructType(
            [
                StructField(f.name, spark_type_of(f.type, topic=topic, seen=inner))
                for f in avro_schema.fields
            ]
        )
    raise MagnetarSourceError(f"topic {topic}: Avro type {kind} has no Spark column type")


def _spark_value(kind: DataType, value: Any) -> Any:
    """A decoded value as Arrow takes it for ``kind`` (maps as pairs, records by field)."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a record, got {type(value).__name__}")
        return {f.name: _spark_value(f.dataType, value.get(f.name)) for f in kind.fields}
    if isinstance(kind, ArrayType):
        return [_spark_value(kind.elementType, v) for v in value]
    if isinstance(kind, MapType):
        return [(str(k), _spark_value(kind.valueType, v)) for k, v in value.items()]
    if isinstance(kind, BinaryType) and isinstance(value, str):
        return value.encode()
    return value


@dataclass(frozen=True)
class Reader:
    """What the driver decided: the reader schema (the latest version at planning) and the
    Spark type of the ``value`` column. Picklable: it travels to the executors."""

    type: str
    definition: str

    @classmethod
    def of(cls, history: Sequence[Version], topic: str) -> Reader:
        if not history:
            raise MagnetarSourceError(
                f"topic {topic} has no schema: valueSchema=auto decodes with the topic's "
                "schema from the registry (read with valueSchema=bytes)"
            )
        latest = history[-1]
        if latest.type not in _RECORD_TYPES and latest.type not in _PRIMITIVES:
            raise MagnetarSourceError(
                f"topic {topic}: valueSchema=auto decodes AVRO, JSON and primitive schemas, "
                f"not {latest.type} (read with valueSchema=bytes)"
            )
        reader = cls(latest.type, latest.definition)
        reader.spark_type(topic)  # refused here, on the driver, when it has no column type
        return reader

    def spark_type(self, topic: str) -> DataType:
        if self.type in _PRIMITIVES:
            return _PRIMITIVES[self.type][0]
        return spark_type_of(_parse_avro(self.definition, topic), topic=topic)


class Decoder:
    """Decodes one topic's values on an executor: each message with the version it was
    written with, read as the reader schema."""

    def __init__(self, reader: Reader, history: Sequence[Version], topic: str) -> None:
        self.reader, self.topic = reader, topic
        self.kind = reader.spark_type(topic)
        self._written = {v.version: v for v in history}
        self._decoders: dict[int, Callable[[bytes], Any]] = {}
        self._reader_avro = (
            _parse_avro(reader.definition, topic) if reader.type in _RECORD_TYPES else None
        )

    def _decoder(self, version: int) -> Callable[[bytes], Any]:
        found = self._decoders.get(version)
        if found is not None:
            return found
        if self.reader.type in _PRIMITIVES:
            decode = _PRIMITIVES[self.reader.type][1]
        elif self.reader.type == "JSON":
            decode = json.loads
        else:
            import avro.io

            written = self._written.get(version)
            if written is not None and written.type != "AVRO":
                raise MagnetarSourceError(
                    f"topic {self.topic}: schema version {version} is {written.type}, "
                    "not AVRO like the latest"
                )
            writer = (
                _parse_avro(written.definition, self.topic)
                if written is not None
                else self._reader_avro
            )
            datum = avro.io.DatumReader(writer, self._reader_avro)

            def decode(data: bytes) -> Any:
                return datum.read(avro.io.BinaryDecoder(io.BytesIO(data)))

        self._decoders[version] = decode
        return decode

    def apply(self, batch: Any, arrow_type: Any) -> Any:
        """``batch`` (``rows.SCHEMA`` plus ``VERSION_COLUMN``) with ``value`` decoded to
        ``arrow_type`` and the version column dropped."""
        import pyarrow as pa

        values = batch.column(batch.schema.get_field_index("value")).to_pylist()
        versions = batch.column(batch.schema.get_field_index(VERSION_COLUMN)).to_pylist()
        ids = batch.column(batch.schema.get_field_index("messageIdString")).to_pylist()
        decoded: list[Any] = []
        for data, version, where in zip(values, versions, ids, strict=True):
            if data is None:
                decoded.append(None)
                continue
            try:
                decoded.append(_spark_value(self.kind, self._decoder(version)(data)))
            except MagnetarSourceError:
                raise
            except Exception as err:
                raise MagnetarSourceError(
                    f"message {where} of {self.topic} does not decode with schema version "
                    f"{version} ({self.reader.type}): {type(err).__name__}: {err}"
                ) from None
        try:
            column = pa.array(decoded, arrow_type)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise MagnetarSourceError(
                f"values of {self.topic} do not fit the column type "
                f"{self.kind.simpleString()}: {err}"
            ) from None
        names = [n for n in batch.schema.names if n != VERSION_COLUMN]
        arrays = [
            column if n == "value" else batch.column(batch.schema.get_field_index(n)) for n in names
        ]
        fields = [
            pa.field("value", arrow_type) if n == "value" else batch.schema.field(n) for n in names
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
