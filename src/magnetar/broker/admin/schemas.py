"""Schema endpoints of the admin API: ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...``
(Pulsar's SchemasResource): read a topic's schema history, upload a schema (checked against
the namespace's compatibility strategy like a producer's), delete the history, and ask whether
a schema would be compatible or which version it has. The history itself is
``broker.schemas`` (docs/metadata.md).
"""

from __future__ import annotations

import base64
from typing import Any, Final

from aiohttp import web

from magnetar.broker import schema_compat, schemas
from magnetar.broker.admin import validation
from magnetar.broker.admin.common import AdminError, accepts, check_name, parsed, service
from magnetar.broker.contracts import BrokerError
from magnetar.metadata import keys
from magnetar.wire import pb
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicName

BASE: Final = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"

_TEXT_TYPES: Final = frozenset(
    {pb.Schema.Avro, pb.Schema.Json, pb.Schema.Protobuf, pb.Schema.ProtobufNative}
)
_BY_NAME: Final = schema_compat.SCHEMA_TYPES
_NAME_OF: Final = {int(pb.Schema.Type.Value(w)): n for n, w in _BY_NAME.items() if n != "NONE"}


def _topic(request: web.Request) -> TopicName:
    tenant = check_name(request.match_info["tenant"], "tenant")
    ns = check_name(request.match_info["namespace"], "namespace")
    try:
        return TopicName.parse(f"persistent://{tenant}/{ns}/{request.match_info['topic']}")
    except InvalidTopicNameError as err:
        raise AdminError(412, str(err)) from None


def _data(stored: schemas.StoredSchema) -> str:
    """The definition as Pulsar's GetSchemaResponse shows it: text for the record types, the
    bytes as base64 otherwise (KeyValue's binary layout)."""
    if stored.type in _TEXT_TYPES:
        return stored.data.decode("utf-8", errors="replace")
    return base64.b64encode(stored.data).decode() if stored.data else ""


def _response(stored: schemas.StoredSchema) -> dict[str, Any]:
    return {
        "version": stored.version,
        "type": _NAME_OF.get(stored.type, "BYTES"),
        "timestamp": stored.timestamp,
        "data": _data(stored),
        "properties": stored.properties,
    }


def _payload(value: Any) -> pb.Schema:
    """PostSchemaPayload ``{type, schema, properties}`` as a wire Schema."""
    if not isinstance(value, dict):
        raise AdminError(400, "a schema must be a JSON object {type, schema, properties}")
    kind = value.get("type")
    if not isinstance(kind, str) or kind.upper() not in _BY_NAME:
        raise AdminError(400, f"unknown schema type {kind!r} (one of {sorted(_BY_NAME)})")
    definition = value.get("schema", "")
    if not isinstance(definition, str):
        raise AdminError(400, "schema must be a string (the schema definition)")
    props = value.get("properties") or {}
    if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()):
        raise AdminError(400, "properties must be an object of strings")
    wire = int(pb.Schema.Type.Value(_BY_NAME[kind.upper()]))
    data = definition.encode()
    if wire not in _TEXT_TYPES and definition:
        try:
            data = base64.b64decode(definition, validate=True)
        except ValueError:
            raise AdminError(400, f"a {kind} schema's definition must be base64") from None
    schema = pb.Schema(name="", schema_data=data, type=wire)  # type: ignore[arg-type]
    for k, v in props.items():
        schema.properties.add(key=str(k), value=v)
    return schema


PAYLOAD = validation.Body(
    {
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "schema": {"type": "string"},
            "properties": {"type": "object"},
        },
        "required": ["type"],
    },
    _payload,
    "PostSchemaPayload",
)


async def get_schema(request: web.Request) -> web.Response:
    """The latest schema of a topic (404 when it has none)."""
    topic = _topic(request)
    stored = await service(request).schemas.get(topic)
    if stored is None:
        raise AdminError(404, "Schema not found")
    return web.json_response(_response(stored))


async def get_schema_version(request: web.Request) -> web.Response:
    """One version of a topic's schema."""
    topic = _topic(request)
    version = validation.path_integer(request.match_info["version"], "schema version", minimum=0)
    stored = await service(request).schemas.get(topic, version)
    if stored is None:
        raise AdminError(404, "Schema not found")
    return web.json_response(_response(stored))


async def get_all_schemas(request: web.Request) -> web.Response:
    """Every version of a topic's schema, oldest first."""
    history = await service(request).schemas.history(_topic(request))
    if not history:
        raise AdminError(404, "Schema not found")
    return web.json_response({"getSchemaResponses": [_response(s) for s in history]})


@accepts(PAYLOAD)
async def post_schema(request: web.Request) -> web.Response:
    """Upload a schema: its existing version, or a new one when the namespace's
    compatibility strategy allows it (409 when it does not, as Pulsar)."""
    topic = _topic(request)
    svc = service(request)
    try:
        version = await svc.schemas.get_or_create(
            topic, parsed(request), await svc.schema_policy(topic)
        )
    except BrokerError as err:
        if err.code == pb.IncompatibleSchema:
            raise AdminError(409, err.message) from None
        raise
    return web.json_response({"version": {"version": version}})


@accepts(PAYLOAD)
async def check_compatibility(request: web.Request) -> web.Response:
    """Whether a schema could be added (Pulsar's IsCompatibilityResponse)."""
    topic = _topic(request)
    svc = service(request)
    policy = await svc.schema_policy(topic)
    history = await svc.schemas.history(topic)
    try:
        schema_compat.check(
            policy.strategy, parsed(request), [(s.type, s.data, s.properties) for s in history]
        )
        compatible = True
    except schema_compat.IncompatibleSchemaError:
        compatible = False
    strategy = policy.strategy
    if strategy is schema_compat.Strategy.UNDEFINED:
        strategy = schema_compat.DEFAULT
    return web.json_response(
        {"compatibility": compatible, "schemaCompatibilityStrategy": strategy.value}
    )


@accepts(PAYLOAD)
async def version_of_schema(request: web.Request) -> web.Response:
    """The version a schema has in the topic's history (the newest with its type and
    definition), Pulsar's LongSchemaVersion ``{version}``; -1 when it has none, as Pulsar."""
    schema: pb.Schema = parsed(request)
    history = await service(request).schemas.history(_topic(request))
    found = [s.version for s in history if s.same_definition(schema)]
    return web.json_response({"version": found[-1] if found else -1})


async def delete_schema(request: web.Request) -> web.Response:
    """Delete a topic's schema history (producers then start a new one). The answer is
    Pulsar's DeleteSchemaResponse ``{version}``: the version after the newest, which Pulsar's
    deletion marker takes (Magnetar stores no marker: the next history starts at 0)."""
    topic = _topic(request).base_name
    svc = service(request)
    history = await svc.schemas.history(topic)
    if not history:
        raise AdminError(404, "Schema not found")
    await svc.store.delete_prefix(keys.schemas(topic.tenant, topic.namespace, topic.local_name))
    return web.json_response({"version": history[-1].version + 1})


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{BASE}/schema", get_schema)
    router.add_post(f"{BASE}/schema", post_schema)
    router.add_delete(f"{BASE}/schema", delete_schema)
    router.add_get(f"{BASE}/schema/{{version}}", get_schema_version)
    router.add_get(f"{BASE}/schemas", get_all_schemas)
    router.add_post(f"{BASE}/compatibility", check_compatibility)
    router.add_post(f"{BASE}/version", version_of_schema)
