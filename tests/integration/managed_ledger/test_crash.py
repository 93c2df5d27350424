"""kill -9 of the process owning a managed ledger (etcd and bookie processes): after the
next owner opens it, no unacknowledged entry is skipped and redelivery is bounded by what
was acknowledged within the cursor persist window."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.api import ManagedLedgerConfig, Position
from magnetar.managed_ledger.factory import ManagedLedgerFactoryImpl
from magnetar.metadata import api, open_store
from tests.conftest import etcd_url
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.procs import Proc
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd

REPO = Path(__file__).resolve().parents[3]
NAME = "public/default/persistent/crash"
INTERVAL = 0.5
SLACK = 1.0
"""Persist latency allowance on a loaded 2-core machine, on top of the interval."""


@pytest.fixture
async def store_url(own_etcd: EtcdServer, tmp_path: Path) -> AsyncIterator[str]:
    url = etcd_url(own_etcd, timeout=5.0)
    bookie = BookieProc(url, tmp_path).start()
    try:
        yield url
    finally:
        bookie.stop()


def parse(log: str) -> tuple[Position, list[tuple[Position, float]], dict[Position, bytes]]:
    last = Position(-1, -1)
    acks = []
    added = {}
    lines = log.splitlines()
    if log and not log.endswith("\n"):
        lines.pop()  # the owner is still writing this line (read while it runs)
    for line in lines:
        if line.startswith("LAST "):
            last = Position.parse(line.split()[1])
        elif line.startswith("ACK "):
            _, pos, ts = line.split()
            acks.append((Position.parse(pos), float(ts)))
        elif line.startswith("ADD "):
            _, pos, i = line.split()
            added[Position.parse(pos)] = b"late" + i.encode()
    return last, acks, added


async def test_cursor_state_after_sigkill(store_url: str, tmp_path: Path) -> None:
    log_path = tmp_path / "owner.log"
    owner = Proc(
        [sys.executable, "-m", "tests.integration.managed_ledger.owner_proc",
         store_url, NAME, "3000", str(INTERVAL)],
        log_path=log_path,
        ready=lambda: log_path.exists() and "READY" in log_path.read_text(),
        cwd=REPO,
    )  # fmt: skip
    owner.start()
    try:
        # let it acknowledge for a few persist windows, then kill it mid-stream
        def acked_for_3s() -> bool:
            assert owner.alive(), owner.tail()
            acks = parse(log_path.read_text())[1]
            return bool(acks) and acks[0][1] <= time.time() - 3.0

        await eventually(acked_for_3s, timeout=30, what="3 s of acknowledgements", retry_on=())
        owner.kill()
        killed_at = time.time()
    finally:
        owner.kill()
    last, announced, added = parse(log_path.read_text())
    announced_set = {p for p, _ in announced}

    store = await open_store(store_url)
    client = LedgerClient(store, add_timeout=5.0, rpc_timeout=5.0)
    factory = ManagedLedgerFactoryImpl(
        store, client, default_config=ManagedLedgerConfig(max_entries_per_ledger=100)
    )
    try:
        ml = await factory.open(NAME)
        cursor = ml.cursors["sub"]
        everything = await ml.read_entries(Position(0, 0), max_entries=100_000)
        all_positions = [e.position for e in everything]
        assert all_positions[2999] == last
        # every add the dead owner confirmed is there (it was rolling ledgers meanwhile)
        stored = {e.position: e.data for e in everything}
        assert added and all(stored.get(p) == data for p, data in added.items())
        assert len({p.ledger_id for p in added}) > 1
        # never skip: an entry never announced for acknowledgement is not acknowledged
        skipped = [p for p in all_positions if p not in announced_set and cursor.is_deleted(p)]
        assert not skipped, f"unacknowledged entries skipped: {skipped[:5]}"
        # bounded redelivery: acknowledgements older than the persist window survived
        old = [p for p, t in announced if t < killed_at - INTERVAL - SLACK]
        lost = [p for p in old if not cursor.is_deleted(p)]
        assert not lost, f"{len(lost)} acknowledgements older than the window lost: {lost[:5]}"
        redelivered = [p for p in announced_set if not cursor.is_deleted(p)]
        recent = [p for p, t in announced if t >= killed_at - INTERVAL - SLACK]
        assert len(redelivered) <= len(recent)
        assert len(old) > 300
        print(f"acks {len(announced)}: old {len(old)}, recent {len(recent)}")
        print(f"redelivered {len(redelivered)}")
        # what the subscription reads next: exactly the unacknowledged entries, in order
        got = [e.position for e in await cursor.read_entries(10_000)]
        assert got == [p for p in all_positions if not cursor.is_deleted(p)]
        assert set(got) >= {p for p in all_positions if p not in announced_set}
    finally:
        await factory.close()
        await client.close()
        await store.close()
        assert isinstance(store, api.MetadataStore)
