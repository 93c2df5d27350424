"""Tenants, namespaces and namespace policies through the admin API, good and bad input."""

from __future__ import annotations

import pytest

from tests.integration.admin.conftest import Admin


def test_clusters_and_brokers(admin: Admin) -> None:
    assert admin.get("/clusters") == (200, ["standalone"])
    status, cluster = admin.get("/clusters/standalone")
    assert status == 200 and cluster["brokerServiceUrl"].startswith("pulsar://")
    status, brokers = admin.get("/brokers/standalone")
    assert status == 200 and len(brokers) == 1
    assert admin.get("/clusters/nope")[0] == 404


def test_tenant_lifecycle(admin: Admin) -> None:
    assert "public" in admin.get("/tenants")[1]
    info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert admin.put("/tenants/t-life", info)[0] == 204
    assert admin.get("/tenants/t-life") == (200, info)
    assert "t-life" in admin.get("/tenants")[1]
    assert admin.put("/tenants/t-life", info)[0] == 409
    assert admin.post("/tenants/t-life", {"adminRoles": ["a", "b"]})[0] == 204
    assert admin.get("/tenants/t-life")[1]["adminRoles"] == ["a", "b"]
    assert admin.put("/namespaces/t-life/ns")[0] == 204
    status, body = admin.delete("/tenants/t-life")
    assert status == 412 and "namespaces" in body["reason"]
    assert admin.delete("/namespaces/t-life/ns")[0] == 204
    assert admin.delete("/tenants/t-life")[0] == 204
    assert admin.get("/tenants/t-life")[0] == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("GET", "/tenants/missing", None, 404, "does not exist"),
        ("PUT", "/tenants/bad-json", b"{nope", 400, "malformed JSON"),
        ("PUT", "/tenants/bad-roles", b'{"adminRoles": "ops"}', 400, "adminRoles"),
        ("PUT", "/tenants/bad-field", b'{"colour": 1}', 400, "unknown tenant info fields"),
        ("PUT", "/tenants/no-cluster", b'{"allowedClusters": ["mars"]}', 412, "mars"),
        ("POST", "/tenants/missing", b'{"adminRoles": []}', 404, "does not exist"),
        ("DELETE", "/tenants/missing", None, 404, "does not exist"),
        ("PATCH", "/tenants/public", None, 405, "Method Not Allowed"),
        ("PUT", "/tenants/bad%20name", None, 412, ""),
    ],
)
def test_tenant_bad_input(admin: Admin, method, path, body, status, reason) -> None:
    got, answer = admin.call(method, path, raw=body)
    assert got == status, answer
    assert isinstance(answer, dict) and reason in answer["reason"]
    assert admin.get("/tenants")[0] == 200  # still serving


def test_namespace_policies(admin: Admin) -> None:
    assert admin.put("/namespaces/public/pol")[0] == 204
    assert "public/pol" in admin.get("/namespaces/public")[1]
    assert admin.put("/namespaces/public/pol")[0] == 409
    status, policies = admin.get("/namespaces/public/pol")
    assert status == 200 and policies["bundles"]["numBundles"] >= 1

    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 512}
    assert admin.post("/namespaces/public/pol/retention", retention)[0] == 204
    assert admin.get("/namespaces/public/pol/retention") == (200, retention)
    assert admin.post("/namespaces/public/pol/messageTTL", 120)[0] == 204
    assert admin.get("/namespaces/public/pol/messageTTL") == (200, 120)
    assert admin.post("/namespaces/public/pol/deduplication", True)[0] == 204
    assert admin.get("/namespaces/public/pol/deduplication") == (200, True)
    auto = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    assert admin.post("/namespaces/public/pol/autoTopicCreation", auto)[0] == 204
    assert admin.get("/namespaces/public/pol/autoTopicCreation") == (200, auto)
    assert admin.delete("/namespaces/public/pol/autoTopicCreation")[0] == 204
    assert admin.get("/namespaces/public/pol/autoTopicCreation") == (200, None)
    assert admin.get("/namespaces/public/pol")[1]["message_ttl_in_seconds"] == 120
    quota = {"limitSize": 1 << 30, "limitTime": 3600, "policy": "producer_exception"}
    assert admin.post("/namespaces/public/pol/backlogQuota", quota)[0] == 204
    assert admin.get("/namespaces/public/pol/backlogQuotaMap") == (
        200,
        {"destination_storage": quota},
    )
    status, body = admin.post("/namespaces/public/pol/backlogQuota", {"policy": "drop-it"})
    assert status == 400 and "policy must be" in body["reason"]
    assert admin.delete("/namespaces/public/pol/backlogQuota")[0] == 204
    assert admin.get("/namespaces/public/pol/backlogQuotaMap") == (200, {})
    assert admin.delete("/namespaces/public/pol")[0] == 204
    assert admin.get("/namespaces/public/pol")[0] == 404


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("retention", b'{"retentionTimeInMinutes": -2}', "retentionTimeInMinutes"),
        ("retention", b'{"retentionTime": 5}', "unknown retention fields"),
        ("retention", b"[1, 2]", "retention must be"),
        ("messageTTL", b"-1", "message TTL"),
        ("messageTTL", b'"ten"', "message TTL"),
        ("deduplication", b'"yes"', "true or false"),
        ("autoTopicCreation", b'{"topicType": "partitioned"}', "allowAutoTopicCreation"),
        ("autoTopicCreation", b'{"allowAutoTopicCreation": true, "topicType": "x"}', "topicType"),
        (
            "autoTopicCreation",
            b'{"allowAutoTopicCreation": true, "topicType": "partitioned"}',
            "defaultNumPartitions",
        ),
        ("messageTTL", b"", "body is required"),
    ],
)
def test_policy_bad_input(admin: Admin, path: str, body: bytes, reason: str) -> None:
    status, answer = admin.call("POST", f"/namespaces/public/default/{path}", raw=body)
    assert status == 400, answer
    assert reason in answer["reason"]
    assert admin.call("POST", f"/namespaces/public/nope/{path}", raw=b"1")[0] in (400, 404)


def test_namespace_bad_input(admin: Admin) -> None:
    assert admin.get("/namespaces/nobody")[0] == 404
    assert admin.put("/namespaces/nobody/ns")[0] == 404
    assert admin.get("/namespaces/public/missing")[0] == 404
    assert admin.delete("/namespaces/public/missing")[0] == 404
    status, body = admin.call("PUT", "/namespaces/public/bad-body", raw=b"[]")
    assert status == 400 and "JSON object" in body["reason"]


def test_openapi_document_lists_the_served_endpoints(admin: Admin) -> None:
    status, doc = admin.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    paths = doc["paths"]
    assert set(paths["/admin/v2/tenants/{tenant}"]) == {"get", "put", "post", "delete"}
    reset = (
        "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/resetcursor"
    )
    assert "post" in paths[reset]
    stats = paths["/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats"]["get"]
    assert [p["name"] for p in stats["parameters"]] == ["domain", "tenant", "namespace", "topic"]
    assert "$ref" in str(stats["responses"]["404"])
    # every documented operation answers (not 404 for "no such route"): spot-check them all
    for path, ops in paths.items():
        text_answers = ("/health", "/docs")
        if "{" not in path and "get" in ops and not path.endswith(text_answers):
            assert admin.get(path.removeprefix("/admin/v2"))[0] == 200, path
