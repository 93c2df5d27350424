"""Topic name parsing, normalisation and validation."""

from __future__ import annotations

import pytest

from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicDomain, TopicName, check_name_part


@pytest.mark.parametrize(
    ("name", "full", "partition"),
    [
        ("my-topic", "persistent://public/default/my-topic", -1),
        ("t1/ns1/my-topic", "persistent://t1/ns1/my-topic", -1),
        ("persistent://t/ns/x", "persistent://t/ns/x", -1),
        ("non-persistent://t/ns/x", "non-persistent://t/ns/x", -1),
        ("persistent://t/ns/x-partition-0", "persistent://t/ns/x-partition-0", 0),
        ("x-partition-12", "persistent://public/default/x-partition-12", 12),
        ("a-partition-1-partition-2", "persistent://public/default/a-partition-1-partition-2", 2),
        ("x-partition-", "persistent://public/default/x-partition-", -1),
        ("x-partition-abc", "persistent://public/default/x-partition-abc", -1),
        ("my.tenant:a=b/ns_1/topic.v1@x", "persistent://my.tenant:a=b/ns_1/topic.v1@x", -1),
        ("persistent://t/ns/ünïcode", "persistent://t/ns/ünïcode", -1),
    ],
)
def test_valid_names(name: str, full: str, partition: int) -> None:
    topic = TopicName.parse(name)
    assert str(topic) == full == topic.full_name
    assert topic.partition_index == partition
    assert TopicName.parse(full) == topic


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a/b",
        "a/b/c/d",
        "/ns/topic",
        "t//topic",
        "t/ns/",
        "persistent://t/ns",
        "persistent://t/ns/x/y",  # legacy cluster form
        "persistent:///ns/x",
        "persistent://t/ns/",
        "kafka://t/ns/x",
        "Persistent://t/ns/x",
        "persistent://t$/ns/x",
        "persistent://t/n s/x",
        "persistent://t/ns/a b",
        "persistent://t/ns/a\tb",
        "persistent://t/ns/a\x00b",
        "persistent://t/ns/a\\b",
        "persistent://t/ns/..",
        "x-partition-01",
        "x-partition-2147483648",
    ],
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(name)


def test_partitions() -> None:
    base = TopicName.parse("persistent://t/ns/orders")
    p3 = base.partition(3)
    assert str(p3) == "persistent://t/ns/orders-partition-3"
    assert p3.is_partition and p3.partition_index == 3
    assert p3.base_name == base and not base.is_partition
    assert p3.partition(5) == base.partition(5)
    assert TopicName.parse(str(p3)) == p3
    with pytest.raises(InvalidTopicNameError):
        base.partition(-1)


def test_accessors() -> None:
    topic = TopicName.parse("non-persistent://acme/prod/events")
    assert topic.domain is TopicDomain.NON_PERSISTENT and not topic.is_persistent
    assert topic.namespace_name == "acme/prod"
    assert topic.rest_path == "non-persistent/acme/prod/events"
    assert TopicName.of("events", tenant="acme", namespace="prod",
                        domain=TopicDomain.NON_PERSISTENT) == topic  # fmt: skip
    assert TopicName.of("x") == TopicName.parse("x")
    assert check_name_part("ok-name", "tenant") == "ok-name"
    with pytest.raises(InvalidTopicNameError):
        check_name_part("", "tenant")
    assert InvalidTopicNameError.server_error == 17
