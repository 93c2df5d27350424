"""Avro schema compatibility cases (aliases, promotions, names, unions, enums, fixed) with
the answers of Apache Pulsar 4.0.7: whether it registers the ``new`` schema on a topic whose
schema is ``old`` under ``strategy``. ``tests/clients/test_schema_compat.py`` checks each case
against Magnetar (and, with ``MAGNETAR_CLIENTS_AGAINST=pulsar``, against Pulsar itself, where
the answers were taken); ``tests/unit/broker/test_schema_compat.py`` against the checker
alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def record(*fields: dict[str, Any], name: str = "User", **extra: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": "com.acme",
        "fields": list(fields),
        **extra,
    }


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


@dataclass(frozen=True)
class Case:
    id: str
    strategy: str
    old: dict[str, Any]
    new: dict[str, Any]
    compatible: bool
    """Pulsar 4.0.7's answer."""


def _promotion(writer: Any, reader: Any, compatible: bool) -> list[Case]:
    """The new schema reads the old (BACKWARD) with ``reader`` for a field of ``writer``."""

    def name(t: Any) -> str:
        return t if isinstance(t, str) else "|".join(t)

    label = f"{name(writer)}->{name(reader)}"
    return [
        Case(
            f"promote {label}",
            "BACKWARD",
            record(field("v", writer)),
            record(field("v", reader)),
            compatible,
        )
    ]


CASES: list[Case] = [
    # --- promotions (Avro: int -> long -> float -> double, string <-> bytes) ---
    *_promotion("int", "long", True),
    *_promotion("int", "float", True),
    *_promotion("int", "double", True),
    *_promotion("long", "float", True),
    *_promotion("long", "double", True),
    *_promotion("float", "double", True),
    *_promotion("string", "bytes", True),
    *_promotion("bytes", "string", True),
    *_promotion("long", "int", False),
    *_promotion("double", "float", False),
    *_promotion("int", "string", False),
    *_promotion("boolean", "int", False),
    *_promotion(["null", "int"], ["null", "long"], True),
    *_promotion(["null", "long"], ["null", "int"], False),
    *_promotion("int", ["null", "long"], True),
    Case(
        "promotion both ways (FULL)",
        "FULL",
        record(field("v", "int")),
        record(field("v", "long")),
        False,
    ),
    Case(
        "promotion read by the old (FORWARD)",
        "FORWARD",
        record(field("v", "long")),
        record(field("v", "int")),
        True,
    ),
    Case(
        "array items promote",
        "BACKWARD",
        record(field("a", {"type": "array", "items": "int"})),
        record(field("a", {"type": "array", "items": "double"})),
        True,
    ),
    Case(
        "map values demote",
        "BACKWARD",
        record(field("m", {"type": "map", "values": "long"})),
        record(field("m", {"type": "map", "values": "int"})),
        False,
    ),
    # --- field aliases ---
    Case(
        "field renamed with an alias, new reads old",
        "BACKWARD",
        record(field("name", "string")),
        record(field("fullName", "string", aliases=["name"])),
        True,
    ),
    Case(
        "field renamed with an alias, old reads new",
        "FORWARD",
        record(field("name", "string")),
        record(field("fullName", "string", aliases=["name"])),
        False,
    ),
    Case(
        "field renamed with an alias, both ways",
        "FULL",
        record(field("name", "string")),
        record(field("fullName", "string", aliases=["name"])),
        False,
    ),
    Case(
        "field renamed without an alias",
        "BACKWARD",
        record(field("name", "string")),
        record(field("fullName", "string")),
        False,
    ),
    Case(
        "field renamed, alias and default",
        "FULL",
        record(field("name", "string", default="")),
        record(field("fullName", "string", aliases=["name"], default="")),
        True,
    ),
    Case(
        "alias names an old field of another type",
        "BACKWARD",
        record(field("n", "string")),
        record(field("count", "int", aliases=["n"])),
        False,
    ),
    # --- record names and their aliases ---
    Case(
        "record renamed",
        "BACKWARD",
        record(field("id", "int")),
        record(field("id", "int"), name="Person"),
        True,  # Avro's Java resolving grammar, which Pulsar checks with, ignores record names
    ),
    Case(
        "record renamed with a full-name alias",
        "BACKWARD",
        record(field("id", "int")),
        record(field("id", "int"), name="Person", aliases=["com.acme.User"]),
        True,
    ),
    Case(
        "record renamed with a short alias",
        "BACKWARD",
        record(field("id", "int")),
        record(field("id", "int"), name="Person", aliases=["User"]),
        True,
    ),
    Case(
        "record moved to another namespace",
        "BACKWARD",
        record(field("id", "int")),
        {**record(field("id", "int")), "namespace": "org.other"},
        True,
    ),
    # --- defaults, unions, enums, fixed ---
    Case(
        "new field with a default",
        "FULL",
        record(field("id", "int")),
        record(field("id", "int"), field("tag", ["null", "string"], default=None)),
        True,
    ),
    Case(
        "new field without a default",
        "BACKWARD",
        record(field("id", "int")),
        record(field("id", "int"), field("tag", "string")),
        False,
    ),
    Case(
        "union loses a branch",
        "BACKWARD",
        record(field("v", ["null", "int", "string"])),
        record(field("v", ["null", "int"])),
        False,
    ),
    Case(
        "enum loses a symbol",
        "BACKWARD",
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]})),
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"]})),
        True,  # Java's resolving grammar leaves unknown symbols to fail at read time
    ),
    Case(
        "enum gains a symbol, old reads new",
        "FORWARD",
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"]})),
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]})),
        True,
    ),
    Case(
        "enum loses a symbol, reader has a default",
        "BACKWARD",
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]})),
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"], "default": "RED"})),
        True,
    ),
    Case(
        "enum renamed",
        "BACKWARD",
        record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"]})),
        record(field("c", {"type": "enum", "name": "Colour", "symbols": ["RED"]})),
        False,
    ),
    Case(
        "fixed changes size",
        "BACKWARD",
        record(field("h", {"type": "fixed", "name": "Hash", "size": 16})),
        record(field("h", {"type": "fixed", "name": "Hash", "size": 32})),
        False,
    ),
    Case(
        "fixed renamed",
        "BACKWARD",
        record(field("h", {"type": "fixed", "name": "Hash", "size": 16})),
        record(field("h", {"type": "fixed", "name": "Digest", "size": 16})),
        False,
    ),
    Case(
        "record renamed inside a union",
        "BACKWARD",
        record(field("u", ["null", record(field("v", "int"), name="Inner")])),
        record(field("u", ["null", record(field("v", "int"), name="Other")])),
        True,
    ),
    Case(
        "nested record renamed",
        "BACKWARD",
        record(field("u", record(field("v", "int"), name="Inner"))),
        record(field("u", record(field("v", "long"), name="Other"))),
        True,
    ),
    Case(
        "fixed renamed with an alias",
        "BACKWARD",
        record(field("h", {"type": "fixed", "name": "Hash", "size": 16})),
        record(field("h", {"type": "fixed", "name": "Digest", "size": 16, "aliases": ["Hash"]})),
        True,
    ),
]
