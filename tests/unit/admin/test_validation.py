"""Admin request bodies: legal values pass (normalised), illegal ones are a 4xx with a reason
naming the field -- never an exception that would become a 500."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.broker.admin import validation as v
from magnetar.broker.admin.common import AdminError
from magnetar.wire.ids import MessageId


def rejects(parse: Any, value: Any, status: int = 400) -> str:
    with pytest.raises(AdminError) as err:
        parse(value)
    assert err.value.status == status
    assert err.value.reason
    return err.value.reason


def test_integer_refuses_bools_floats_and_out_of_range() -> None:
    assert v.integer(5, "x", minimum=0) == 5
    assert "integer" in rejects(lambda x: v.integer(x, "x", minimum=0), True)
    assert "integer" in rejects(lambda x: v.integer(x, "x", minimum=0), 3.0)
    assert ">= 0" in rejects(lambda x: v.integer(x, "x", minimum=0), -1)
    assert "between 1 and 3" in rejects(lambda x: v.integer(x, "x", minimum=1, maximum=3), 4)
    assert v.path_integer("12", "n", minimum=0) == 12
    assert "integer" in rejects(lambda x: v.path_integer(x, "n", minimum=0), "12x")


def test_retention() -> None:
    assert v.retention({"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}) == {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": -1,
    }
    assert v.retention({}) == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert "retentionTimeInMinutes" in rejects(v.retention, {"retentionTimeInMinutes": -2})
    assert "unknown retention fields" in rejects(v.retention, {"retentionTime": 5})
    assert "JSON object" in rejects(v.retention, [1, 2])
    assert "integer" in rejects(v.retention, {"retentionSizeInMB": "1G"})


@pytest.mark.parametrize("value", [-1, "10", 1.5, None, False])
def test_message_ttl_rejects(value: Any) -> None:
    assert "message TTL" in rejects(v.message_ttl, value)


def test_message_ttl_and_dedup_accept() -> None:
    assert v.message_ttl(0) == 0 and v.message_ttl(3600) == 3600
    assert v.deduplication(True) is True
    assert "true or false" in rejects(v.deduplication, "yes")
    assert "true or false" in rejects(v.deduplication, 1)


def test_partitions() -> None:
    assert v.partitions(1) == 1 and v.partitions(v.MAX_PARTITIONS) == v.MAX_PARTITIONS
    for bad in (0, -3, v.MAX_PARTITIONS + 1, "3", 2.0, None):
        assert "partitions" in rejects(v.partitions, bad)


def test_auto_topic_creation() -> None:
    partitioned = {"allowAutoTopicCreation": True, "topicType": "partitioned",
                   "defaultNumPartitions": 3}  # fmt: skip
    assert v.auto_topic_creation(partitioned) == partitioned
    assert v.auto_topic_creation({"allowAutoTopicCreation": False}) == {
        "allowAutoTopicCreation": False,
        "topicType": "non-partitioned",
    }
    assert "allowAutoTopicCreation" in rejects(v.auto_topic_creation, {"topicType": "partitioned"})
    assert "topicType" in rejects(
        v.auto_topic_creation, {"allowAutoTopicCreation": True, "topicType": "x"}
    )
    assert "defaultNumPartitions" in rejects(
        v.auto_topic_creation, {"allowAutoTopicCreation": True, "topicType": "partitioned"}
    )
    assert "unknown" in rejects(v.auto_topic_creation, {"allowAutoTopicCreation": True, "x": 1})


def test_backlog_quota() -> None:
    assert v.backlog_quota({"limitSize": 10, "limitTime": 5, "policy": "producer_exception"}) == {
        "limit": 10,
        "limitSize": 10,
        "limitTime": 5,
        "policy": "producer_exception",
    }
    assert v.backlog_quota({"limit": 7})["limitSize"] == 7  # the old field name
    assert "policy must be" in rejects(v.backlog_quota, {"policy": "drop-it"})
    assert "limitSize" in rejects(v.backlog_quota, {"limitSize": -5})
    assert "unknown" in rejects(v.backlog_quota, {"size": 1})
    assert v.quota_type(None) == "destination_storage"
    assert v.quota_type("message_age") == "message_age"
    assert "backlogQuotaType" in rejects(v.quota_type, "disk")


def test_bundles() -> None:
    two = v.bundles({"numBundles": 2})
    assert two == {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2}
    assert v.bundles({"boundaries": two["boundaries"]}) == two
    assert "numBundles" in rejects(v.bundles, {"numBundles": 0})
    assert "numBundles" in rejects(v.bundles, {"numBundles": v.MAX_BUNDLES + 1})
    assert "start at" in rejects(v.bundles, {"boundaries": ["0x00000001", "0xffffffff"]})
    assert "increasing" in rejects(
        v.bundles, {"boundaries": ["0x00000000", "0x90000000", "0x80000000", "0xffffffff"]}
    )
    assert "hex" in rejects(v.bundles, {"boundaries": ["zero", "0xffffffff"]})
    assert "does not match" in rejects(
        v.bundles, {"numBundles": 3, "boundaries": two["boundaries"]}
    )


def test_namespace_policies_checks_every_field_and_refuses_unknown_ones() -> None:
    assert v.namespace_policies(None) == {}
    body = {
        "message_ttl_in_seconds": 30,
        "retention_policies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2},
        "bundles": {"numBundles": 1},
        "deduplicationEnabled": True,
        "format": 1,
    }
    out = v.namespace_policies(body)
    assert out["message_ttl_in_seconds"] == 30 and "format" not in out
    assert out["bundles"]["numBundles"] == 1
    assert "unknown policy fields" in rejects(v.namespace_policies, {"message_ttl": 30})
    assert "message TTL" in rejects(v.namespace_policies, {"message_ttl_in_seconds": -1})
    assert "JSON object" in rejects(v.namespace_policies, [])
    assert "replication_clusters" in rejects(v.namespace_policies, {"replication_clusters": "a"})


def test_namespace_policies_round_trip_what_get_answers() -> None:
    from magnetar.broker import policies

    record = policies.default_namespace_policies(4)
    quota = {"limitSize": 1, "limitTime": -1, "policy": "producer_exception"}
    record["backlog_quota_map"] = {"destination_storage": quota}
    assert v.namespace_policies(record)["bundles"] == record["bundles"]


def test_tenant_info() -> None:
    assert v.tenant_info(None, clusters=["c1"]) == {"adminRoles": [], "allowedClusters": ["c1"]}
    assert v.tenant_info({"adminRoles": ["a"]}, clusters=["c1"], default_all=False) == {
        "adminRoles": ["a"]
    }
    assert "adminRoles" in rejects(lambda x: v.tenant_info(x, clusters=[]), {"adminRoles": "a"})
    assert "unknown" in rejects(lambda x: v.tenant_info(x, clusters=[]), {"colour": 1})
    reason = rejects(
        lambda x: v.tenant_info(x, clusters=["c1"]), {"allowedClusters": ["mars"]}, 412
    )
    assert "mars" in reason


def test_message_id() -> None:
    assert v.message_id({"ledgerId": 3, "entryId": 4}) == MessageId(3, 4)
    assert v.message_id({"ledgerId": 3, "entryId": 4, "partitionIndex": 1}) == MessageId(3, 4, 1)
    bad_ids = [
        {},
        {"ledgerId": "x", "entryId": 1},
        {"ledgerId": True, "entryId": 1},
        [3, 4],
        {"ledgerId": 2**64, "entryId": 0},
        {"ledgerId": 1, "entryId": 1, "x": 0},
    ]
    for bad in bad_ids:
        reason = rejects(v.message_id, bad)
        assert "message id" in reason or "out of range" in reason


def test_query_flags_and_timestamps() -> None:
    assert v.query_flag(None, "force") is False
    assert v.query_flag("TRUE", "force") is True
    assert "force" in rejects(lambda x: v.query_flag(x, "force"), "yes")
    assert v.timestamp("1700000000000") == 1700000000000
    assert "timestamp" in rejects(v.timestamp, "-5")
    assert "timestamp" in rejects(v.timestamp, "soon")
    assert "out of range" in rejects(v.timestamp, str(2**64))


def test_every_body_spec_has_a_schema() -> None:
    specs = [x for x in vars(v).values() if isinstance(x, v.Body)]
    assert len(specs) >= 10
    for spec in specs:
        assert spec.schema.get("type") in ("object", "array", "integer", "boolean", "string")


def test_namespace_policies_java_admin_defaults_accepted_other_values_refused() -> None:
    """The Java admin client sends every field of ``new Policies()`` on namespace creation:
    Magnetar accepts the ones it does not implement at their default (not stored) and refuses
    anything else by name."""
    body = {**v.UNSUPPORTED_POLICY_DEFAULTS, "bundles": {"numBundles": 8}}
    assert v.namespace_policies(body) == {"bundles": v.bundles({"numBundles": 8})}
    message = rejects(v.namespace_policies, {"encryption_required": True})
    assert "not supported" in message and "encryption_required" in message
    assert "subscription_auth_mode" in rejects(
        v.namespace_policies, {"subscription_auth_mode": "Prefix"}
    )
    # the schema policies are implemented: stored
    schema = {"schema_compatibility_strategy": "BACKWARD", "is_allow_auto_update_schema": False}
    assert v.namespace_policies(schema) == schema
    assert "strategy" in rejects(v.namespace_policies, {"schema_compatibility_strategy": "X"})


def test_message_id_accepts_the_java_clients_fields() -> None:
    body = {"ledgerId": 3, "entryId": 4, "partitionIndex": -1, "batchIndex": -1, "batchSize": 0}
    assert tuple(v.message_id(body)) == (3, 4, -1, -1)
    assert tuple(v.message_id({**body, "isExcluded": False, "properties": {}})) == (3, 4, -1, -1)
    assert "isExcluded" in rejects(v.message_id, {**body, "isExcluded": True})
    assert "properties" in rejects(v.message_id, {**body, "properties": {"a": 1}})
