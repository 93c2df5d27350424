"""Function state and records in the metadata store (embedded and etcd): counters by
compare-and-set (concurrent increments all count), bytes, FunctionState JSON, conflicts, and
the function records' package chunks and start/stop/restart changes."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.functions import registry, state
from magnetar.functions.config import FunctionName
from magnetar.metadata import api

NAME = FunctionName("public", "default", "wc")


async def test_counters_by_compare_and_set(metadata_store: api.MetadataStore) -> None:
    results = await asyncio.gather(*(state.incr(metadata_store, NAME, "w", 1) for _ in range(20)))
    assert sorted(results) == list(range(1, 21))
    value = await state.get(metadata_store, NAME, "w")
    assert value is not None and value.number == 20
    assert state.to_json(value) == {"key": "w", "numberValue": 20, "version": value.version}
    assert await state.incr(metadata_store, NAME, "w", -5) == 15
    assert await state.delete(metadata_store, NAME, "w")
    assert not await state.delete(metadata_store, NAME, "w")
    assert await state.get(metadata_store, NAME, "w") is None


async def test_bytes_strings_and_conflicts(metadata_store: api.MetadataStore) -> None:
    await state.put(metadata_store, NAME, "s", data=b"text")
    await state.put(metadata_store, NAME, "b", data=b"\xff\x00")
    s = await state.get(metadata_store, NAME, "s")
    b = await state.get(metadata_store, NAME, "b")
    assert s is not None and state.to_json(s)["stringValue"] == "text"
    assert b is not None and state.to_json(b)["byteValue"] == "/wA="
    with pytest.raises(ValueError, match="not a counter"):
        await state.incr(metadata_store, NAME, "s", 1)
    with pytest.raises(state.StateConflict):
        await state.put(metadata_store, NAME, "s", data=b"x", expected_version=s.version + 7)
    with pytest.raises(state.StateConflict):
        await state.put(metadata_store, NAME, "s", data=b"x", expected_version=0)
    await state.put(metadata_store, NAME, "s", data=b"y", expected_version=s.version)


def test_function_state_json() -> None:
    assert state.from_json("k", {"key": "k", "stringValue": "v"}) == (b"v", None, None)
    assert state.from_json("k", {"numberValue": 4, "version": 2}) == (None, 4, 2)
    assert state.from_json("k", {"byteValue": "/wA="}) == (b"\xff\x00", None, None)
    for body, message in (
        ({"key": "other", "stringValue": "v"}, "does not match"),
        ({}, "exactly one"),
        ({"stringValue": "a", "numberValue": 1}, "exactly one"),
        ({"byteValue": "!!"}, "base64"),
        ({"numberValue": 2**63}, "64-bit"),
        ([], "JSON object"),
    ):
        with pytest.raises(ValueError, match=message):
            state.from_json("k", body)


async def test_records_packages_and_running_state(metadata_store: api.MetadataStore) -> None:
    package = bytes(range(256)) * 5000  # over two chunks
    config = {"tenant": "public", "namespace": "default", "name": "wc", "parallelism": 2}
    await registry.create(metadata_store, NAME, config, file_name="wc.py", data=package)
    with pytest.raises(registry.FunctionExists):
        await registry.create(metadata_store, NAME, config, file_name="wc.py", data=b"")
    found = await registry.require(metadata_store, NAME)
    assert found.record["package"]["chunks"] == 3
    assert await registry.read_package(metadata_store, found) == package
    assert await registry.list_names(metadata_store, "public", "default") == ["wc"]

    await registry.set_running(metadata_store, NAME, instance=1, running=False)
    assert (await registry.require(metadata_store, NAME)).stopped == {1}
    await registry.set_running(metadata_store, NAME, instance=None, running=True)
    assert (await registry.require(metadata_store, NAME)).stopped == set()
    with pytest.raises(ValueError, match=r"0\.\.1"):
        await registry.set_running(metadata_store, NAME, instance=2, running=False)
    await registry.restart(metadata_store, NAME, instance=None)
    restarted = await registry.require(metadata_store, NAME)
    assert restarted.restarts(0) == restarted.restarts(1) == 1

    await registry.update(
        metadata_store, NAME, {**config, "parallelism": 1}, package=("wc.py", b"x")
    )
    updated = await registry.require(metadata_store, NAME)
    assert await registry.read_package(metadata_store, updated) == b"x"
    assert updated.parallelism == 1

    await state.incr(metadata_store, NAME, "k", 1)
    await registry.delete(metadata_store, NAME)
    assert await registry.get(metadata_store, NAME) is None
    assert await state.get(metadata_store, NAME, "k") is None
    assert await metadata_store.children("/functions/packages") == []
