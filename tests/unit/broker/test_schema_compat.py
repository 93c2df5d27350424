"""Schema compatibility without a broker: Apache Avro's checker and the strategies; the
cases of ``tests/support/schema_cases.py`` (aliases, promotions) with Pulsar 4.0.7's answers."""

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
from tests.support.schema_cases import CASES, Case


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def test_fields_defaults_and_promotions() -> None:
    old = record(f("id", "int"), f("tag", "string"))
    assert can_read(record(f("id", "long"), f("tag", "bytes")), old) == []  # promotions
    assert can_read(record(f("id", "int")), old) == []  # a dropped writer field is skipped
    assert can_read(record(f("id", "int"), f("n", "int", default=0)), old) == []
    assert (
        "missing default value at /fields/1: n"
        in can_read(record(f("id", "int"), f("n", "int")), old)[0]
    )
    assert "type mismatch" in can_read(record(f("id", "string")), old)[0]
    assert (
        "reader type: int not compatible with writer type: long"
        in (can_read(record(f("id", "int")), record(f("id", "long")))[0])
    )


def test_unions_enums_arrays_maps_nested_and_aliases() -> None:
    nullable = record(f("x", ["null", "string"], default=None))
    assert can_read(nullable, record(f("x", "string"))) == []
    assert can_read(record(f("x", "string")), nullable) != []  # null cannot become a string
    colors = {"type": "enum", "name": "C", "symbols": ["RED", "GREEN"]}
    more = {"type": "enum", "name": "C", "symbols": ["RED", "GREEN", "BLUE"]}
    assert can_read(record(f("c", more)), record(f("c", colors))) == []
    # a writer symbol the reader lacks fails only when read (Pulsar's answer, see CASES)
    assert can_read(record(f("c", colors)), record(f("c", more))) == []
    arr = record(
        f("a", {"type": "array", "items": "int"}), f("m", {"type": "map", "values": "int"})
    )
    wide = record(
        f("a", {"type": "array", "items": "long"}), f("m", {"type": "map", "values": "double"})
    )
    assert can_read(wide, arr) == []
    assert "/fields/0/type/items, /fields/1/type/values" in can_read(arr, wide)[0]
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
        (_schema(pb.Schema.Avro, record(f("x", "nope"))), 'Type property "nope" not a valid'),
        (_schema(pb.Schema.Avro, record({"name": "x"})), "not a valid Avro schema"),
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


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pulsars_answers(case: Case) -> None:
    new = _schema(pb.Schema.Avro, case.new)
    if case.compatible:
        check(Strategy(case.strategy), new, _history(_schema(pb.Schema.Avro, case.old)))
    else:
        with pytest.raises(IncompatibleSchemaError, match="incompatible with the topic's schema"):
            check(Strategy(case.strategy), new, _history(_schema(pb.Schema.Avro, case.old)))
