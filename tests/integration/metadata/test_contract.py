"""The one contract suite every metadata-store backend must pass.

Tests taking ``metadata_store``/``metadata_backend`` run against both backends (the etcd
ones against a real etcd process). Failure-injection tests that only make sense for one
backend say so in their name and docstring:

* etcd: the server is killed with SIGKILL and restarted on the same data directory
  (watch resumes without loss or repetition; operations fail with StoreUnavailableError
  while it is down; a session outliving its TTL tells its owner);
* embedded: it lives inside its process, so there is no connection to lose. What applies is
  a process restart: another process (killed with SIGKILL) leaves its data, and its
  sessions are expired on reopen; a watch resumed from the last seen revision after
  reopening delivers the rest exactly once (tested for both backends).
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.metadata import api, open_store
from tests.conftest import MetadataBackend, etcd_url
from tests.support.etcd import EtcdServer
from tests.support.procs import Proc
from tests.support.wait import eventually, holds_for_async

Store = api.MetadataStore
V = api.Version

EVENT_TIMEOUT = 10.0


async def take(events: AsyncIterator[api.WatchEvent], n: int) -> list[api.WatchEvent]:
    """The next ``n`` events, failing after EVENT_TIMEOUT seconds."""
    got: list[api.WatchEvent] = []
    async with asyncio.timeout(EVENT_TIMEOUT):
        async for event in events:
            got.append(event)
            if len(got) == n:
                break
    return got


async def registered_watch(store: Store, prefix: str) -> AsyncIterator[api.WatchEvent]:
    """A watch of ``prefix`` known to be registered: it starts at the revision of a marker
    key put first, and the marker's event is taken from it (a watch delivers only once it is
    registered with the store)."""
    marker = f"{prefix}/watch-registered"
    revision = await store.put(marker, b"")
    events = store.watch(prefix, prefix=True, start_revision=revision)
    assert summary(await take(events, 1)) == [("put", marker, b"")]
    return events


async def nothing_more(events: AsyncIterator[api.WatchEvent], wait: float = 0.5) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(wait):
            event = await anext(events)
            pytest.fail(f"unexpected extra event {event}")


def summary(events: list[api.WatchEvent]) -> list[tuple[str, str, bytes]]:
    return [(e.type.value, e.key, e.value) for e in events]


# --- basic reads and writes -------------------------------------------------------------------


async def test_put_get_and_versions(metadata_store: Store) -> None:
    assert await metadata_store.get("/t/a") is None
    v1 = await metadata_store.put("/t/a", b"one")
    record = await metadata_store.get("/t/a")
    assert record == api.Record("/t/a", b"one", v1, v1, None)
    v2 = await metadata_store.put("/t/a", b"two")
    assert v2 > v1
    record = await metadata_store.get("/t/a")
    assert record is not None
    assert (record.value, record.version, record.create_revision) == (b"two", v2, v1)
    assert await metadata_store.revision() >= v2
    # A deleted and re-created key never gets an old version back.
    await metadata_store.delete("/t/a")
    v3 = await metadata_store.put("/t/a", b"again", expected_version=api.NOT_EXISTS)
    assert v3 > v2


async def test_concurrent_cas_writers_exactly_one_wins_per_version(metadata_store: Store) -> None:
    writers, rounds = 10, 5
    version = await metadata_store.put("/t/cas", b"start")
    for round_no in range(rounds):

        async def attempt(
            writer: int, expected: api.Version = version, round_no: int = round_no
        ) -> api.Version | None:
            try:
                return await metadata_store.put(
                    "/t/cas", f"{round_no}:{writer}".encode(), expected_version=expected
                )
            except api.BadVersionError as exc:
                assert exc.expected == expected
                assert exc.actual is not None and exc.actual > expected
                return None

        results = await asyncio.gather(*(attempt(w) for w in range(writers)))
        winners = [(w, v) for w, v in enumerate(results) if v is not None]
        assert len(winners) == 1, f"round {round_no}: winners {winners}"
        winner, version = winners[0]
        record = await metadata_store.get("/t/cas")
        assert record is not None
        assert record.value == f"{round_no}:{winner}".encode()
        assert record.version == version


async def test_create_only(metadata_store: Store) -> None:
    v = await metadata_store.put("/t/once", b"first", expected_version=api.NOT_EXISTS)
    with pytest.raises(api.BadVersionError) as caught:
        await metadata_store.put("/t/once", b"second", expected_version=api.NOT_EXISTS)
    assert caught.value.actual == v
    record = await metadata_store.get("/t/once")
    assert record is not None and record.value == b"first"


async def test_put_with_expected_version_on_absent_key(metadata_store: Store) -> None:
    with pytest.raises(api.BadVersionError) as caught:
        await metadata_store.put("/t/none", b"x", expected_version=V(12345))
    assert caught.value.actual == api.NOT_EXISTS
    assert await metadata_store.get("/t/none") is None


async def test_delete_with_version(metadata_store: Store) -> None:
    v1 = await metadata_store.put("/t/d", b"1")
    v2 = await metadata_store.put("/t/d", b"2")
    with pytest.raises(api.BadVersionError) as caught:
        await metadata_store.delete("/t/d", expected_version=v1)
    assert (caught.value.expected, caught.value.actual) == (v1, v2)
    assert await metadata_store.get("/t/d") is not None
    await metadata_store.delete("/t/d", expected_version=v2)
    assert await metadata_store.get("/t/d") is None
    with pytest.raises(api.NotFoundError):
        await metadata_store.delete("/t/d")
    with pytest.raises(api.NotFoundError):
        await metadata_store.delete("/t/d", expected_version=v2)


async def test_delete_prefix(metadata_store: Store) -> None:
    for key in ["/p", "/p/a", "/p/a/b", "/p/c", "/p-sibling", "/pp/x", "/q"]:
        await metadata_store.put(key, b"v")
    assert await metadata_store.delete_prefix("/p") == 4
    left = [r.key async for r in metadata_store.scan_all("/")]
    assert left == ["/p-sibling", "/pp/x", "/q"]
    assert await metadata_store.delete_prefix("/p") == 0


async def test_scan_pagination_sorting_and_children(metadata_store: Store) -> None:
    keys = [
        "/s/b",
        "/s/B",
        "/s/a",
        "/s/a-b",
        "/s/a/c",
        "/s/a/c/d",
        "/s/a0",
        "/s/\u00e9t\u00e9",
        "/s/z/deep/er/still",
        "/s/10",
        "/s/9",
    ]
    for i, key in enumerate(keys):
        await metadata_store.put(key, str(i).encode())
    await metadata_store.put("/s", b"the prefix itself is not below it")
    await metadata_store.put("/s-other/x", b"not below /s")
    await metadata_store.put("/sa", b"not below /s")
    expected = sorted(keys, key=str.encode)  # byte order of the UTF-8 keys

    pages: list[list[str]] = []
    start_after: str | None = None
    while True:
        page = await metadata_store.scan("/s", start_after=start_after, limit=3)
        pages.append([r.key for r in page.records])
        if not page.more:
            break
        start_after = page.records[-1].key
    assert [k for p in pages for k in p] == expected
    assert all(len(p) == 3 for p in pages[:-1]) and 1 <= len(pages[-1]) <= 3
    assert [r.key async for r in metadata_store.scan_all("/s", page_size=4)] == expected
    values = {r.key: r.value async for r in metadata_store.scan_all("/s")}
    assert values == {k: str(i).encode() for i, k in enumerate(keys)}

    page = await metadata_store.scan("/s", start_after="/s/a0", limit=100)
    assert [r.key for r in page.records] == [k for k in expected if k > "/s/a0"]
    assert not page.more
    assert (await metadata_store.scan("/nothing")).records == []

    assert await metadata_store.children("/s") == sorted(
        ["B", "a", "a-b", "a0", "b", "\u00e9t\u00e9", "z", "10", "9"]
    )
    assert await metadata_store.children("/s/a") == ["c"]
    assert await metadata_store.children("/s/z") == ["deep"]
    assert await metadata_store.children("/s/b") == []
    assert await metadata_store.children("/") == ["s", "s-other", "sa"]


async def test_children_many_subtrees(metadata_store: Store) -> None:
    """Children spread over more keys than one backend page (1000) are each listed once."""

    async def put_all(keys: list[str]) -> None:
        for n in range(0, len(keys), api.MAX_TXN_OPS):
            await metadata_store.txn([], [api.Put(k, b"") for k in keys[n : n + api.MAX_TXN_OPS]])

    await put_all([f"/c/big/{i:04d}" for i in range(1100)] + ["/c/big"])
    await put_all([f"/c/n{i:04d}" for i in range(1010)])
    await put_all([f"/c/z/{i:04d}/x" for i in range(990)] + ["/c/z-leaf", "/c/z0/y"])
    expected = ["big", *[f"n{i:04d}" for i in range(1010)], "z", "z-leaf", "z0"]
    assert await metadata_store.children("/c") == expected
    assert len(await metadata_store.children("/c/z")) == 990


# --- transactions -----------------------------------------------------------------------------


async def test_txn_all_or_nothing(metadata_store: Store) -> None:
    va = await metadata_store.put("/x/a", b"a1")
    vb = await metadata_store.put("/x/b", b"b1")
    rev0 = await metadata_store.revision()
    events = metadata_store.watch("/x", prefix=True, start_revision=rev0 + 1)

    result = await metadata_store.txn(
        [api.Compare("/x/a", va), api.Compare("/x/b", vb), api.Compare("/x/c", api.NOT_EXISTS)],
        [api.Put("/x/a", b"a2"), api.Delete("/x/b"), api.Put("/x/c", b"c1")],
        [api.Put("/x/failed", b"no")],
    )
    assert result.succeeded
    rev = result.versions["/x/a"]
    assert result.versions == {"/x/a": rev, "/x/b": api.NOT_EXISTS, "/x/c": rev}
    assert await metadata_store.revision() == rev == rev0 + 1  # one revision for the lot
    got = await take(events, 3)
    assert {e.revision for e in got} == {rev}
    assert sorted(summary(got)) == [
        ("delete", "/x/b", b""),
        ("put", "/x/a", b"a2"),
        ("put", "/x/c", b"c1"),
    ]

    # One stale compare: nothing of the success branch happens, the failure branch does.
    result = await metadata_store.txn(
        [api.Compare("/x/a", rev), api.Compare("/x/c", va)],
        [api.Put("/x/a", b"a3"), api.Delete("/x/c")],
        [api.Put("/x/failed", b"yes")],
    )
    assert not result.succeeded
    assert set(result.versions) == {"/x/failed"}
    a, c, failed = [await metadata_store.get(k) for k in ("/x/a", "/x/c", "/x/failed")]
    assert a is not None and a.value == b"a2"
    assert c is not None and c.value == b"c1"
    assert failed is not None and failed.value == b"yes"
    assert failed.version == result.versions["/x/failed"]

    # Failed compares and no failure ops: nothing changes, not even the revision.
    before = await metadata_store.revision()
    result = await metadata_store.txn([api.Compare("/x/a", va)], [api.Put("/x/a", b"no")])
    assert not result.succeeded and result.versions == {}
    assert await metadata_store.revision() == before
    await events.aclose()  # type: ignore[attr-defined]


async def test_txn_rejects_malformed(metadata_store: Store) -> None:
    with pytest.raises(api.InvalidTxnError):
        await metadata_store.txn([], [api.Put("/y", b"1"), api.Delete("/y")])
    with pytest.raises(api.InvalidTxnError):
        await metadata_store.txn([], [api.Put(f"/y/{i}", b"") for i in range(api.MAX_TXN_OPS + 1)])
    with pytest.raises(api.ValueTooLargeError):
        big = b"x" * (api.MAX_VALUE_BYTES // 2 + 1)
        await metadata_store.txn(
            [], [api.Put("/y/1", big), api.Put("/y/2", big), api.Put("/y/3", big)]
        )
    assert await metadata_store.get("/y") is None
    assert (await metadata_store.scan("/y")).records == []


# --- watches ----------------------------------------------------------------------------------


async def test_watch_sees_every_change_in_order(metadata_store: Store) -> None:
    start = await metadata_store.revision() + 1
    everything = metadata_store.watch("/w", prefix=True, start_revision=start)
    one_key = metadata_store.watch("/w/k1", start_revision=start)
    expected: list[tuple[str, str, bytes]] = []
    for i in range(60):
        key = f"/w/k{i % 3}"
        if i % 7 == 6:
            await metadata_store.delete(key)
            expected.append(("delete", key, b""))
        else:
            await metadata_store.put(key, f"{i}".encode())
            expected.append(("put", key, f"{i}".encode()))
    await metadata_store.put("/w", b"the prefix key itself is not below /w")
    await metadata_store.put("/wx/k1", b"not below /w")

    got = await take(everything, len(expected))
    assert summary(got) == expected
    revisions = [e.revision for e in got]
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
    await nothing_more(everything)
    got_one = await take(one_key, sum(1 for e in expected if e[1] == "/w/k1"))
    assert summary(got_one) == [e for e in expected if e[1] == "/w/k1"]
    await everything.aclose()  # type: ignore[attr-defined]
    await one_key.aclose()  # type: ignore[attr-defined]


async def test_watch_concurrent_writers_all_delivered(metadata_store: Store) -> None:
    start = await metadata_store.revision() + 1
    events = metadata_store.watch("/cw", prefix=True, start_revision=start)

    async def writer(n: int) -> None:
        for i in range(20):
            await metadata_store.put(f"/cw/{n}", str(i).encode())

    await asyncio.gather(*(writer(n) for n in range(5)))
    got = await take(events, 100)
    for n in range(5):
        assert [e.value for e in got if e.key == f"/cw/{n}"] == [str(i).encode() for i in range(20)]
    assert [e.revision for e in got] == sorted(e.revision for e in got)
    await events.aclose()  # type: ignore[attr-defined]


async def test_watch_from_start_revision(metadata_store: Store) -> None:
    versions = [await metadata_store.put("/h/k", str(i).encode()) for i in range(10)]
    events = metadata_store.watch("/h/k", start_revision=versions[4])
    got = await take(events, 5)
    assert [e.value for e in got] == [str(i).encode() for i in range(4, 10)][:5]
    assert [e.revision for e in got] == versions[4:9]
    got = await take(events, 1)
    assert got[0].revision == versions[9]
    await metadata_store.delete("/h/k")
    (deleted,) = await take(events, 1)
    assert deleted.type is api.EventType.DELETE and deleted.revision > versions[9]
    await events.aclose()  # type: ignore[attr-defined]


async def test_watch_without_start_revision_sees_later_changes(metadata_store: Store) -> None:
    await metadata_store.put("/n/k", b"before")
    events = metadata_store.watch("/n/k")
    first = asyncio.ensure_future(anext(events))
    written: list[V] = []

    async def seen() -> bool:  # the watch starts on first iteration: write until it sees one
        written.append(await metadata_store.put("/n/k", b"after"))
        done, _ = await asyncio.wait({first}, timeout=0.1)
        return bool(done)

    await eventually(seen, timeout=EVENT_TIMEOUT, what="a change after the watch started")
    event = first.result()
    assert event.value == b"after" and event.revision in written
    await events.aclose()  # type: ignore[attr-defined]


async def test_compaction_gap_raises_watch_compacted(metadata_store: Store) -> None:
    versions = [await metadata_store.put("/g/k", str(i).encode()) for i in range(6)]
    await metadata_store.compact(versions[3])
    with pytest.raises(api.WatchCompactedError) as caught:
        await take(metadata_store.watch("/g/k", start_revision=versions[1]), 1)
    assert caught.value.compact_revision == versions[3]
    # From the compaction point on, history is there.
    events = metadata_store.watch("/g/k", start_revision=caught.value.compact_revision)
    assert [e.value for e in await take(events, 3)] == [b"3", b"4", b"5"]
    await events.aclose()  # type: ignore[attr-defined]
    # Compaction leaves the data alone.
    record = await metadata_store.get("/g/k")
    assert record is not None and (record.value, record.version) == (b"5", versions[5])


async def test_watch_resumes_after_reopen_without_loss_or_repeat(
    metadata_backend: MetadataBackend,
) -> None:
    """A watcher that remembers the last revision it processed resumes from it after its
    store is closed and reopened (the embedded analogue of a reconnect)."""
    store = await metadata_backend.open()
    start = await store.revision() + 1
    for i in range(5):
        await store.put(f"/r/{i % 2}", str(i).encode())
    events = store.watch("/r", prefix=True, start_revision=start)
    first = await take(events, 3)
    await events.aclose()  # type: ignore[attr-defined]
    await store.close()

    store = await metadata_backend.open()
    try:
        for i in range(5, 9):
            await store.put(f"/r/{i % 2}", str(i).encode())
        events = store.watch("/r", prefix=True, start_revision=first[-1].revision + 1)
        rest = await take(events, 6)
        assert [e.value for e in first + rest] == [str(i).encode() for i in range(9)]
        await nothing_more(events)
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        await store.delete_prefix("/r")
        await store.close()


async def test_watch_ends_when_store_closes(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    events = await registered_watch(store, "/e")
    pending = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)  # one loop turn (no time): the read starts before the close
    await store.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(pending, EVENT_TIMEOUT)
    with pytest.raises(api.StoreClosedError):
        await store.get("/e")
    cleaner = await metadata_backend.open()  # a shared etcd is left empty
    try:
        await cleaner.delete_prefix("/e")
    finally:
        await cleaner.close()


# --- sessions ---------------------------------------------------------------------------------


async def test_session_close_deletes_its_keys(metadata_store: Store) -> None:
    session = await metadata_store.session(2)
    await metadata_store.put("/eph/a", b"a", session=session)
    v = await metadata_store.put("/eph/b", b"b", expected_version=api.NOT_EXISTS, session=session)
    await metadata_store.put("/eph/keep", b"k")
    record = await metadata_store.get("/eph/b")
    assert record is not None and record.session_id == session.id and record.version == v
    lost: list[int] = []
    session.on_lost(lambda: lost.append(1))
    await session.close()
    assert [r.key async for r in metadata_store.scan_all("/eph")] == ["/eph/keep"]
    assert lost == [] and not session.lost  # closing is not losing
    with pytest.raises(api.SessionLostError):
        await metadata_store.put("/eph/c", b"c", session=session)


async def test_session_survives_while_kept_alive(metadata_store: Store) -> None:
    session = await metadata_store.session(1)
    await metadata_store.put("/alive", b"x", session=session)

    async def alive() -> bool:
        return not session.lost and await metadata_store.get("/alive") is not None

    await holds_for_async(alive, session.ttl * 2.5, what="the kept-alive session")
    await session.close()


async def test_session_expires_when_owner_stalls_past_ttl(metadata_store: Store) -> None:
    """An owner whose event loop is blocked longer than the TTL cannot renew: its ephemeral
    keys go and, once it runs again, it is told through on_lost (exactly once)."""
    session = await metadata_store.session(1)
    await metadata_store.put("/own/lock", b"mine", session=session)
    start = await metadata_store.revision()
    told: list[float] = []
    session.on_lost(lambda: told.append(time.monotonic()))

    time.sleep(session.ttl + 1.0)  # the owner stalls (blocking on purpose)
    resumed = time.monotonic()

    async def gone() -> bool:
        return await metadata_store.get("/own/lock") is None

    await eventually(gone, timeout=session.ttl + 2, what="the ephemeral key to go")
    await eventually(lambda: bool(told), timeout=session.ttl, what="on_lost")
    assert session.lost and len(told) == 1 and told[0] - resumed < session.ttl
    with pytest.raises(api.SessionLostError):
        await metadata_store.put("/own/lock", b"again", session=session)
    events = metadata_store.watch("/own/lock", start_revision=start + 1)
    (deleted,) = await take(events, 1)
    assert deleted.type is api.EventType.DELETE
    await events.aclose()  # type: ignore[attr-defined]
    late: list[int] = []
    session.on_lost(lambda: late.append(1))  # registering after the loss calls at once
    assert late == [1] and len(told) == 1


# --- ids --------------------------------------------------------------------------------------


async def test_next_id_unique_and_increasing_under_concurrency(
    metadata_backend: MetadataBackend, metadata_store: Store
) -> None:
    stores = [metadata_store]
    if metadata_backend.name == "etcd":  # several clients on etcd; embedded is one per dir
        stores += [await metadata_backend.open() for _ in range(2)]

    async def taker(store: Store) -> list[int]:
        return [await store.next_id("ledger") for _ in range(25)]

    try:
        results = await asyncio.gather(*(taker(stores[i % len(stores)]) for i in range(6)))
    finally:
        for store in stores[1:]:
            await store.close()
    for ids in results:
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    everything = [i for ids in results for i in ids]
    assert len(set(everything)) == len(everything) == 150
    assert min(everything) >= 1
    assert await metadata_store.next_id("ledger") > max(everything)
    assert await metadata_store.next_id("other") == 1


# --- etcd: the server dies and comes back -----------------------------------------------------


@pytest.mark.etcd
async def test_etcd_watch_survives_kill_and_restart(own_etcd: EtcdServer) -> None:
    store = await open_store(etcd_url(own_etcd))
    writer_store = await open_store(etcd_url(own_etcd))
    try:
        start = await store.revision() + 1
        events = store.watch("/k", prefix=True, start_revision=start)
        for i in range(10):
            await writer_store.put(f"/k/{i % 3}", str(i).encode())
        first = await take(events, 5)  # the watcher is mid-stream (some events unread)
        own_etcd.kill()
        own_etcd.restart()
        for i in range(10, 20):
            await writer_store.put(f"/k/{i % 3}", str(i).encode())
        rest = await take(events, 15)
        assert [e.value for e in first + rest] == [str(i).encode() for i in range(20)]
        revisions = [e.revision for e in first + rest]
        assert revisions == sorted(set(revisions))
        await nothing_more(events)
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        await store.close()
        await writer_store.close()


@pytest.mark.etcd
async def test_etcd_watch_reconnects_while_blocked_on_a_dead_server(own_etcd: EtcdServer) -> None:
    """The watcher is waiting for an event when etcd dies; changes made after the restart
    (and before the watcher reconnects) are delivered once."""
    store = await open_store(etcd_url(own_etcd))
    try:
        events = await registered_watch(store, "/b")
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0)  # one loop turn (no time): the read starts before the kill
        own_etcd.kill()
        await asyncio.sleep(0.5)  # etcd stays down 0.5 s: the outage's chosen length
        own_etcd.restart()
        writer = await open_store(etcd_url(own_etcd))
        try:
            v = await writer.put("/b/x", b"after restart")
            event = await asyncio.wait_for(pending, EVENT_TIMEOUT)
            assert (event.key, event.value, event.revision) == ("/b/x", b"after restart", v)
            await writer.put("/b/y", b"2")
            assert summary(await take(events, 1)) == [("put", "/b/y", b"2")]
        finally:
            await writer.close()
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        await store.close()


@pytest.mark.etcd
async def test_etcd_down_operations_fail_within_deadline_then_recover(
    own_etcd: EtcdServer,
) -> None:
    timeout = 1.0
    store = await open_store(etcd_url(own_etcd, timeout=timeout))
    try:
        v = await store.put("/u/k", b"before")
        own_etcd.kill()
        operations = {
            "get": lambda: store.get("/u/k"),
            "put": lambda: store.put("/u/k", b"while down"),
            "cas": lambda: store.put("/u/k", b"while down", expected_version=v),
            "delete": lambda: store.delete("/u/k"),
            "scan": lambda: store.scan("/u"),
            "children": lambda: store.children("/u"),
            "txn": lambda: store.txn([], [api.Put("/u/t", b"x")]),
            "next_id": lambda: store.next_id("u"),
            "session": lambda: store.session(1),
            "revision": lambda: store.revision(),
        }
        for name, operation in operations.items():
            began = time.monotonic()
            with pytest.raises(api.StoreUnavailableError):
                await operation()
            elapsed = time.monotonic() - began
            # The deadline is applied (without one a call waits for etcd forever); the bound
            # is generous because a loaded 2-core machine adds seconds of scheduling to it.
            assert elapsed < 10 * timeout, f"{name} took {elapsed:.1f}s"
        with pytest.raises(api.StoreUnavailableError):
            await open_store(etcd_url(own_etcd, timeout=timeout))

        own_etcd.restart()
        record = await store.get("/u/k")
        assert record is not None and (record.value, record.version) == (b"before", v)
        v2 = await store.put("/u/k", b"after", expected_version=v)
        assert v2 > v
        assert await store.next_id("u") == 1
    finally:
        await store.close()


@pytest.mark.etcd
async def test_etcd_owner_told_when_etcd_down_longer_than_ttl(own_etcd: EtcdServer) -> None:
    store = await open_store(etcd_url(own_etcd, timeout=1.0))
    try:
        session = await store.session(1)
        await store.put("/lease/owner", b"me", session=session)
        await store.put("/lease/durable", b"stays")
        told: list[float] = []
        session.on_lost(lambda: told.append(time.monotonic()))
        own_etcd.kill()
        killed = time.monotonic()
        await eventually(lambda: bool(told), timeout=session.ttl + 2, what="on_lost")
        assert told[0] - killed <= session.ttl + 0.5, "told later than the TTL"
        assert session.lost
        own_etcd.restart()
        restarted = time.monotonic()

        async def gone() -> bool:
            return await store.get("/lease/owner") is None

        await eventually(gone, timeout=session.ttl + 3, what="the ephemeral key to go")
        assert time.monotonic() - restarted < session.ttl + 3
        assert len(told) == 1
        assert await store.get("/lease/durable") is not None
        with pytest.raises(api.SessionLostError):
            await store.put("/lease/owner", b"again", session=session)
        fresh = await store.session(1)  # a new session works
        await store.put("/lease/owner", b"new owner", session=fresh)
        await fresh.close()
    finally:
        await store.close()


OWNER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from magnetar.metadata import open_store

    async def main(url, ready):
        store = await open_store(url)
        session = await store.session(1)
        await store.put("/owned/by-child", b"child", session=session)
        Path(ready).write_text(str(session.ttl))
        await asyncio.sleep(3600)  # killed -9 here, holding the session

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.etcd
async def test_etcd_keys_of_a_killed_owner_go_within_ttl(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    metadata_store = await open_store(etcd_url(etcd_server))
    ready = tmp_path / "ready"
    owner = Proc(
        [sys.executable, "-c", OWNER_SCRIPT, etcd_url(etcd_server), str(ready)],
        log_path=tmp_path / "owner.log",
        ready=ready.exists,
        ready_timeout=20,
    )
    owner.start()
    try:
        ttl = float(ready.read_text())
        record = await metadata_store.get("/owned/by-child")
        assert record is not None and record.session_id is not None
        events = metadata_store.watch("/owned/by-child", start_revision=record.version + 1)
        owner.kill()
        killed = time.monotonic()
        (deleted,) = await take(events, 1)
        assert deleted.type is api.EventType.DELETE
        assert time.monotonic() - killed < ttl + 1.0
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        owner.kill()
        await metadata_store.close()


# --- embedded: durability across processes ---------------------------------------------------


WRITER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, json
    from pathlib import Path
    from magnetar.metadata import open_store, api

    async def main(url, ready):
        store = await open_store(url)
        out = {"ids": [await store.next_id("ledger") for _ in range(3)]}
        out["v1"] = await store.put("/d/one", b"1" * 1000)
        await store.put("/d/two", b"2")
        out["v2"] = await store.put("/d/two", b"22")
        await store.txn([], [api.Put("/d/t/a", b"a"), api.Put("/d/t/b", b"b")])
        await store.delete("/d/one")
        out["v1"] = await store.put("/d/one", b"one", expected_version=api.NOT_EXISTS)
        session = await store.session(30)
        out["eph"] = await store.put("/d/ephemeral", b"e", session=session)
        out["rev"] = await store.revision()
        Path(ready).write_text(json.dumps(out))
        await asyncio.sleep(3600)  # killed -9 here: nothing is closed or flushed

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_embedded_survives_process_kill(tmp_path: Path) -> None:
    import json

    url = f"embedded://{tmp_path / 'store'}"
    ready = tmp_path / "ready"
    writer = Proc(
        [sys.executable, "-c", WRITER_SCRIPT, url, str(ready)],
        log_path=tmp_path / "writer.log",
        ready=ready.exists,
        ready_timeout=20,
    )
    writer.start()
    try:
        written = json.loads(ready.read_text())
        with pytest.raises(api.MetadataError, match="already open"):
            await open_store(url)  # one process at a time
    finally:
        writer.kill()

    store = await open_store(url)
    try:
        one, two = await store.get("/d/one"), await store.get("/d/two")
        assert one is not None and (one.value, one.version) == (b"one", written["v1"])
        assert two is not None and (two.value, two.version) == (b"22", written["v2"])
        assert [r.key async for r in store.scan_all("/d/t")] == ["/d/t/a", "/d/t/b"]
        # The dead process's session is expired on reopen, with a DELETE event.
        assert await store.get("/d/ephemeral") is None
        assert await store.revision() == written["rev"] + 1
        events = store.watch("/d", prefix=True, start_revision=written["eph"])
        put, deleted = await take(events, 2)
        assert (put.type, put.key) == (api.EventType.PUT, "/d/ephemeral")
        assert (deleted.type, deleted.key, deleted.revision) == (
            api.EventType.DELETE,
            "/d/ephemeral",
            written["rev"] + 1,
        )
        await events.aclose()  # type: ignore[attr-defined]
        assert await store.next_id("ledger") == written["ids"][-1] + 1
        assert await store.put("/d/new", b"n") == written["rev"] + 3  # next_id took one
    finally:
        await store.close()
    # And a clean close keeps everything too.
    store = await open_store(url)
    try:
        assert [r.key async for r in store.scan_all("/d")] == [
            "/d/new",
            "/d/one",
            "/d/t/a",
            "/d/t/b",
            "/d/two",
        ]
    finally:
        await store.close()


async def test_embedded_history_is_bounded(tmp_path: Path) -> None:
    store = await open_store(f"embedded://{tmp_path / 's'}?history=10")
    try:
        versions = [await store.put("/hb", str(i).encode()) for i in range(30)]
        with pytest.raises(api.WatchCompactedError) as caught:
            await take(store.watch("/hb", start_revision=versions[0]), 1)
        assert versions[0] < caught.value.compact_revision <= versions[-1] - 9
        events = store.watch("/hb", start_revision=versions[-10])
        assert [e.revision for e in await take(events, 10)] == versions[-10:]
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_embedded_slow_watcher_catches_up_from_history(tmp_path: Path) -> None:
    """A watcher too far behind for its in-memory queue re-reads history: no loss."""
    from magnetar.metadata import embedded

    store = await open_store(f"embedded://{tmp_path / 's'}")
    limit = embedded._MAX_PENDING_BATCHES
    embedded._MAX_PENDING_BATCHES = 5
    try:
        events = store.watch("/slow", prefix=True)
        for i in range(20):
            await store.put(f"/slow/{i % 2}", str(i).encode())
        got = await take(events, 20)
        assert [e.value for e in got] == [str(i).encode() for i in range(20)]
        await nothing_more(events)
        await events.aclose()  # type: ignore[attr-defined]
    finally:
        embedded._MAX_PENDING_BATCHES = limit
        await store.close()
