"""Two ``magnetar broker`` processes on one etcd and one bookie, for the suites about
ownership, lookups and the admin API across brokers.

Why this module exists: both suites need the same small cluster, ready only once each broker
has published its load report (the least-loaded choice of an unowned bundle reads them; with
one report missing, every bundle goes to the other broker and "bundles are spread" fails).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from magnetar.common import grpctls
from magnetar.metadata import keys, open_store
from tests.support.bookies import BookieProc
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until


def load_reports(metadata_url: str, *, tls: grpctls.ClientTlsConfig | None = None) -> int:
    """How many brokers have a load report in the store now (``tls``: to a TLS etcd)."""

    async def count() -> int:
        store = await open_store(metadata_url, tls=tls)
        try:
            return len([r async for r in store.scan_all(keys.BROKER_LOAD)])
        finally:
            await store.close()

    return asyncio.run(count())


@contextlib.contextmanager
def two_brokers(
    metadata_url: str, base_dir: Path, *, extra_args: Sequence[str] = ()
) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    """One bookie and two brokers (ensemble 1/1/1, a 2 s session TTL, ``extra_args``), every
    load report in (one per worker process with workers)."""
    bookie = BookieProc(metadata_url, base_dir).start()
    a = b = None
    try:
        a = BrokerProc(
            metadata_url, base_dir, ensemble=(1, 1, 1), session_ttl=2.0, extra_args=extra_args
        ).start()
        b = BrokerProc(
            metadata_url, base_dir, ensemble=(1, 1, 1), session_ttl=2.0, extra_args=extra_args
        ).start()
        brokers = a.workers + b.workers  # with workers, each is a broker of the cluster
        wait_until(
            lambda: load_reports(metadata_url) >= brokers, timeout=60, what="every load report"
        )
        yield a, b
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.stop()
        bookie.stop()
