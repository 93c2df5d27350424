"""``magnetar autorecovery`` in a cluster whose every hop is mutual TLS (docs/operations.md):
etcd and three bookies requiring client certificates; the autorecovery process reaches both
with the --metadata-tls-* and --bookkeeper-tls-* flags, and re-replicates a killed bookie's
ledger, read back by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.ledger import entry
from magnetar.ledger import underreplication as ur
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store
from tests.integration.internal_tls.conftest import Pki, bookie_args
from tests.support.autorecovery import FAST, AutorecoveryProc
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


async def test_autorecovery_over_mutual_tls(pki: Pki, tls_etcd: EtcdServer, tmp_path: Path) -> None:
    bookies = {}
    procs = []
    try:
        for _ in range(3):
            b = BookieProc(tls_etcd.url, tmp_path, extra_args=bookie_args(pki)).start()
            procs.append(b)
            bookies[b.bookie_id] = b
        secret = pki.client
        recovery = AutorecoveryProc(
            tls_etcd.url,
            tmp_path,
            extra_args=(
                *FAST,
                f"--metadata-tls-trust-certs-file={secret.ca_file}",
                f"--metadata-tls-certificate-file={secret.cert_file}",
                f"--metadata-tls-key-file={secret.key_file}",
                "--bookkeeper-tls-client-authentication=true",
                f"--bookkeeper-tls-certificate-file={secret.cert_file}",
                f"--bookkeeper-tls-key-file={secret.key_file}",
                f"--bookkeeper-tls-trust-certs-file={secret.ca_file}",
            ),
        )
        procs.append(recovery)
        recovery.start()

        store = await open_store(tls_etcd.url, tls=pki.metadata_tls())
        client = LedgerClient(store, tls=pki.metadata_tls().open(), rpc_timeout=5.0)
        try:

            async def registered() -> bool:
                return len(await client.bookies()) == 3

            await eventually(registered, timeout=20, interval=0.2, what="3 TLS bookies")
            h = await client.create(ensemble_size=2, write_quorum=2, ack_quorum=2)
            entries = [b"tls-entry-%d" % i for i in range(50)]
            for data in entries:
                await h.add_entry(data)
            await h.close()
            victim = h.metadata.last_fragment.ensemble[0]
            bookies[victim].kill()

            async def moved() -> bool:
                meta, _ = await client.read_metadata(h.ledger_id)
                return victim not in meta.last_fragment.ensemble and not await ur.marks(store)

            await eventually(moved, timeout=90, interval=0.5, what=f"ledger moved off {victim}")
            meta, _ = await client.read_metadata(h.ledger_id)
            for bookie in meta.last_fragment.ensemble:  # both copies, the restored one too
                got = await client.bookie(bookie).read(h.ledger_id, 0, 49, past_lac=True)
                assert [entry.unwrap(d)[1] for _, d in got] == entries
        finally:
            await client.close()
            await store.close()
    finally:
        for p in reversed(procs):
            p.stop()
