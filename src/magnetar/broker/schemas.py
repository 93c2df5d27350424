"""Topic schemas: the versioned history the official clients register and fetch.

Why a module of its own: a producer or consumer with a schema (Avro, JSON, Protobuf,
primitives, KeyValue) sends it on PRODUCER/SUBSCRIBE and expects a *schema version* back;
messages then carry that version, and consumers fetch the writer's schema by version with
GET_SCHEMA (the Java client's Avro/JSON decoders and AUTO_CONSUME depend on it). This module
keeps that history in the metadata store, one version per key (docs/metadata.md):
``/schemas/<tenant>/<namespace>/<topic base name>/<version>``. Partitions share their
partitioned topic's history, and both domains of one name share it, as in Pulsar.

Versions are dense integers from 0, sent on the wire as 8 big-endian bytes (Pulsar's
``LongSchemaVersion``). A schema identical (type and definition) to a stored version gets
that version back; a new one becomes the next version, created with a create-only put, so
two brokers racing on one topic agree on the numbering.

A new schema must be compatible with the history under the namespace's strategy
(``schema_compat``; FULL unless the namespace says otherwise), and is refused when the
namespace forbids automatic updates (``is_allow_auto_update_schema: false``). Refusals are
IncompatibleSchema, as in Pulsar.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Final

from magnetar.broker import schema_compat
from magnetar.broker.contracts import BrokerError
from magnetar.common.stats import LatencyWindow
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire.topics import TopicName

MAX_SCHEMA_BYTES: Final = 512 * 1024
"""Largest schema definition accepted (it lives in one metadata record)."""

NO_VERSION: Final = b""
"""The schema version of a producer without schema (Pulsar's empty version)."""

#: Schema types that are a client-side mode, never stored (AUTO_CONSUME readers).
_NOT_STORED: Final = frozenset({pb.Schema.Type.Value("None"), pb.Schema.AutoConsume})

_VERSION = struct.Struct(">q")
_CREATE_RETRIES: Final = 16


def encode_version(version: int) -> bytes:
    return _VERSION.pack(version)


def decode_version(raw: bytes) -> int:
    """The version number in a wire schema version; raises BrokerError when malformed."""
    if len(raw) != _VERSION.size:
        raise BrokerError(pb.IncompatibleSchema, f"malformed schema version {raw.hex()!r}")
    (version,) = _VERSION.unpack(raw)
    return int(version)


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """A namespace's schema policies (Pulsar's Policies fields of the same names)."""

    strategy: schema_compat.Strategy = schema_compat.Strategy.UNDEFINED
    allow_auto_update: bool = True
    validation_enforced: bool = False

    @classmethod
    def of(cls, raw: dict[str, object]) -> SchemaPolicy:
        strategy = raw.get("schema_compatibility_strategy")
        try:
            parsed = schema_compat.Strategy(strategy or "UNDEFINED")
        except ValueError:
            parsed = schema_compat.Strategy.UNDEFINED
        return cls(
            strategy=parsed,
            allow_auto_update=raw.get("is_allow_auto_update_schema") is not False,
            validation_enforced=raw.get("schema_validation_enforced") is True,
        )


@dataclass(frozen=True, slots=True)
class StoredSchema:
    version: int
    type: int
    name: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0

    def same_definition(self, schema: pb.Schema) -> bool:
        return self.type == schema.type and self.data == schema.schema_data

    def to_proto(self) -> pb.Schema:
        out = pb.Schema(name=self.name, schema_data=self.data, type=self.type)  # type: ignore[arg-type]
        for k, v in self.properties.items():
            out.properties.add(key=k, value=v)
        return out

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "type": self.type,
                "name": self.name,
                "schema": base64.b64encode(self.data).decode(),
                "properties": self.properties,
                "timestamp": self.timestamp,
                "deleted": False,
            }
        ).encode()

    @classmethod
    def from_json(cls, version: int, raw: bytes) -> StoredSchema:
        d = json.loads(raw)
        return cls(
            version=version,
            type=int(d["type"]),
            name=str(d.get("name", "")),
            data=base64.b64decode(d["schema"]),
            properties={str(k): str(v) for k, v in d.get("properties", {}).items()},
            timestamp=int(d.get("timestamp", 0)),
        )


def is_stored(schema: pb.Schema) -> bool:
    """Whether a schema sent by a client is registered (AUTO_CONSUME and none are not)."""
    return schema.type not in _NOT_STORED


