"""Schema endpoints of the admin API (``/admin/v2/schemas/...``) and the namespace schema
policies, with the official client registering schemas."""

from __future__ import annotations

import json

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pulsar.schema import AvroSchema, Record, String

from tests.integration.admin.conftest import Admin
from tests.support.standalone import StandaloneProc

S = "/schemas/public/default"


class Order(Record):
    id = String()


def _avro(*fields: str, optional: tuple[str, ...] = ()) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": "Order",
            "fields": [
                {"name": f, "type": ["null", "string"], "default": None}
                if f in optional
                else {"name": f, "type": "string"}
                for f in fields
            ],
        }
    )


def test_history_upload_compatibility_delete(admin: Admin, client: pulsar.Client) -> None:
    topic = "schema-admin"
    client.create_producer(topic, schema=AvroSchema(Order)).close()
    status, latest = admin.get(f"{S}/{topic}/schema")
    assert status == 200
    assert (latest["version"], latest["type"]) == (0, "AVRO")
    assert json.loads(latest["data"])["fields"][0]["name"] == "id"

    evolved = json.loads(latest["data"])  # the client's definition, plus an optional field
    evolved["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    v1 = {"type": "AVRO", "schema": json.dumps(evolved), "properties": {}}
    assert admin.post(f"{S}/{topic}/compatibility", v1) == (
        200,
        {"compatibility": True, "schemaCompatibilityStrategy": "FULL"},
    )
    assert admin.post(f"{S}/{topic}/schema", v1) == (200, {"version": {"version": 1}})
    assert admin.post(f"{S}/{topic}/schema", v1)[1] == {"version": {"version": 1}}  # the same
    # getVersionBySchema: the version a definition has; -1 for one never stored (Pulsar's)
    assert admin.post(f"{S}/{topic}/version", v1) == (200, {"version": 1})
    v0 = {"type": "AVRO", "schema": latest["data"], "properties": {}}
    assert admin.post(f"{S}/{topic}/version", v0) == (200, {"version": 0})
    other = {"type": "AVRO", "schema": _avro("x"), "properties": {}}
    assert admin.post(f"{S}/{topic}/version", other) == (200, {"version": -1})
    assert admin.post(f"{S}/{topic}/version", {"type": "NOPE"})[0] == 400

    required = {**evolved, "fields": [*evolved["fields"], {"name": "must", "type": "string"}]}
    bad = {"type": "AVRO", "schema": json.dumps(required)}  # a new field without a default
    assert admin.post(f"{S}/{topic}/compatibility", bad)[1]["compatibility"] is False
    status, body = admin.post(f"{S}/{topic}/schema", bad)
    assert status == 409 and "must" in body["reason"]

    status, everything = admin.get(f"{S}/{topic}/schemas")
    assert [s["version"] for s in everything["getSchemaResponses"]] == [0, 1]
    assert admin.get(f"{S}/{topic}/schema/1")[1]["data"] == v1["schema"]
    assert admin.get(f"{S}/{topic}/schema/5")[0] == 404

    assert admin.delete(f"{S}/{topic}/schema") == (200, {"version": 2})  # DeleteSchemaResponse
    assert admin.get(f"{S}/{topic}/schema")[0] == 404
    client.create_producer(topic, schema=pulsar.schema.StringSchema()).close()  # a new history
    assert admin.get(f"{S}/{topic}/schema")[1]["type"] == "STRING"


def test_namespace_schema_policies(admin: Admin) -> None:
    ns = "/namespaces/public/schema-policies"
    assert admin.put(ns)[0] == 204
    assert admin.get(f"{ns}/schemaCompatibilityStrategy")[1] == "UNDEFINED"
    assert admin.put(f"{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")[0] == 204
    assert admin.get(f"{ns}/schemaCompatibilityStrategy")[1] == "ALWAYS_COMPATIBLE"
    assert admin.post(f"{ns}/isAllowAutoUpdateSchema", False)[0] == 204
    assert admin.get(f"{ns}/isAllowAutoUpdateSchema")[1] is False
    assert admin.post(f"{ns}/schemaValidationEnforced", True)[0] == 204
    assert admin.get("/namespaces/public/schema-policies")[1]["schema_validation_enforced"]
    t = "/schemas/public/schema-policies/t"
    first = {"type": "AVRO", "schema": _avro("id")}
    assert admin.post(f"{t}/schema", first)[0] == 200  # a topic's first schema is allowed
    other = {"type": "AVRO", "schema": _avro("totally", "different")}
    status, body = admin.post(f"{t}/schema", other)
    assert status == 409 and "auto updating is disabled" in body["reason"]
    assert admin.post(f"{ns}/isAllowAutoUpdateSchema", True)[0] == 204
    assert admin.post(f"{t}/schema", other)[1] == {"version": {"version": 1}}  # ALWAYS_COMPATIBLE


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", f"{S}/x/schema", {"type": "NOPE", "schema": ""}, 400, "unknown schema type"),
        ("POST", f"{S}/x/schema", [1, 2], 400, "JSON object"),
        ("POST", f"{S}/x/schema", {"type": "AVRO", "schema": 5}, 400, "string"),
        ("POST", f"{S}/x/schema", {"type": "STRING", "schema": "%%%"}, 400, "base64"),
        ("GET", f"{S}/x/schema/minus", None, 400, "schema version"),
        ("GET", f"{S}/never-had-one/schema", None, 404, "Schema not found"),
        ("PUT", "/namespaces/public/default/schemaCompatibilityStrategy", "LOOSE", 400, "one of"),
    ],
)
def test_bad_input(
    admin: Admin, method: str, path: str, body: object, status: int, reason: str
) -> None:
    got, answer = admin.call(method, path, body)
    assert got == status
    assert reason in json.dumps(answer)


def test_schema_operations_are_timed(
    standalone: StandaloneProc, admin: Admin, client: pulsar.Client
) -> None:
    """pulsar_schema_put_ops_latency / pulsar_schema_get_ops_latency (docs/metrics.md): a
    producer's schema is a get-or-create, the admin read a get."""
    topic = "schema-timed"
    client.create_producer(topic, schema=AvroSchema(Order)).close()
    assert admin.get(f"{S}/{topic}/schema")[0] == 200
    counts = {
        sample.name: sample.value
        for family in text_string_to_metric_families(standalone.metrics())
        for sample in family.samples
        if sample.labels.get("namespace") == "public/default"
        and sample.name
        in ("pulsar_schema_put_ops_latency_count", "pulsar_schema_get_ops_latency_count")
    }
    assert counts["pulsar_schema_put_ops_latency_count"] >= 1
    assert counts["pulsar_schema_get_ops_latency_count"] >= 1
