"""The local transport: a ledger client adding to a bookie in its own process (standalone).

Adds skip gRPC and call the bookie's add path; every outcome must match what the same
request gets over gRPC (the parity cases run both clients against one bookie), reads and
fencing still work across the two transports, and nothing queued is left hanging on close.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from magnetar.bookie import metrics as bookie_metrics
from magnetar.bookie.server import BookieServer
from magnetar.ledger.bookie_client import BookieClient, LocalBookieClient
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import (
    BookieError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
)
from magnetar.metadata import api
from tests.support.local_bookie import local_ledgers

OK = 0
FENCED = grpc.StatusCode.FAILED_PRECONDITION.value[0]
TOO_LARGE = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
BAD_KEY = grpc.StatusCode.PERMISSION_DENIED.value[0]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]


@dataclass
class Local:
    store: api.MetadataStore
    bookie: BookieServer
    local: LedgerClient  # adds through the local transport
    remote: LedgerClient  # the same bookie over gRPC


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Local]:
    async with local_ledgers(tmp_path, client_timeout=5.0) as ledgers:
        assert ledgers.bookie.service is not None
        remote = LedgerClient(ledgers.store, add_timeout=5.0, rpc_timeout=5.0)
        try:
            yield Local(ledgers.store, ledgers.bookie, ledgers.client, remote)
        finally:
            await remote.close()


def adds_counted() -> float:
    return bookie_metrics.REGISTRY.get_sample_value("bookie_add_entries_total") or 0.0


async def test_adds_and_reads_go_local_and_match_grpc(env: Local) -> None:
    assert isinstance(env.local.bookie(env.bookie.bookie_id), LocalBookieClient)
    assert not isinstance(env.remote.bookie(env.bookie.bookie_id), LocalBookieClient)
    before = adds_counted()
    handle = await env.local.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    payloads = [f"entry-{i}".encode() * (1 + i % 7) for i in range(2_000)]
    ids = await asyncio.gather(*(handle.append(p) for p in payloads))  # pipelined
    assert ids == list(range(2_000))
    await handle.close()
    assert adds_counted() - before == 2_000  # the bookie's own metrics saw every add

    for client in (env.local, env.remote):
        reader = await client.open(handle.ledger_id)
        assert reader.last_add_confirmed == 1_999
        got = await reader.read(0, 1_999)
        assert [data for _, data in got] == payloads


@pytest.mark.parametrize("case", ["past-lac", "unknown-ledger", "bad-range", "fence-read"])
async def test_read_outcomes_match_grpc(env: Local, case: str) -> None:
    """One bookie, the same read through each transport: the same answer or error."""
    key = b"r" * 16
    ledger_id = 8_000 + ["past-lac", "unknown-ledger", "bad-range", "fence-read"].index(case)
    local = env.local.bookie(env.bookie.bookie_id)
    remote = env.remote.bookie(env.bookie.bookie_id)
    await local.add_future(ledger_id=ledger_id, entry_id=0, master_key=key, lac=-1, data=b"e0")
    await local.add_future(ledger_id=ledger_id, entry_id=1, master_key=key, lac=0, data=b"e1")
    first, last, kw = 0, 1, {}
    if case == "past-lac":
        first, last = 1, 1  # stored, but the LAC (0) does not cover it
    elif case == "unknown-ledger":
        ledger_id = 424_242
    elif case == "bad-range":
        first, last = 1, 0
    else:
        kw = {"fence": True, "master_key": key, "past_lac": True}

    async def outcome(client: BookieClient) -> object:
        try:
            return await client.read(ledger_id, first, last, **kw)  # type: ignore[arg-type]
        except BookieError as err:
            return ("BookieError", err.code)
        except NoSuchEntryError:
            return "NoSuchEntryError"

    got_local = await outcome(local)
    assert got_local == await outcome(remote)
    expected: object = {
        "past-lac": "NoSuchEntryError",
        "unknown-ledger": "NoSuchEntryError",
        "bad-range": ("BookieError", grpc.StatusCode.INVALID_ARGUMENT.value[0]),
        "fence-read": [(0, b"e0"), (1, b"e1")],
    }[case]
    assert got_local == expected


async def test_fencing_over_grpc_stops_the_local_writer(env: Local) -> None:
    writer = await env.local.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    for i in range(50):
        await writer.add_entry(b"x%d" % i)
    recovered = await env.remote.open(writer.ledger_id, recovery=True)
    assert recovered.last_add_confirmed == 49
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"too late")
    again = await env.remote.open(writer.ledger_id)
    assert again.last_add_confirmed == 49


@pytest.mark.parametrize(
    ("case", "expected"),
    [("ok", OK), ("too-large", TOO_LARGE), ("other-key", BAD_KEY), ("fenced", FENCED)],
)
async def test_outcomes_match_grpc(env: Local, case: str, expected: int) -> None:
    """One bookie, the same request through each transport: the same status code."""
    clients: list[BookieClient] = [
        env.local.bookie(env.bookie.bookie_id),
        env.remote.bookie(env.bookie.bookie_id),
    ]
    codes = []
    for n, client in enumerate(clients):
        ledger_id = 7_000 + 10 * ["ok", "too-large", "other-key", "fenced"].index(case) + n
        key = b"k" * 16
        data = b"payload"
        if case == "too-large":
            data = b"x" * (6 * 1024 * 1024)
        if case in ("other-key", "fenced"):
            await client.add_future(
                ledger_id=ledger_id, entry_id=0, master_key=key, lac=-1, data=b"a"
            )
        if case == "other-key":
            key = b"another key....."
        if case == "fenced":
            await client.fence(ledger_id, key)
        try:
            await client.add_future(
                ledger_id=ledger_id, entry_id=1, master_key=key, lac=-1, data=data
            )
            codes.append(OK)
        except BookieError as err:
            codes.append(err.code)
    assert codes == [expected, expected]


async def test_close_fails_what_is_queued(env: Local) -> None:
    client = LocalBookieClient(env.bookie.bookie_id, env.bookie.service)  # type: ignore[arg-type]
    results: list[BaseException | None] = []
    for i in range(100):
        client.add(
            ledger_id=9_001, entry_id=i, master_key=b"k", lac=-1, data=b"d", callback=results.append
        )
    await client.close()  # before the batch was handed over: all fail, none hangs
    assert len(results) == 100
    assert all(isinstance(r, BookieError) and r.code == UNAVAILABLE for r in results)
    late: list[BaseException | None] = []
    client.add(
        ledger_id=9_001, entry_id=100, master_key=b"k", lac=-1, data=b"d", callback=late.append
    )
    assert len(late) == 1 and isinstance(late[0], BookieError)


async def test_add_outcomes_come_in_entry_order_never_from_inside_add(env: Local) -> None:
    """``LedgerHandle.add``: callbacks, not futures. Each outcome arrives once, in entry
    order, from the event loop after the call returned; a callback that raises does not keep
    the others' outcomes; ``close`` waits for the adds in flight."""
    handle = await env.local.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    seen: list[tuple[int, BaseException | None, bool]] = []
    inside = False

    def done(entry_id: int, error: BaseException | None) -> None:
        seen.append((entry_id, error, inside))

    def raises(entry_id: int, error: BaseException | None) -> None:
        seen.append((entry_id, error, inside))
        raise RuntimeError("a caller's bug")

    for i in range(600):
        inside = True
        handle.add(f"e{i}".encode(), raises if i == 300 else done)
        inside = False
    assert seen == []  # nothing before the loop ran
    await asyncio.gather(handle.close(), handle.close())  # both wait for every add in flight
    await asyncio.sleep(0)  # the last delivery runs once the add settled
    assert [(eid, err) for eid, err, _ in seen] == [(i, None) for i in range(600)]
    assert not any(was_inside for _, _, was_inside in seen)

    seen.clear()
    inside = True
    handle.add(b"after close", done)
    inside = False
    assert seen == []
    await asyncio.sleep(0)
    ((eid, err, was_inside),) = seen
    assert eid == -1
    assert isinstance(err, LedgerClosedError)
    assert not was_inside
    reader = await env.local.open(handle.ledger_id)
    got = await reader.read(0, 599)
    assert [data for _, data in got] == [f"e{i}".encode() for i in range(600)]
