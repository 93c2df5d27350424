"""Schema compatibility: whether a new schema may join a topic's history, by the namespace's
strategy (Pulsar's ``SchemaCompatibilityStrategy``).

Why a module of its own: the check is pure (two schema definitions in, a verdict out), so it
is tested on its own. Record schemas (AVRO, JSON and PROTOBUF, whose definitions are Avro
schemas in Pulsar) are parsed by Apache Avro's parser and judged by Apache Avro's own
``ReaderWriterCompatibilityChecker`` -- the resolution rules of Avro's specification (fields
by name or the reader's aliases, defaults, promotions, unions, enums, fixed, named types by
name or alias), as Pulsar judges them with Avro's Java ``SchemaValidator``: no rules of our
own. Pulsar 4.0.7's answers on aliases and promotions are checked side by side in
``tests/clients/test_schema_compat.py``. KEY_VALUE checks its key and value halves.
PROTOBUF_NATIVE and the primitive types are compatible when the type is the same; a change
of type is never compatible (except under ALWAYS_COMPATIBLE).

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

import avro.errors
import avro.schema
from avro import compatibility

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
_NAMED: Final = frozenset({"record", "error", "enum", "fixed"})


def _qualify_aliases(t: Any, namespace: str) -> Any:
    """The schema with the aliases of its named types written as full names.

    Avro's specification lets an alias be "fully qualified or relative to the namespace of
    the name they alias", and Java's parser qualifies them (what Pulsar's check sees); the
    Python checker compares an alias with the writer's full name as written. Qualifying them
    first gives both the same reading."""
    if isinstance(t, list):
        return [_qualify_aliases(branch, namespace) for branch in t]
    if not isinstance(t, dict):
        return t
    out = dict(t)
    kind = t.get("type")
    if kind in _NAMED and isinstance(t.get("name"), str):
        name: str = t["name"]
        if "." in name:
            namespace = name.rsplit(".", 1)[0]
        elif isinstance(t.get("namespace"), str):
            namespace = t["namespace"]
        aliases = t.get("aliases")
        if isinstance(aliases, list):
            out["aliases"] = [
                a if not isinstance(a, str) or "." in a or not namespace else f"{namespace}.{a}"
                for a in aliases
            ]
    if kind in ("record", "error") and isinstance(t.get("fields"), list):
        out["fields"] = [
            {**f, "type": _qualify_aliases(f.get("type"), namespace)} if isinstance(f, dict) else f
            for f in t["fields"]
        ]
    elif kind == "array":
        out["items"] = _qualify_aliases(t.get("items"), namespace)
    elif kind == "map":
        out["values"] = _qualify_aliases(t.get("values"), namespace)
    elif isinstance(kind, dict | list):
        out["type"] = _qualify_aliases(kind, namespace)
    return out


def parse(definition: Any) -> avro.schema.Schema:
    """Parse an Avro schema (parsed JSON) with Apache Avro's parser; IncompatibleSchemaError
    naming the problem when it is not one. Defaults are not checked against their types,
    as Pulsar's parser does not (``setValidateDefaults(false)``)."""
    try:
        return avro.schema.parse(json.dumps(_qualify_aliases(definition, "")))
    except (avro.errors.AvroException, TypeError, ValueError, AttributeError) as exc:
        raise IncompatibleSchemaError(f"not a valid Avro schema: {exc}") from None


class _PulsarChecker(compatibility.ReaderWriterCompatibilityChecker):
    """Apache Avro's checker as Pulsar's answers need it. Pulsar validates with Avro Java's
    ``SchemaValidator``, which resolves with the *resolving grammar* rather than with
    ``SchemaCompatibility`` (of which the Python checker is the port); the two disagree in
    two places, and Pulsar's answers follow the grammar (``tests/support/schema_cases.py``):
    a record's name is not compared (only enums and fixed must match by name or alias), and
    writer enum symbols the reader lacks are left to fail when such a value is read."""

    def calculate_compatibility(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, location: list[str]
    ) -> compatibility.SchemaCompatibilityResult:
        if isinstance(reader, avro.schema.RecordSchema) and isinstance(
            writer, avro.schema.RecordSchema
        ):
            return self.check_reader_writer_record_fields(reader, writer, location)
        if isinstance(reader, avro.schema.EnumSchema) and isinstance(
            writer, avro.schema.EnumSchema
        ):
            return compatibility.check_schema_names(reader, writer, location)
        return super().calculate_compatibility(reader, writer, location)


def can_read(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer``, as Apache Avro's
    ``ReaderWriterCompatibilityChecker`` decides (the schema resolution of Avro's
    specification: fields matched by name or the reader's aliases, a reader field missing
    from the writer needs a default, promotions int -> long -> float -> double and
    string <-> bytes, unions branch by branch, enum symbols, fixed sizes, named types by
    name or alias); empty when it can. Both are parsed Avro schema JSON."""
    checker = _PulsarChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(parse(reader), parse(writer))
    if result.compatibility is compatibility.SchemaCompatibilityType.compatible:
        return []
    kinds = sorted({kind.name.replace("_", " ") for kind in result.incompatibilities})
    where = ", ".join(sorted(result.locations)) or "/"
    return [f"{', '.join(kinds)} at {where}: {'; '.join(sorted(result.messages))}"]


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
        parse(_definition(schema.schema_data))


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
