"""The ledger client places ledgers only on bookies that serve its transport: a TLS client
skips bookies registered as plaintext and a plaintext client skips TLS ones, warning once
per bookie (the registrations are real, in an embedded store)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from magnetar.common import grpctls, tlsfiles
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import keys, open_store
from tests.support.certs import CA, MountedSecret


async def _registered(tmp_path: Path) -> LedgerClient:
    store = await open_store(f"embedded://{tmp_path / 'meta'}")
    for bookie_id, info in {
        "tls-1:3181": {"rack": "/r", "tls": True},
        "tls-2:3181": {"rack": "/r", "tls": True},
        "plain-1:3181": {"rack": "/r", "tls": False},
        "old-1:3181": {"rack": "/r"},  # registered before bookies said their transport
    }.items():
        await store.put(keys.bookie_available(bookie_id), json.dumps(info).encode())
    return LedgerClient(store)


def _client_tls(tmp_path: Path) -> grpctls.ClientTls:
    ca = CA()
    secret = MountedSecret(tmp_path / "broker")
    secret.write(ca.issue("broker"), ca.cert_pem)
    files = tlsfiles.TlsFiles(
        cert_file=secret.cert_file, key_file=secret.key_file, trust_file=secret.ca_file
    )
    return grpctls.ClientTlsConfig(files=files).open()


async def test_a_tls_client_places_only_on_tls_bookies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = await _registered(tmp_path)
    tls = LedgerClient(plain.store, tls=_client_tls(tmp_path))
    try:
        with caplog.at_level(logging.WARNING):
            assert {b.bookie_id for b in await tls.bookies()} == {"tls-1:3181", "tls-2:3181"}
            assert {b.bookie_id for b in await tls.bookies()} == {"tls-1:3181", "tls-2:3181"}
        warned = [r.getMessage() for r in caplog.records if "serves plaintext" in r.getMessage()]
        assert len(warned) == 2  # plain-1 and old-1, once each
        assert {b.bookie_id for b in await plain.bookies()} == {"plain-1:3181", "old-1:3181"}
    finally:
        await tls.close()
        await plain.close()
        await plain.store.close()
