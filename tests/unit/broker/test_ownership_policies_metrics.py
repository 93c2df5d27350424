"""Pure parts of the broker: bundle hashing, namespace policies, the /metrics text."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, cast

from magnetar.broker import metrics, policies
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ownership import Bundle, bundle_of, topic_hash
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.service import BrokerCounters, managed_ledger_name
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.broker.topic import PersistentTopic, Topic
from magnetar.common.hashing import murmur3_32
from magnetar.managed_ledger.memory import MemoryManagedLedger
from magnetar.wire.topics import TopicName


def test_murmur3_matches_guava() -> None:
    # reference values of Murmur3 x86 32-bit, seed 0 (Guava's murmur3_32, Python's mmh3)
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"foo") == (-156908512) & 0xFFFFFFFF
    assert murmur3_32(b"hello") == 613153351


def test_topics_hash_into_bundles_by_crc32_as_pulsar() -> None:
    # Pulsar's NamespaceBundleFactory: Guava's Hashing.crc32() of the full name, unsigned
    assert topic_hash("123456789") == 0xCBF43926
    name = TopicName.parse("persistent://public/default/orders")
    assert topic_hash(name.full_name) == zlib.crc32(b"persistent://public/default/orders")


def test_bundles_split_the_hash_space() -> None:
    bounds = policies.bundle_boundaries(4)
    assert bounds == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    seen = set()
    for i in range(200):
        b = bundle_of(TopicName.parse(f"topic-{i}"), tuple(bounds))
        assert b.lower in bounds[:-1] and b.upper == bounds[bounds.index(b.lower) + 1]
        seen.add(b.range)
    assert len(seen) == 4
    assert Bundle("public", "default", 0, 0x40000000).range == "0x00000000_0x40000000"


def test_namespace_policies_parse_pulsar_shapes() -> None:
    raw = policies.default_namespace_policies(8)
    parsed = policies.NamespacePolicies.from_json(json.dumps(raw).encode())
    assert len(parsed.boundaries) == 9 and parsed.auto_topic_creation is None
    raw["autoTopicCreationOverride"] = {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 3,
    }
    auto = policies.NamespacePolicies.from_json(json.dumps(raw).encode()).auto_topic_creation
    assert auto == policies.AutoTopicCreation(True, True, 3)


def test_managed_ledger_names() -> None:
    assert managed_ledger_name(TopicName.parse("t-partition-2")) == (
        "public/default/persistent/t-partition-2"
    )


async def test_metrics_text_has_pulsar_names_and_labels() -> None:
    name = TopicName.parse("persistent://public/default/m")
    ml = MemoryManagedLedger("public/default/persistent/m")
    await ml.add_entry(b"abc")
    topic = PersistentTopic(
        name=name,
        managed_ledger=ml,
        subscriptions=TopicSubscriptionsImpl(topic=name, managed_ledger=ml),
    )
    topic.msg_in, topic.bytes_in = 7, 700
    source = _Source(BrokerConfig(), {topic.full_name: topic}, BrokerCounters())
    reg = metrics.registry(metrics.BrokerCollector(source), [])
    body, content_type = metrics.render(reg, "text/plain")
    assert content_type.startswith("text/plain; version=0.0.4")
    text = body.decode()
    labels = 'cluster="standalone",namespace="public/default",topic="persistent://public/default/m"'
    assert f"pulsar_in_messages_total{{{labels}}} 7.0" in text
    assert f"pulsar_in_bytes_total{{{labels}}} 700.0" in text
    assert f"pulsar_storage_size{{{labels}}} 3.0" in text
    for series in (
        "pulsar_rate_in",
        "pulsar_rate_out",
        "pulsar_throughput_in",
        "pulsar_throughput_out",
        "pulsar_producers_count",
        "pulsar_consumers_count",
        "pulsar_subscriptions_count",
    ):
        assert f"{series}{{{labels}}} " in text
    # typed as Pulsar types them: gauges, even the *_total ones
    assert "# TYPE pulsar_in_messages_total gauge" in text
    assert 'pulsar_broker_topics_count{cluster="standalone"} 1.0' in text
    # the OpenMetrics format when the scraper asks for it
    body, content_type = metrics.render(reg, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.decode().endswith("# EOF\n")
    assert f"pulsar_in_messages_total{{{labels}}} 7.0" in body.decode()


async def test_metrics_topic_level_off_sums_per_namespace() -> None:
    topics = {}
    for local in ("a", "b"):
        name = TopicName.parse(f"persistent://public/default/{local}")
        ml = MemoryManagedLedger(f"public/default/persistent/{local}")
        t = PersistentTopic(
            name=name,
            managed_ledger=ml,
            subscriptions=TopicSubscriptionsImpl(topic=name, managed_ledger=ml),
        )
        t.msg_in = 5
        topics[t.full_name] = t
    config = BrokerConfig(expose_topic_level_metrics=False)
    source = _Source(config, topics, BrokerCounters())
    text = metrics.render(metrics.registry(metrics.BrokerCollector(source), []), None)[0].decode()
    assert 'pulsar_in_messages_total{cluster="standalone",namespace="public/default"} 10.0' in text
    assert ',topic="' not in text and '{topic="' not in text


@dataclass
class _Source:
    config: BrokerConfig
    topics: dict[str, Topic]
    counters: BrokerCounters
    healthy: bool = True
    # the registry's store is never reached: only its (empty) timings are read
    schemas: SchemaRegistry = field(default_factory=lambda: SchemaRegistry(cast(Any, None)))


def test_offload_config_topic_over_namespace_over_broker() -> None:
    from magnetar.broker.policies import offload_config
    from magnetar.managed_ledger.api import ManagedLedgerConfig

    base = ManagedLedgerConfig(
        offload_threshold_bytes=-1, offload_threshold_s=-1, offload_deletion_lag_ms=1000
    )
    assert offload_config(base, {}) == base
    ns = {"offload_threshold": 5, "offload_threshold_in_seconds": 60}
    got = offload_config(base, ns)
    assert (got.offload_threshold_bytes, got.offload_threshold_s) == (5, 60)
    assert got.offload_deletion_lag_ms == 1000
    topic = {**ns, "offloadPolicies": {"managedLedgerOffloadThresholdInBytes": 0}}
    assert offload_config(base, topic).offload_threshold_bytes == 0
    assert offload_config(base, {"offload_threshold": True}) == base  # not an integer
