"""Bad input on every kind of endpoint: malformed JSON, wrong JSON types, illegal values,
unknown names, wrong methods. Each gets its 4xx and a JSON reason, never a 500 (the module's
standalone fixture also checks its log for the catch-all's line), and the broker keeps
serving admin calls and clients afterwards."""

from __future__ import annotations

import pulsar
import pytest

from tests.integration.admin.conftest import Admin

T = "/persistent/public/default/bad-input-t"
NSP = "/namespaces/public/default"

CASES = [
    # malformed or mistyped bodies
    ("PUT", "/tenants/bad-json", b"{nope", 400, "malformed JSON"),
    ("PUT", "/tenants/deep", b"[" * 50_000 + b"]" * 50_000, 400, "malformed JSON"),
    ("PUT", "/tenants/not-utf8", b'{"adminRoles": ["\xff"]}', 400, "malformed JSON"),
    ("PUT", "/tenants/bad-roles", b'{"adminRoles": "ops"}', 400, "adminRoles"),
    ("PUT", "/tenants/bad-field", b'{"colour": 1}', 400, "unknown tenant info fields"),
    ("PUT", "/tenants/no-cluster", b'{"allowedClusters": ["mars"]}', 412, "mars"),
    ("POST", "/tenants/public", b"", 400, "body is required"),
    ("PUT", "/namespaces/public/bad-body", b"[]", 400, "JSON object"),
    ("PUT", "/namespaces/public/bad-field", b'{"message_ttl": 5}', 400, "unknown policy fields"),
    ("PUT", "/namespaces/public/bad-ttl", b'{"message_ttl_in_seconds": -5}', 400, "message TTL"),
    ("PUT", "/namespaces/public/bad-bundles", b'{"bundles": {"numBundles": 0}}', 400, "numBundles"),
    ("PUT", "/namespaces/public/bad-repl", b'{"replication_clusters": ["mars"]}', 403, "[mars]"),
    ("POST", f"{NSP}/replication", b"[]", 412, "ClusterIds should not be null or empty"),
    ("POST", f"{NSP}/replication", b'["mars"]', 403, "Invalid cluster id: mars"),
    ("POST", f"{NSP}/replication", b'"standalone"', 400, "list of names"),
    ("PUT", "/clusters/bad-url", b'{"serviceUrl": "ftp://x"}', 400, "serviceUrl must start"),
    ("PUT", "/clusters/bad-field", b'{"colour": "x"}', 400, "unknown cluster data fields"),
    ("PUT", "/clusters/standalone", b"{}", 409, "Cluster already exists"),
    ("POST", "/clusters/nope", b"{}", 404, "does not exist"),
    ("DELETE", "/clusters/standalone", None, 412, "local cluster"),
    ("POST", f"{NSP}/retention", b'{"retentionTimeInMinutes": -2}', 400, "retentionTime"),
    ("POST", f"{NSP}/retention", b'{"retentionTime": 5}', 400, "unknown retention fields"),
    ("POST", f"{NSP}/retention", b"[1, 2]", 400, "retention must be"),
    ("POST", f"{NSP}/messageTTL", b"-1", 400, "message TTL"),
    ("POST", f"{NSP}/messageTTL", b'"ten"', 400, "message TTL"),
    ("POST", f"{NSP}/messageTTL", b"1.5", 400, "message TTL"),
    ("POST", f"{NSP}/messageTTL", b"", 400, "body is required"),
    ("POST", f"{NSP}/deduplication", b'"yes"', 400, "true or false"),
    ("POST", f"{NSP}/autoTopicCreation", b'{"topicType": "partitioned"}', 400, "allowAuto"),
    (
        "POST",
        f"{NSP}/autoTopicCreation",
        b'{"allowAutoTopicCreation": true, "topicType": "x"}',
        400,
        "topicType",
    ),
    (
        "POST",
        f"{NSP}/autoTopicCreation",
        b'{"allowAutoTopicCreation": true, "topicType": "partitioned"}',
        400,
        "defaultNumPartitions",
    ),
    ("POST", f"{NSP}/backlogQuota", b'{"policy": "drop-it"}', 400, "policy must be"),
    ("POST", f"{NSP}/backlogQuota?backlogQuotaType=disk", b"{}", 400, "backlogQuotaType"),
    ("PUT", f"{NSP}/offloadThreshold", b"-2", 400, "offloadThreshold"),
    ("PUT", f"{NSP}/offloadDeletionLagMs", b"true", 400, "offloadDeletionLagMs"),
    ("PUT", "/persistent/public/default/bad-parts/partitions", b"0", 400, "partitions"),
    ("PUT", "/persistent/public/default/a-partition-x/partitions", b"3", 412, "-partition-"),
    ("PUT", "/persistent/public/default/p-partition-1/partitions", b"3", 412, "-partition-"),
    ("PUT", "/persistent/public/default/bad-parts/partitions", b'"three"', 400, "partitions"),
    ("PUT", "/persistent/public/default/bad-parts/partitions", b"100000000", 400, "partitions"),
    ("PUT", "/persistent/public/default/bad-parts/partitions", b"{", 400, "malformed JSON"),
    ("PUT", f"{T}/subscription/s", b'{"ledgerId": 1}', 400, "message id"),
    ("POST", f"{T}/subscription/s/resetcursor", b"[]", 400, "message id"),
    ("POST", f"{T}/subscription/s/skip/-1", None, 400, "number of messages"),
    ("POST", f"{T}/subscription/s/resetcursor/99999999999999999999999", None, 400, "timestamp"),
    ("DELETE", f"{T}?force=maybe", None, 400, "force"),
    ("GET", f"{T}/partitioned-stats?perPartition=2", None, 400, "perPartition"),
    # unknown names
    ("GET", "/tenants/missing", None, 404, "does not exist"),
    ("POST", "/tenants/missing", b'{"adminRoles": []}', 404, "does not exist"),
    ("DELETE", "/tenants/missing", None, 404, "does not exist"),
    ("PUT", "/tenants/bad%20name", None, 412, "tenant name"),
    ("GET", "/clusters/nope", None, 404, "does not exist"),
    ("GET", "/brokers/nope", None, 404, "does not exist"),
    ("GET", "/namespaces/nobody", None, 404, "does not exist"),
    ("PUT", "/namespaces/nobody/ns", None, 404, "does not exist"),
    ("GET", "/namespaces/public/missing", None, 404, "does not exist"),
    ("DELETE", "/namespaces/public/missing", None, 404, "does not exist"),
    ("POST", "/namespaces/public/missing/messageTTL", b"5", 404, "does not exist"),
    ("GET", "/persistent/public/missing-ns", None, 404, "does not exist"),
    ("GET", "/bogus/public/default", None, 404, "domain"),
    ("GET", "/persistent/public/default/missing-topic/stats", None, 404, "does not exist"),
    ("GET", "/persistent/public/default/missing-topic/internalStats", None, 404, "not exist"),
    ("GET", "/persistent/public/default/missing-topic/subscriptions", None, 404, "not exist"),
    ("GET", "/persistent/public/default/missing-topic/partitioned-stats", None, 404, "not exist"),
    ("DELETE", "/persistent/public/default/missing-topic", None, 404, "does not exist"),
    ("DELETE", "/persistent/public/default/missing-topic/partitions", None, 404, "not exist"),
    ("POST", "/persistent/public/default/never-created/partitions", b"5", 404, "not exist"),
    ("PUT", "/persistent/public/default/missing-topic/unload", None, 404, "does not exist"),
    ("POST", "/persistent/public/default/missing-topic/terminate", None, 404, "not exist"),
    ("PUT", "/persistent/public/default/x-partition-0/partitions", b"2", 412, "partition"),
    ("GET", "/persistent/public/default/bad%5Cname/stats", None, 412, "invalid topic name"),
    ("POST", f"{T}/subscription/missing/skip_all", None, 404, "does not exist"),
    ("DELETE", f"{T}/subscription/missing", None, 404, ""),
    ("GET", "/no/such/endpoint/anywhere/at/all/really", None, 404, "Not Found"),
    # wrong methods
    ("PATCH", "/tenants/public", None, 405, "Method Not Allowed"),
    ("PATCH", "/clusters/standalone", b"{}", 405, "Method Not Allowed"),
    ("DELETE", "/clusters", None, 405, "Method Not Allowed"),
    ("GET", f"{NSP}/backlogQuota", None, 405, "Method Not Allowed"),
    ("POST", f"{T}/stats", None, 405, "Method Not Allowed"),
    ("GET", f"{T}/terminate", None, 405, "Method Not Allowed"),
    ("GET", f"{T}/unload", None, 405, "Method Not Allowed"),
    ("PUT", "/openapi.json", None, 405, "Method Not Allowed"),
]


