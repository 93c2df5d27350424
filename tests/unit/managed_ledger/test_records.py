"""Metadata records of managed ledgers and cursors, and name parsing."""

from __future__ import annotations

import json

import pytest

from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.cache import EntryCache
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
    c = EntryCache(100)
    for e in range(20):
        c.put(1, e, bytes(10))
    assert c.size == 100 and len(c) == 10
    assert c.get(1, 5) is None and c.get(1, 15) is not None
    c.evict_before(1, 18)
    assert len(c) == 2
    c.put(2, 0, bytes(500))  # larger than the whole cache: not kept
    assert c.get(2, 0) is None
    c.drop_ledger(1)
    assert c.size == 0 and len(c) == 0
