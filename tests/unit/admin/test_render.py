"""``magnetar admin`` text output: names one per line, objects as aligned key/value lines,
lists and maps of objects as tables (one block per row when too wide)."""

from __future__ import annotations

import json

from magnetar.admin_cli import render


def test_json_output_is_the_answer() -> None:
    value = {"b": [1, 2], "a": {"x": None}}
    assert json.loads(render.render(value, "json")) == value


def test_names_one_per_line_and_scalars() -> None:
    assert render.render(["public", "acme"]) == "public\nacme"
    assert render.render(None) == ""
    assert render.render(600) == "600"
    assert render.render(True) == "true"
    assert render.render("ok") == "ok"


def test_list_of_objects_is_a_table() -> None:
    text = render.render([{"ledgerId": 3, "entries": 10}, {"ledgerId": 4, "entries": 2}])
    assert text.splitlines() == [
        "LEDGERID  ENTRIES",
        "3         10",
        "4         2",
    ]


def test_object_flattens_nested_objects_and_tables_maps_of_objects() -> None:
    policies = {
        "message_ttl_in_seconds": 600,
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
        "backlog_quota_map": {
            "destination_storage": {"limitSize": 1, "limitTime": -1, "policy": "producer_exception"}
        },
        "auth_policies": {"namespace_auth": {}},
        "deduplicationEnabled": False,
    }
    text = render.render(policies)
    lines = text.splitlines()
    pairs = [line.split() for line in lines[:5]]
    assert pairs == [
        ["message_ttl_in_seconds", "600"],
        ["retention_policies.retentionTimeInMinutes", "60"],
        ["retention_policies.retentionSizeInMB", "10"],
        ["auth_policies.namespace_auth", "{}"],
        ["deduplicationEnabled", "false"],
    ]
    assert len({len(line) - len(line.split()[-1]) for line in lines[:5]}) == 1  # one column
    assert "backlog_quota_map:" in lines
    assert "  NAME                 LIMITSIZE  LIMITTIME  POLICY" in lines
    assert "  destination_storage  1          -1         producer_exception" in lines


def test_stats_have_sections_and_counts() -> None:
    stats = {
        "msgRateIn": 12.3456,
        "msgInCounter": 10,
        "publishers": [{"producerName": "p-1", "msgRateIn": 1.5}],
        "subscriptions": {
            "sub-a": {"msgBacklog": 6, "type": "Shared", "consumers": [{"c": 1}, {"c": 2}]}
        },
        "replication": {},
    }
    text = render.render(stats)
    assert "msgRateIn     12.346" in text
    assert "replication   {}" in text
    assert "publishers:\n  PRODUCERNAME  MSGRATEIN\n  p-1           1.5" in text
    assert (
        "subscriptions:\n  NAME   MSGBACKLOG  TYPE    CONSUMERS\n  sub-a  6           Shared  2"
        in text
    )


def test_wide_tables_become_blocks() -> None:
    row = {f"field{i}": i for i in range(20)}
    text = render.render({"subscriptions": {"s": row}})
    assert text.startswith("subscriptions:\n  name: s\n")
    assert "    field19  19" in text


def test_cells() -> None:
    assert render.cell(0.1 + 0.2) == "0.3"
    assert render.cell(2.0) == "2"
    assert render.cell(None) == "-"
    assert render.cell(["a", "b"]) == "a,b"
    assert render.cell([]) == "[]"
