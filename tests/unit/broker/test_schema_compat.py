"""Schema compatibility without a broker: Avro's resolution rules and the strategies."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from magnetar.broker.schema_compat import (
    IncompatibleSchemaError,
    Strategy,
    can_read,
    check,
    validate,
)
from magnetar.wire import pb


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def test_fields_defaults_and_promotions() -> None:
    old = record(f("id", "int"), f("tag", "string"))
    assert can_read(record(f("id", "long"), f("tag", "bytes")), old) == []  # promotions
    assert can_read(record(f("id", "int")), old) == []  # a dropped writer field is skipped
    assert can_read(record(f("id", "int"), f("n", "int", default=0)), old) == []
    assert "without a default" in can_read(record(f("id", "int"), f("n", "int")), old)[0]
    assert "cannot read" in can_read(record(f("id", "string")), old)[0]
    assert "cannot read" in can_read(record(f("id", "int")), record(f("id", "long")))[0]


def test_unions_enums_arrays_maps_nested_and_aliases() -> None:
    nullable = record(f("x", ["null", "string"], default=None))
    assert can_read(nullable, record(f("x", "string"))) == []
    assert can_read(record(f("x", "string")), nullable) != []  # null cannot become a string
    colors = {"type": "enum", "name": "C", "symbols": ["RED", "GREEN"]}
    more = {"type": "enum", "name": "C", "symbols": ["RED", "GREEN", "BLUE"]}
    assert can_read(record(f("c", more)), record(f("c", colors))) == []
    assert "BLUE" in can_read(record(f("c", colors)), record(f("c", more)))[0]
    arr = record(
        f("a", {"type": "array", "items": "int"}), f("m", {"type": "map", "values": "int"})
    )
    wide = record(
        f("a", {"type": "array", "items": "long"}), f("m", {"type": "map", "values": "double"})
    )
    assert can_read(wide, arr) == []
    assert len(can_read(arr, wide)) == 2
    inner = record(f("v", "int"), name="Inner")
    outer_old = record(f("in", inner), f("again", "t.Inner"))
    outer_new = record(f("in", record(f("v", "long"), name="Inner")), f("again", "Inner"))
    assert can_read(outer_new, outer_old) == []
    renamed = record(f("identifier", "int", aliases=["id"]))
    assert can_read(renamed, record(f("id", "int"))) == []


def _schema(type_: int, definition: Any = b"", **props: str) -> pb.Schema:
    data = definition if isinstance(definition, bytes) else json.dumps(definition).encode()
    s = pb.Schema(name="s", schema_data=data, type=type_)  # type: ignore[arg-type]
    for k, v in props.items():
        s.properties.add(key=k, value=v)
    return s


def _history(*schemas: pb.Schema) -> list[tuple[int, bytes, dict[str, str]]]:
    return [(s.type, s.schema_data, {kv.key: kv.value for kv in s.properties}) for s in schemas]


V1 = _schema(pb.Schema.Avro, record(f("id", "int")))
V2 = _schema(pb.Schema.Avro, record(f("id", "int"), f("x", ["null", "int"], default=None)))
V3 = _schema(pb.Schema.Avro, record(f("x", ["null", "int"], default=None)))


@pytest.mark.parametrize(
    ("strategy", "new", "history", "ok"),
    [
        (Strategy.FULL, V2, [V1], True),
        (Strategy.FULL, V3, [V1, V2], False),
        (Strategy.BACKWARD, V3, [V1, V2], True),
        (Strategy.BACKWARD_TRANSITIVE, V3, [V1, V2], True),
        (Strategy.FORWARD, V3, [V1, V2], False),
        (Strategy.FORWARD_TRANSITIVE, V2, [V1], True),
        (Strategy.ALWAYS_COMPATIBLE, V3, [V1], True),
        (Strategy.ALWAYS_INCOMPATIBLE, V2, [V1], False),
        (Strategy.UNDEFINED, V3, [V2], False),  # UNDEFINED = FULL
        (Strategy.FULL, _schema(pb.Schema.String), [V1], False),  # a change of type
        (Strategy.FULL, _schema(pb.Schema.Int64), [_schema(pb.Schema.Int64)], True),
    ],
)
def test_strategies(strategy: Strategy, new: pb.Schema, history: list[pb.Schema], ok: bool) -> None:
    if ok:
        check(strategy, new, _history(*history))
    else:
        with pytest.raises(IncompatibleSchemaError):
            check(strategy, new, _history(*history))


V2_DEF = record(f("id", "int"), f("x", ["null", "int"], default=None))


def _kv(key: Any, value: Any) -> pb.Schema:
    k, v = json.dumps(key).encode(), json.dumps(value).encode()
    data = struct.pack(">i", len(k)) + k + struct.pack(">i", len(v)) + v
    return _schema(
        pb.Schema.KeyValue, data, **{"key.schema.type": "AVRO", "value.schema.type": "AVRO"}
    )


def test_key_value_checks_both_halves() -> None:
    old = _kv(record(f("k", "int")), record(f("id", "int")))
    check(Strategy.FULL, _kv(record(f("k", "int")), V2_DEF), _history(old))
    with pytest.raises(IncompatibleSchemaError, match="value"):
        check(Strategy.FULL, _kv(record(f("k", "int")), record(f("id", "string"))), _history(old))


def test_garbage_definitions_are_incompatible() -> None:
    with pytest.raises(IncompatibleSchemaError, match="JSON"):
        check(Strategy.FULL, _schema(pb.Schema.Avro, b"{not json"), _history(V1))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (_schema(pb.Schema.Avro, b"not json"), "JSON"),
        (_schema(pb.Schema.Json, {"type": "record", "name": "R"}), "fields"),
        (_schema(pb.Schema.Avro, record(f("x", "nope"))), "unknown"),
        (_schema(pb.Schema.Avro, record({"name": "x"})), "name and a type"),
        (_schema(pb.Schema.Avro, {"type": "enum", "name": "E"}), "symbols"),
        (_schema(pb.Schema.KeyValue, b"\\x00\\x00"), "KeyValue"),
    ],
)
def test_invalid_definitions(schema: pb.Schema, message: str) -> None:
    with pytest.raises(IncompatibleSchemaError, match=message):
        validate(schema)


def test_valid_definitions_including_recursive_ones() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [f("v", "int"), f("next", ["null", "Node"], default=None)],
    }
    validate(_schema(pb.Schema.Avro, node))
    validate(_schema(pb.Schema.String))
    validate(_kv(record(f("k", "int")), record(f("id", "int"))))