class SchemaRegistry:
    """Schema histories of every topic, in the metadata store."""

    def __init__(self, store: api.MetadataStore) -> None:
        self._store = store
        self.get_latency_ms: dict[str, LatencyWindow] = {}
        """Per namespace: reads of a schema (Pulsar's pulsar_schema_get_ops_latency)."""
        self.put_latency_ms: dict[str, LatencyWindow] = {}
        """Per namespace: get-or-create of a schema (pulsar_schema_put_ops_latency)."""

    def refresh_stats(self) -> None:
        """End of a statistics period (the summaries' quantiles move on)."""
        for window in (*self.get_latency_ms.values(), *self.put_latency_ms.values()):
            window.refresh()

    @staticmethod
    def _timed(windows: dict[str, LatencyWindow], topic: TopicName, started: float) -> None:
        ns = topic.namespace_name
        window = windows.get(ns)
        if window is None:
            window = windows[ns] = LatencyWindow()
        window.add((time.perf_counter() - started) * 1000.0)

    @staticmethod
    def _parent(topic: TopicName) -> str:
        base = topic.base_name
        return keys.schemas(base.tenant, base.namespace, base.local_name)

    async def history(self, topic: TopicName) -> list[StoredSchema]:
        """Every version of ``topic``'s schema, oldest first."""
        parent = self._parent(topic)
        out = []
        async for rec in self._store.scan_all(parent):
            version = int(rec.key.rsplit("/", 1)[1])
            out.append(StoredSchema.from_json(version, rec.value))
        return out

    async def get(self, topic: TopicName, version: int | None = None) -> StoredSchema | None:
        """Version ``version`` (the latest when None), or None when there is none."""
        started = time.perf_counter()
        try:
            return await self._get(topic, version)
        finally:
            self._timed(self.get_latency_ms, topic, started)

    async def _get(self, topic: TopicName, version: int | None) -> StoredSchema | None:
        if version is not None:
            if version < 0:
                return None
            base = topic.base_name
            rec = await self._store.get(
                keys.schema_version(base.tenant, base.namespace, base.local_name, version)
            )
            return None if rec is None else StoredSchema.from_json(version, rec.value)
        history = await self.history(topic)
        return history[-1] if history else None

    async def get_or_create(
        self, topic: TopicName, schema: pb.Schema, policy: SchemaPolicy | None = None
    ) -> int:
        """The version of ``schema`` in ``topic``'s history, adding it as the next version
        when no stored version has the same type and definition and ``policy`` allows it;
        raises BrokerError(IncompatibleSchema) otherwise."""
        started = time.perf_counter()
        try:
            return await self._get_or_create(topic, schema, policy)
        finally:
            self._timed(self.put_latency_ms, topic, started)

    async def _get_or_create(
        self, topic: TopicName, schema: pb.Schema, policy: SchemaPolicy | None
    ) -> int:
        policy = policy or SchemaPolicy()
        if len(schema.schema_data) > MAX_SCHEMA_BYTES:
            raise BrokerError(
                pb.IncompatibleSchema,
                f"schema of {len(schema.schema_data)} bytes is larger than the limit of "
                f"{MAX_SCHEMA_BYTES} bytes",
            )
        try:
            schema_compat.validate(schema)
        except schema_compat.IncompatibleSchemaError as exc:
            raise BrokerError(pb.IncompatibleSchema, f"invalid schema: {exc}") from None
        base = topic.base_name
        for _ in range(_CREATE_RETRIES):
            history = await self.history(topic)
            for stored in reversed(history):
                if stored.same_definition(schema):
                    return stored.version
            if history:
                self._check(topic, schema, history, policy)
            version = history[-1].version + 1 if history else 0
            new = StoredSchema(
                version=version,
                type=schema.type,
                name=schema.name,
                data=schema.schema_data,
                properties={kv.key: kv.value for kv in schema.properties},
                timestamp=int(time.time() * 1000),
            )
            try:
                await self._store.put(
                    keys.schema_version(base.tenant, base.namespace, base.local_name, version),
                    new.to_json(),
                    expected_version=api.NOT_EXISTS,
                )
            except api.BadVersionError:
                continue  # another broker added this version first: read again
            return version
        raise BrokerError(pb.MetadataError, f"could not add a schema version to {base}")

    async def check_consumer(
        self, topic: TopicName, schema: pb.Schema, policy: SchemaPolicy | None = None
    ) -> None:
        """A consumer's schema: stored when the topic has none yet (as Pulsar does for an idle
        topic), else it must be in the history or compatible with it (not stored)."""
        policy = policy or SchemaPolicy()
        history = await self.history(topic)
        if not history:
            await self.get_or_create(topic, schema, policy)
        elif not any(s.same_definition(schema) for s in history):
            self._check(topic, schema, history, policy, adding=False)

    async def check_producer_without_schema(
        self, topic: TopicName, policy: SchemaPolicy | None = None
    ) -> None:
        """``schema_validation_enforced``: no schema-less producer on a topic with a schema."""
        if policy is not None and policy.validation_enforced and await self.history(topic):
            raise BrokerError(
                pb.IncompatibleSchema,
                "Producers cannot connect or send message without a schema to topics with a "
                "schema when SchemaValidationEnforced is enabled",
            )

    @staticmethod
    def _check(
        topic: TopicName,
        schema: pb.Schema,
        history: list[StoredSchema],
        policy: SchemaPolicy,
        *,
        adding: bool = True,
    ) -> None:
        if adding and not policy.allow_auto_update:
            raise BrokerError(
                pb.IncompatibleSchema,
                f"{topic.base_name}: schema not found and schema auto updating is disabled",
            )
        try:
            schema_compat.check(
                policy.strategy, schema, [(s.type, s.data, s.properties) for s in history]
            )
        except schema_compat.IncompatibleSchemaError as exc:
            raise BrokerError(pb.IncompatibleSchema, f"{topic.base_name}: {exc}") from None
