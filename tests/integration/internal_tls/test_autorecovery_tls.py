"""``magnetar autorecovery`` in a cluster whose every hop is mutual TLS (docs/operations.md):
etcd and three bookies requiring client certificates; the autorecovery process reaches both
with the --metadata-tls-* and --bookkeeper-tls-* flags, and re-replicates a killed bookie's
ledger, read back by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store
from tests.integration.internal_tls.conftest import Pki, bookie_args
from tests.support.autorecovery import FAST, AutorecoveryProc, kill_one_and_read_back
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer

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
            await kill_one_and_read_back(
                client, store, bookies, prefix=b"tls-entry", registered_timeout=20
            )
        finally:
            await client.close()
            await store.close()
    finally:
        for p in reversed(procs):
            p.stop()
