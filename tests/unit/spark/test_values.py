"""``valueSchema=auto`` without Spark or a broker: Spark types of the registry's schemas, and
values decoded by the version they were written with, read as the latest."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import avro.io
import avro.schema
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type

from magnetar.spark import values
from magnetar.spark.options import MagnetarSourceError
from magnetar.spark.rows import Columns, arrow_schema

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "map", "values": "long"}, "default": {}},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}


def _avro(definition: dict[str, Any], datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(json.dumps(definition))).write(
        datum, avro.io.BinaryEncoder(out)
    )
    return out.getvalue()


def _history(*definitions: dict[str, Any], kind: str = "AVRO") -> list[values.Version]:
    return [values.Version(i, kind, json.dumps(d)) for i, d in enumerate(definitions)]


def _batch(rows: list[tuple[bytes, int]]) -> Any:
    cols = Columns("persistent://t/n/x", -1)
    for i, (data, version) in enumerate(rows):
        cols.start_entry(1, i, 1_700_000_000_000, "p", version=version)
        cols.ids.append(b"id")
        cols.batches.append(-1)
        cols.add_row(None, data, 0, [])
    return cols.batch(arrow_schema(versions=True))


def test_spark_types_of_avro_schemas() -> None:
    reader = values.Reader.of(_history(V1, V2), "x")
    assert reader.spark_type("x").simpleString() == (
        "struct<name:string,tags:map<string,bigint>,email:string>"
    )
    assert values.Reader.of(_history({}, kind="INT32"), "x").spark_type("x").simpleString() == (
        "int"
    )
    with pytest.raises(MagnetarSourceError, match="has no schema"):
        values.Reader.of([], "x")
    with pytest.raises(MagnetarSourceError, match="not KEY_VALUE"):
        values.Reader.of(_history({}, kind="KEY_VALUE"), "x")
    two = {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}
    with pytest.raises(MagnetarSourceError, match="union of several types"):
        values.Reader.of(_history(two), "x")
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"], "default": None}],
    }
    with pytest.raises(MagnetarSourceError, match="recursive record Node"):
        values.Reader.of(_history(node), "x")


def test_each_value_decodes_with_its_version_read_as_the_latest() -> None:
    history = _history(V1, V2)
    decoder = values.Decoder(values.Reader.of(history, "x"), history, "x")
    batch = _batch(
        [
            (_avro(V1, {"name": "old"}), 0),
            (_avro(V2, {"name": "new", "tags": {"a": 1}, "email": "e@x"}), 1),
            (_avro(V2, {"name": "none", "tags": {}, "email": None}), -1),  # no version: latest
        ]
    )
    out = decoder.apply(batch, to_arrow_type(decoder.kind, timezone="UTC"))
    assert values.VERSION_COLUMN not in out.schema.names
    assert out.schema.names == arrow_schema().names
    assert out.column(out.schema.get_field_index("value")).to_pylist() == [
        {"name": "old", "tags": [], "email": None},
        {"name": "new", "tags": [("a", 1)], "email": "e@x"},
        {"name": "none", "tags": [], "email": None},
    ]


def test_primitive_json_and_undecodable_values() -> None:
    history = _history({}, kind="INT64")
    decoder = values.Decoder(values.Reader.of(history, "x"), history, "x")
    out = decoder.apply(_batch([(struct.pack(">q", -5), 0)]), pa.int64())
    assert out.column(1).to_pylist() == [-5]
    with pytest.raises(MagnetarSourceError, match=r"message 1:0:-1:-1 of x does not decode"):
        decoder.apply(_batch([(b"\x01", 0)]), pa.int64())

    history = _history(V2, kind="JSON")
    decoder = values.Decoder(values.Reader.of(history, "x"), history, "x")
    data = json.dumps({"name": "j", "tags": {"k": 2}}).encode()
    out = decoder.apply(_batch([(data, 0)]), to_arrow_type(decoder.kind, timezone="UTC"))
    assert out.column(1).to_pylist() == [{"name": "j", "tags": [("k", 2)], "email": None}]


def test_versions_follow_their_entries_when_the_rows_are_split() -> None:
    cols = Columns("t", -1)
    for entry, version in ((0, 3), (1, 4)):
        cols.start_entry(1, entry, 1, "p", version=version)
        for _ in range(3):
            cols.ids.append(b"i")
            cols.batches.append(0)
            cols.add_row(None, b"v", 0, [])
    rest = cols.split(4)
    column = arrow_schema(versions=True).get_field_index(values.VERSION_COLUMN)
    assert cols.batch(arrow_schema(versions=True)).column(column).to_pylist() == [3, 3, 3, 4]
    assert rest.batch(arrow_schema(versions=True)).column(column).to_pylist() == [4, 4]


def test_the_option() -> None:
    assert values.value_schema({}) == "bytes"
    assert values.value_schema({"valueschema": "AUTO"}) == "auto"
    with pytest.raises(MagnetarSourceError, match="valueSchema must be bytes or auto"):
        values.value_schema({"valueschema": "avro"})


def test_logical_types() -> None:
    def of(logical: dict[str, Any]) -> str:
        rec = {"type": "record", "name": "R", "fields": [{"name": "v", "type": logical}]}
        return values.Reader.of(_history(rec), "x").spark_type("x").simpleString()

    assert of({"type": "long", "logicalType": "timestamp-millis"}) == "struct<v:timestamp>"
    assert of({"type": "int", "logicalType": "date"}) == "struct<v:date>"
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    assert of(decimal) == "struct<v:decimal(9,2)>"
    with pytest.raises(MagnetarSourceError, match="time-millis"):
        of({"type": "int", "logicalType": "time-millis"})


def test_logical_values_decode() -> None:
    import datetime
    import decimal

    rec = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
        ],
    }
    at = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    history = _history(rec)
    decoder = values.Decoder(values.Reader.of(history, "x"), history, "x")
    data = _avro(rec, {"at": at, "amount": decimal.Decimal("12.34")})
    out = decoder.apply(_batch([(data, 0)]), to_arrow_type(decoder.kind, timezone="UTC"))
    assert out.column(1).to_pylist() == [{"at": at, "amount": decimal.Decimal("12.34")}]
