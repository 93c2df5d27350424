"""Topic list watcher pieces without a broker: Pulsar's list hash, scheme removal, matching."""

from __future__ import annotations

import pytest

from magnetar.broker import topic_list
from magnetar.broker.contracts import BrokerError
from magnetar.wire.frames import crc32c


def test_hash_is_crc32c_of_sorted_names_little_endian_hex() -> None:
    assert topic_list.topics_hash([]) == "00000000"
    names = ["persistent://t/n/b", "persistent://t/n/a"]
    crc = crc32c(b"persistent://t/n/a,persistent://t/n/b")
    assert topic_list.topics_hash(names) == crc.to_bytes(4, "little").hex()
    assert topic_list.topics_hash(names) == topic_list.topics_hash(list(reversed(names)))


@pytest.mark.parametrize(
    ("regex", "expected"),
    [
        ("persistent://public/default/.*", "public/default/.*"),
        ("non-persistent://public/default/x", "public/default/x"),
        ("public/default/x.*", "public/default/x.*"),
        ("(persistent://public/default/a|b)", "(public/default/a|b)"),
    ],
)
def test_remove_domain_scheme(regex: str, expected: str) -> None:
    assert topic_list.remove_domain_scheme(regex) == expected


def test_bad_patterns() -> None:
    with pytest.raises(BrokerError):
        topic_list.compile_pattern("http://public/default/.*")
    with pytest.raises(BrokerError):
        topic_list.compile_pattern("persistent://public/default/(")
    with pytest.raises(BrokerError):
        topic_list.compile_pattern("x" * (topic_list.MAX_PATTERN_LENGTH + 1))


def test_matching_uses_the_partitioned_name_in_full() -> None:
    pattern = topic_list.compile_pattern("persistent://public/default/orders")
    topics = [
        "persistent://public/default/orders-partition-0",
        "persistent://public/default/orders-partition-1",
        "persistent://public/default/orders-eu",
        "persistent://public/default/orders",
    ]
    assert topic_list.matching(topics, pattern) == [topics[0], topics[1], topics[3]]
