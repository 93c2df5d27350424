"""The key builders produce the documented layout (docs/metadata.md), valid store keys, and
keys whose order is the order of the ids in them."""

from __future__ import annotations

import pytest

from magnetar.metadata import api, keys


def test_layout_matches_the_documentation() -> None:
    t, ns = "public", "default"
    assert keys.cluster("standalone") == "/admin/clusters/standalone"
    assert keys.tenant(t) == "/admin/policies/public"
    assert keys.namespace(t, ns) == "/admin/policies/public/default"
    assert (
        keys.partitioned_topic(t, ns, "persistent", "orders")
        == "/admin/partitioned-topics/public/default/persistent/orders"
    )
    ml = keys.managed_ledger(t, ns, "persistent", "orders-partition-3")
    assert ml == "/managed-ledgers/public/default/persistent/orders-partition-3"
    assert keys.cursors(t, ns, "persistent", "orders") == (
        "/managed-ledgers/public/default/persistent/orders/cursors"
    )
    assert keys.cursor(t, ns, "persistent", "orders", "sub-1") == (
        "/managed-ledgers/public/default/persistent/orders/cursors/sub-1"
    )
    assert keys.dedup_cursor(t, ns, "persistent", "orders").endswith("/cursors/pulsar.dedup")
    assert keys.ledger(42) == "/ledgers/00000000000000000042"
    assert keys.bookie_available("10.0.0.7:3181") == "/bookies/available/10.0.0.7:3181"
    assert keys.bookie_readonly("b-0") == "/bookies/readonly/b-0"
    assert keys.bookie_cookie("b-0") == "/bookies/cookies/b-0"
    assert keys.broker("broker-0:8080") == "/loadbalance/brokers/broker-0:8080"
    assert keys.broker_load("broker-0:8080") == "/loadbalance/load/broker-0:8080"
    assert (
        keys.bundle_owner(t, ns, "0x00000000_0x40000000")
        == "/namespace/public/default/0x00000000_0x40000000"
    )
    assert keys.schema_version(t, ns, "orders", 3) == (
        "/schemas/public/default/orders/00000000000000000003"
    )
    assert keys.id_counter(keys.LEDGER_COUNTER) == "/counters/ledger"


def test_every_builder_gives_a_valid_key() -> None:
    built = [
        keys.cluster("c"),
        keys.namespace("t", "n"),
        keys.partitioned_topic("t", "n", "non-persistent", "x"),
        keys.cursor("t", "n", "persistent", "x", "s"),
        keys.ledger(2**64 - 1),
        keys.bookie_available("h:1"),
        keys.broker_load("h:1"),
        keys.bundle_owner("t", "n", "0x0_0x1"),
        keys.schema_version("t", "n", "x", 0),
        keys.id_counter("ledger"),
    ]
    for key in built:
        api.check_key(key)


def test_names_are_escaped_into_one_segment() -> None:
    key = keys.cursor("t", "n", "persistent", "topic", "a/b%c d")
    assert key.endswith("/cursors/a%2Fb%25c%20d")
    assert keys.unsegment(key.rsplit("/", 1)[1]) == "a/b%c d"
    with pytest.raises(ValueError):
        keys.tenant("")
    with pytest.raises(ValueError, match="domain"):
        keys.managed_ledger("t", "n", "durable", "x")  # type: ignore[arg-type]


def test_ledger_keys_sort_numerically_and_parse_back() -> None:
    ids = [0, 1, 9, 10, 99, 100, 12345678901, 2**63, 2**64 - 1]
    built = [keys.ledger(i) for i in ids]
    assert sorted(built) == built
    assert [keys.ledger_id_of(k) for k in built] == ids
    for bad in (-1, 2**64, True, 1.5):
        with pytest.raises(ValueError):
            keys.ledger(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        keys.ledger_id_of("/ledgers/42")
