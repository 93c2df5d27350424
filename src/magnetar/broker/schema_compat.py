"""Schema compatibility: whether a new schema may join a topic's history, by the namespace's
strategy (Pulsar's ``SchemaCompatibilityStrategy``).

Why a module of its own: the check is pure (two schema definitions in, a verdict out) and is
the part of the registry with real rules -- Avro's schema resolution -- so it is tested on its
own. Record schemas (AVRO, JSON and PROTOBUF, whose definitions are Avro schemas in Pulsar)
follow Avro's resolution rules: a reader can read what a writer wrote when every reader field
is in the writer's record (with a resolvable type) or has a default, enums keep the writer's
symbols, types promote only as Avro allows (int -> long -> float -> double, string <-> bytes),
unions resolve branch by branch. KEY_VALUE checks its key and value halves. PROTOBUF_NATIVE
and the primitive types are compatible when the type is the same; a change of type is never
compatible (except under ALWAYS_COMPATIBLE).

Strategies: BACKWARD (the new schema reads data written with the latest), FORWARD (the latest
reads data written with the new), FULL (both); the ``_TRANSITIVE`` forms check every version,
not only the latest; ALWAYS_COMPATIBLE accepts anything, ALWAYS_INCOMPATIBLE nothing new.
UNDEFINED means the broker default, FULL, as in Pulsar.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from magnetar.wire import pb


class Strategy(enum.Enum):
    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


DEFAULT: Final = Strategy.FULL
"""What UNDEFINED means (Pulsar's broker default ``schemaCompatibilityStrategy``)."""


class IncompatibleSchemaError(Exception):
    """The new schema may not join the history; the message says why."""


_AVRO_LIKE: Final = frozenset({pb.Schema.Avro, pb.Schema.Json, pb.Schema.Protobuf})
_PRIMITIVES: Final = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_PROMOTIONS: Final = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
"""writer type -> reader types that can read it."""


def _type_name(t: Any) -> str:
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "union"
    if isinstance(t, dict):
        return str(t.get("type"))
    raise IncompatibleSchemaError(f"not an Avro schema: {t!r}")


class _Names:
    """Named types (records, enums, fixed) of one schema, by full and short name."""

    def __init__(self, root: Any) -> None:
        self.types: dict[str, dict[str, Any]] = {}
        self._collect(root, "")

    def _collect(self, t: Any, namespace: str) -> None:
        if isinstance(t, list):
            for branch in t:
                self._collect(branch, namespace)
        elif isinstance(t, dict):
            kind = t.get("type")
            if kind in ("record", "error", "enum", "fixed") and "name" in t:
                name = str(t["name"])
                ns = (
                    str(t.get("namespace", namespace))
                    if "." not in name
                    else name.rsplit(".", 1)[0]
                )
                full = name if "." in name else (f"{ns}.{name}" if ns else name)
                self.types[full] = t
                self.types.setdefault(full.rsplit(".", 1)[-1], t)
                namespace = ns
            if kind in ("record", "error"):
                for f in t.get("fields", []):
                    self._collect(f.get("type"), namespace)
            elif kind == "array":
                self._collect(t.get("items"), namespace)
            elif kind == "map":
                self._collect(t.get("values"), namespace)
            elif isinstance(kind, dict | list):
                self._collect(kind, namespace)

    def resolve(self, t: Any) -> Any:
        if isinstance(t, str) and t not in _PRIMITIVES:
            found = self.types.get(t) or self.types.get(t.rsplit(".", 1)[-1])
            if found is None:
                raise IncompatibleSchemaError(f"unknown named type {t!r}")
            return found
        if isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] in _PRIMITIVES:
            return t["type"]  # {"type": "string", "logicalType": ...}: its primitive
        return t


