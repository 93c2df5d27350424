"""The racks set through the admin API (``/bookies/racks-info``, Pulsar's
BookiesRackConfiguration) override the rack a bookie registered with, in placement and in the
bookies' statuses (the registrations and the record are real, in an embedded store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.ledger import racks
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.placement import RackAwarePlacement
from magnetar.metadata import keys, open_store

BOOKIES = ("b1:3181", "b2:3181", "b3:3181", "b4:3181")


async def test_placement_follows_the_racks_info(tmp_path: Path) -> None:
    store = await open_store(f"embedded://{tmp_path / 'meta'}")
    try:
        for bookie_id in BOOKIES:  # all registered in one rack
            info = json.dumps({"rack": "/registered", "tls": False}).encode()
            await store.put(keys.bookie_available(bookie_id), info)
        client = LedgerClient(store)
        policy = RackAwarePlacement(min_racks_per_write_quorum=2, enforce_min_racks=True)
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(await client.bookies(), 2)

        config = {
            "east": {"b1:3181": {"rack": "a"}, "b2:3181": {"rack": "/a", "hostname": "b2"}},
            "west": {"b3:3181": {"rack": "/b"}},
        }
        await store.put(keys.BOOKIE_RACKS_INFO, json.dumps(config).encode())
        assert await racks.overrides(store) == {"b1:3181": "/a", "b2:3181": "/a", "b3:3181": "/b"}
        found = {b.bookie_id: b.rack for b in await client.bookies()}
        assert found == {
            "b1:3181": "/a",
            "b2:3181": "/a",
            "b3:3181": "/b",
            "b4:3181": "/registered",
        }
        for _ in range(20):  # every write set of two spans two racks now
            ensemble = policy.new_ensemble(await client.bookies(), 2)
            assert len({found[b] for b in ensemble}) == 2
        statuses = {s.bookie_id: s.rack for s in await ur.bookie_statuses(store)}
        assert statuses["b3:3181"] == "/b" and statuses["b4:3181"] == "/registered"
        await client.close()
    finally:
        await store.close()


def test_a_stored_configuration_that_is_not_one_reads_as_empty() -> None:
    assert racks.parse(None) == {}
    assert racks.parse(b"not json") == {}
    assert racks.parse(b"[1, 2]") == {}
    assert racks.parse(b'{"g": {"b:1": {"rack": "/r"}, "c:1": 3}, "h": 4}') == {
        "g": {"b:1": {"rack": "/r"}}
    }
