"""kill -9 while adding: every acknowledged entry is there, intact, after the restart."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from magnetar.bookie.storage import api
from magnetar.bookie.storage.db import DbLedgerStorage
from tests.integration.bookie_storage import crash_child

REPO = Path(__file__).resolve().parents[3]


def run_and_kill(root: Path, *, min_acked: int, max_seconds: float) -> dict[int, int]:
    """Start the child, SIGKILL it after some acknowledged adds; ledger -> highest acked."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.bookie_storage.crash_child", str(root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    buf = b""
    acked = 0
    deadline = time.monotonic() + max_seconds
    try:
        target = min_acked + random.randint(0, min_acked)
        while acked < target and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            acked = buf.count(b"\n")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=10)
        buf += rest or b""
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")[-2000:]
    highest: dict[int, int] = {}
    for line in buf.split(b"\n")[:-1]:  # the last piece may be a partial line
        if line == b"ready":
            continue
        ledger, first, last = map(int, line.split())
        assert first == highest.get(ledger, -1) + 1
        highest[ledger] = last
    assert sum(v + 1 for v in highest.values()) > 0, "the child acknowledged nothing"
    return highest


async def test_sigkill_during_adds_loses_nothing_acknowledged(tmp_path: Path) -> None:
    for round_ in range(2):
        root = tmp_path / f"round{round_}"
        highest = run_and_kill(root, min_acked=1000, max_seconds=15)
        storage = DbLedgerStorage(crash_child.config(root))
        await storage.start()
        try:
            for ledger, last in highest.items():
                lid = api.LedgerId(ledger)
                got: list[tuple[api.EntryId, bytes]] = []
                while len(got) <= last:
                    got += await storage.read_range(
                        lid, api.EntryId(len(got)), api.EntryId(last), 1 << 22
                    )
                assert [e for e, _ in got] == list(range(last + 1))
                for e, data in got:
                    assert data == crash_child.entry_data(ledger, e), (ledger, e)
                assert await storage.last_entry_id(lid) >= last
                assert await storage.last_add_confirmed(lid) >= last - 1
        finally:
            await storage.close()
