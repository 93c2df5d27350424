"""Metadata records of managed ledgers and cursors, and name parsing."""

from __future__ import annotations

import json

import pytest

from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.cache import (
    CacheBudget,
    EntryCache,
    default_size_mb,
    memory_limit,
)
from magnetar.managed_ledger.records import (
    CursorPointer,
    LedgerRecord,
    ManagedLedgerInfo,
    domain_prefix,
    parse_name,
)


def test_parse_name() -> None:
    p = parse_name("public/default/persistent/my-topic")
    assert p.info_key == "/managed-ledgers/public/default/persistent/my-topic"
    assert p.cursor_key("sub/1") == (
        "/managed-ledgers/public/default/persistent/my-topic/cursors/sub%2F1"
    )
    assert parse_name("persistent://public/default/a/b").topic == "a/b"
    for bad in ("a/b/c", "a/b/queue/t", "", "a//persistent/t"):
        with pytest.raises(ValueError):
            parse_name(bad)
    assert domain_prefix("t/ns/persistent") == (
        "/managed-ledgers/t/ns/persistent",
        "t/ns/persistent",
    )


def test_info_json_matches_the_documented_layout() -> None:
    info = ManagedLedgerInfo(
        ledgers=(LedgerRecord(3, 10, 1000, 1234), LedgerRecord(7)),
        terminated_position=Position(3, 9),
        properties={"k": "v"},
    )
    doc = json.loads(info.to_json())
    assert doc["format"] == 1
    assert doc["ledgers"][0] == {
        "ledgerId": 3, "entries": 10, "size": 1000, "timestamp": 1234, "offloaded": None,
    }  # fmt: skip
    assert doc["terminatedPosition"] == {"ledgerId": 3, "entryId": 9}
    assert ManagedLedgerInfo.from_json(info.to_json()) == info


def test_cursor_pointer_json() -> None:
    p = CursorPointer(12, Position(3, 4), last_entry_id=5, last_active_ms=9, properties={"a": 1})
    doc = json.loads(p.to_json())
    assert doc["cursorLedgerId"] == 12
    assert doc["markDeletePosition"] == {"ledgerId": 3, "entryId": 4}
    assert CursorPointer.from_json(p.to_json()) == p


def test_entry_cache_bounds_and_eviction() -> None:
    budget = CacheBudget(100, watermark=0.5)
    c = EntryCache(budget)
    for e in range(20):
        c.put(1, e, bytes(10))
    # over 100 bytes (the 11th and the 17th entry) it fell to 50, oldest entries first
    assert budget.evictions == 2 and c.size == budget.size == 80 and len(c) == 8
    assert c.get(1, 11) is None and c.get(1, 12) is not None
    c.evict_before(1, 18)
    assert len(c) == 2 and budget.size == 20
    c.put(2, 0, bytes(60))  # more than the watermark of the whole budget: not kept
    assert c.get(2, 0) is None
    c.drop_ledger(1)
    assert c.size == budget.size == 0 and len(c) == 0
    assert EntryCache(CacheBudget(0)).put(1, 0, b"x") is None  # a budget of 0 keeps nothing


def test_the_caches_share_one_budget_and_the_largest_give_room() -> None:
    budget = CacheBudget(1000, watermark=0.9)
    big, mid, small = EntryCache(budget), EntryCache(budget), EntryCache(budget)
    for e in range(50):
        big.put(1, e, bytes(10))  # 500 bytes
    for e in range(30):
        mid.put(2, e, bytes(10))  # 300
    for e in range(20):
        small.put(3, e, bytes(10))  # 200: the budget is full, not over
    assert budget.size == 1000 and budget.evictions == 0
    small.put(3, 20, bytes(10))  # over: down to 900, from the largest caches holding > half
    assert budget.evictions == 1 and budget.size <= 900
    assert budget.size == big.size + mid.size + small.size
    assert len(small) == 21, "the smallest cache keeps everything"
    assert big.get(1, 0) is None and big.get(1, 49) is not None, "the oldest entries go"
    assert 500 - big.size > 300 - mid.size > 0, "the largest gives the most"
    small.close()
    assert small not in budget.caches and budget.size == big.size + mid.size


def test_default_budget_is_a_fifth_of_memory_within_bounds() -> None:
    mb = default_size_mb()
    assert mb == max(64, min(1024, memory_limit() // 5 // (1024 * 1024)))
    assert default_size_mb(processes=4) == mb // 4
