"""The bookie's /metrics: BookKeeper-style names, with values that follow the traffic."""

from __future__ import annotations

import re

import pytest

from magnetar.ledger.client import LedgerClient
from tests.integration.ledger.conftest import wait_bookies

pytestmark = pytest.mark.etcd


def value(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


async def test_metrics_follow_adds_and_reads(bookies, ledgers: LedgerClient) -> None:
    (bookie,) = bookies(1)
    await wait_bookies(ledgers, 1)
    handle = await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    for _ in range(20):
        await handle.add_entry(b"m" * 1000)
    await handle.close()
    reader = await ledgers.open(handle.ledger_id)
    await reader.read(0, 19)

    text = bookie.metrics()
    assert value(text, "bookie_journal_JOURNAL_SYNC_count") >= 1
    assert value(text, "bookie_journal_JOURNAL_SYNC_sum") > 0
    # each add batch waited in the journal's queue once (20 adds, one at a time: 20 batches)
    assert value(text, "bookie_journal_JOURNAL_QUEUE_LATENCY_count") >= 20
    assert value(text, "bookie_ADD_ENTRY_count") >= 20
    assert value(text, "bookie_add_entries_total") == 20
    assert value(text, "bookie_add_bytes_total") >= 20 * 1000
    assert value(text, "bookie_read_entries_total") >= 20
    assert value(text, "bookie_READ_ENTRY_count") >= 1
    assert value(text, "bookie_write_cache_size") >= 0
    assert value(text, "bookie_entry_log_count") >= 0
    assert 0 < value(text, "bookie_ledger_dir_usage_ratio") < 1
    assert value(text, "bookie_SERVER_STATUS") == 1