@pytest.fixture(scope="module", autouse=True)
def topic_with_subscription(standalone: object) -> None:
    admin = Admin(standalone.http_url)  # type: ignore[attr-defined]
    assert admin.put(T)[0] == 204
    assert admin.put(f"{T}/subscription/s")[0] == 204


@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "reason"),
    CASES,
    ids=[f"{m} {p[:60]} {s}" for m, p, _, s, _ in CASES],
)
def test_bad_input_is_a_4xx_with_a_reason(
    admin: Admin, method: str, path: str, raw: bytes | None, status: int, reason: str
) -> None:
    got, answer = admin.call(method, path, raw=raw)
    assert got == status, answer
    assert isinstance(answer, dict) and isinstance(answer.get("reason"), str), answer
    assert reason in answer["reason"], answer


def test_nothing_was_created_by_refused_requests(admin: Admin) -> None:
    tenants = admin.get("/tenants")[1]
    assert not {"bad-json", "deep", "not-utf8", "bad-roles", "bad-field", "no-cluster"} & set(
        tenants
    )
    namespaces = admin.get("/namespaces/public")[1]
    assert not any(ns.startswith("public/bad-") for ns in namespaces)
    assert admin.get("/persistent/public/default/bad-parts/partitions")[1] == {"partitions": 0}
    assert admin.get(f"{NSP}/messageTTL") == (200, None)
    assert admin.get(f"{NSP}/retention") == (200, None)


def test_the_broker_keeps_serving(admin: Admin, client: pulsar.Client) -> None:
    assert admin.get("/tenants")[0] == 200
    consumer = client.subscribe("persistent://public/default/still-alive", "s")
    producer = client.create_producer("persistent://public/default/still-alive")
    producer.send(b"ok")
    assert consumer.receive(timeout_millis=10_000).data() == b"ok"
    producer.close()
    consumer.close()