def can_read(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (Avro resolution); empty when
    it can. Both are parsed Avro schema JSON."""
    problems: list[str] = []
    _resolve(reader, writer, _Names(reader), _Names(writer), "", problems, set())
    return problems


def _resolve(
    reader: Any,
    writer: Any,
    rn: _Names,
    wn: _Names,
    path: str,
    problems: list[str],
    seen: set[tuple[int, int]],
) -> None:
    r, w = rn.resolve(reader), wn.resolve(writer)
    key = (id(r), id(w))
    if key in seen:
        return  # recursive types: already being checked
    seen.add(key)
    rk, wk = _type_name(r), _type_name(w)
    where = path or "the schema"
    if wk == "union":
        for branch in w:
            _resolve(r, branch, rn, wn, path, problems, seen)
        return
    if rk == "union":
        for branch in r:
            sub: list[str] = []
            _resolve(branch, w, rn, wn, path, sub, set(seen))
            if not sub:
                return
        problems.append(f"{where}: no branch of the reader's union reads the writer's {wk}")
        return
    if wk in _PRIMITIVES or rk in _PRIMITIVES:
        if rk not in _PROMOTIONS.get(wk, {wk}):
            problems.append(f"{where}: a {rk} cannot read a {wk}")
        return
    if rk != wk:
        problems.append(f"{where}: a {rk} cannot read a {wk}")
        return
    if rk in ("record", "error"):
        wfields = {f["name"]: f for f in w.get("fields", [])}
        for alias_field in w.get("fields", []):
            for alias in alias_field.get("aliases", []):
                wfields.setdefault(alias, alias_field)
        for f in r.get("fields", []):
            names = [f["name"], *f.get("aliases", [])]
            wf = next((wfields[n] for n in names if n in wfields), None)
            fpath = f"{path}.{f['name']}" if path else str(f["name"])
            if wf is None:
                if "default" not in f:
                    problems.append(f"{fpath}: a new field without a default")
                continue
            _resolve(f["type"], wf["type"], rn, wn, fpath, problems, seen)
    elif rk == "enum":
        missing = sorted(set(w.get("symbols", [])) - set(r.get("symbols", [])))
        if missing and "default" not in r:
            problems.append(f"{where}: enum symbols {missing} unknown to the reader")
    elif rk == "array":
        _resolve(r.get("items"), w.get("items"), rn, wn, f"{path}[]", problems, seen)
    elif rk == "map":
        _resolve(r.get("values"), w.get("values"), rn, wn, f"{path}{{}}", problems, seen)
    elif rk == "fixed":
        if r.get("size") != w.get("size"):
            problems.append(f"{where}: fixed of size {r.get('size')} cannot read {w.get('size')}")


def _definition(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise IncompatibleSchemaError(f"the schema definition is not valid JSON: {exc}") from None


def _key_value(data: bytes) -> tuple[bytes, bytes]:
    """Pulsar's KeyValue schema data: [int32 key length][key][int32 value length][value]."""
    try:
        (klen,) = struct.unpack_from(">i", data, 0)
        key = data[4 : 4 + klen]
        (vlen,) = struct.unpack_from(">i", data, 4 + klen)
        value = data[8 + klen : 8 + klen + vlen]
    except struct.error:
        raise IncompatibleSchemaError("malformed KeyValue schema data") from None
    return bytes(key), bytes(value)


SCHEMA_TYPES: Final = {
    "BYTES": "None", "NONE": "None", "STRING": "String", "JSON": "Json", "PROTOBUF": "Protobuf",
    "AVRO": "Avro", "BOOLEAN": "Bool", "INT8": "Int8", "INT16": "Int16", "INT32": "Int32",
    "INT64": "Int64", "FLOAT": "Float", "DOUBLE": "Double", "DATE": "Date", "TIME": "Time",
    "TIMESTAMP": "Timestamp", "KEY_VALUE": "KeyValue", "INSTANT": "Instant",
    "LOCAL_DATE": "LocalDate", "LOCAL_TIME": "LocalTime", "LOCAL_DATE_TIME": "LocalDateTime",
    "PROTOBUF_NATIVE": "ProtobufNative",
}  # fmt: skip
"""Pulsar's SchemaType names (KeyValue properties) -> the wire enum's names."""


def _kv_types(properties: dict[str, str]) -> tuple[int, int]:
    """The key and value schema types a KeyValue schema's properties name."""

    def of(name: str) -> int:
        wire = SCHEMA_TYPES.get(properties.get(name, "BYTES").upper(), "None")
        return int(pb.Schema.Type.Value(wire))

    return of("key.schema.type"), of("value.schema.type")


def _check_pair(
    new_type: int,
    new_data: bytes,
    new_props: dict[str, str],
    old_type: int,
    old_data: bytes,
    old_props: dict[str, str],
    *,
    backward: bool,
    forward: bool,
) -> list[str]:
    if new_type != old_type:
        return [
            f"the schema type changes from {pb.Schema.Type.Name(old_type)} "  # type: ignore[arg-type]
            f"to {pb.Schema.Type.Name(new_type)}"  # type: ignore[arg-type]
        ]
    if new_type == pb.Schema.KeyValue:
        nk, nv = _key_value(new_data)
        ok, ov = _key_value(old_data)
        nkt, nvt = _kv_types(new_props)
        okt, ovt = _kv_types(old_props)
        return [
            *(
                f"key: {p}"
                for p in _check_pair(nkt, nk, {}, okt, ok, {}, backward=backward, forward=forward)
            ),
            *(
                f"value: {p}"
                for p in _check_pair(nvt, nv, {}, ovt, ov, {}, backward=backward, forward=forward)
            ),
        ]
    if new_type not in _AVRO_LIKE or not new_data or not old_data:
        return []  # primitives and PROTOBUF_NATIVE: the same type is compatible
    new, old = _definition(new_data), _definition(old_data)
    problems = []
    if backward:
        problems += [f"the new schema cannot read old data: {p}" for p in can_read(new, old)]
    if forward:
        problems += [f"old readers cannot read new data: {p}" for p in can_read(old, new)]
    return problems


def _validate_avro(t: Any, names: _Names, path: str, seen: set[int]) -> None:
    t = names.resolve(t)
    if id(t) in seen:
        return  # a recursive reference to a named type being checked
    kind = _type_name(t)
    where = path or "the schema"
    if kind == "union":
        for branch in t:
            _validate_avro(branch, names, path, seen)
    elif kind in ("record", "error"):
        seen = seen | {id(t)}
        fields = t.get("fields")
        if not isinstance(fields, list):
            raise IncompatibleSchemaError(f"{where}: a record needs a list of fields")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise IncompatibleSchemaError(f"{where}: a field needs a name and a type")
            _validate_avro(f["type"], names, f"{path}.{f['name']}" if path else f["name"], seen)
    elif kind == "enum":
        if not isinstance(t.get("symbols"), list):
            raise IncompatibleSchemaError(f"{where}: an enum needs symbols")
    elif kind == "array":
        _validate_avro(t.get("items"), names, f"{path}[]", seen)
    elif kind == "map":
        _validate_avro(t.get("values"), names, f"{path}{{}}", seen)
    elif kind == "fixed":
        if not isinstance(t.get("size"), int):
            raise IncompatibleSchemaError(f"{where}: a fixed needs a size")
    elif kind not in _PRIMITIVES:
        raise IncompatibleSchemaError(f"{where}: unknown type {kind!r}")


def validate(schema: pb.Schema) -> None:
    """Raise IncompatibleSchemaError when ``schema``'s definition is not one its type can have
    (Pulsar's SchemaDataValidator): record types need a valid Avro schema, KeyValue two
    valid halves."""
    if schema.type == pb.Schema.KeyValue:
        key, value = _key_value(schema.schema_data)
        key_type, value_type = _kv_types({kv.key: kv.value for kv in schema.properties})
        for part_type, part in ((key_type, key), (value_type, value)):
            validate(pb.Schema(name="", schema_data=part, type=part_type))  # type: ignore[arg-type]
    elif schema.type in _AVRO_LIKE:
        definition = _definition(schema.schema_data)
        _validate_avro(definition, _Names(definition), "", set())


def check(
    strategy: Strategy,
    new: pb.Schema,
    history: Sequence[tuple[int, bytes, dict[str, str]]],
) -> None:
    """Raise IncompatibleSchemaError when ``new`` may not follow ``history`` (oldest first,
    as (type, definition, properties)) under ``strategy``."""
    if strategy is Strategy.UNDEFINED:
        strategy = DEFAULT
    if not history or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("the compatibility strategy is ALWAYS_INCOMPATIBLE")
    transitive = strategy.value.endswith("_TRANSITIVE")
    base = strategy.value.removesuffix("_TRANSITIVE")
    backward, forward = base in ("BACKWARD", "FULL"), base in ("FORWARD", "FULL")
    against: Iterable[tuple[int, bytes, dict[str, str]]] = history if transitive else history[-1:]
    new_props = {kv.key: kv.value for kv in new.properties}
    for old_type, old_data, old_props in against:
        problems = _check_pair(
            new.type, new.schema_data, new_props, old_type, old_data, old_props,
            backward=backward, forward=forward,
        )  # fmt: skip
        if problems:
            raise IncompatibleSchemaError(
                f"incompatible with the topic's schema under {strategy.value}: "
                + "; ".join(problems[:5])
            )
