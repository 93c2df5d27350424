"""A bookie whose disk usage passes its threshold turns read-only: it leaves the writable
registrations (clients stop placing ledgers on it), refuses adds with UNAVAILABLE, and still
serves reads."""

from __future__ import annotations

import grpc
import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.metadata import keys
from magnetar.rpc import bookie_pb2, bookie_pb2_grpc
from tests.support.wait import eventually

pytestmark = pytest.mark.etcd


async def test_read_only_bookie(bookies, ledgers: LedgerClient, store) -> None:
    (bookie,) = bookies(1, extra_args=["--disk-usage-threshold", "0.0001"])
    await eventually(
        lambda: store.get(keys.bookie_readonly(bookie.bookie_id)),
        timeout=20,
        interval=0.2,
        what="the bookie registered as read-only",
    )
    assert await store.get(keys.bookie_available(bookie.bookie_id)) is None
    with pytest.raises(NotEnoughBookiesError):
        await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1)

    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        call = stub.AddEntries()
        await call.write(
            bookie_pb2.AddRequest(
                ledger_id=5,
                master_key=b"k",
                last_add_confirmed=-1,
                entries=[bookie_pb2.Entry(entry_id=0, data=b"x")],
            )
        )
        response = await call.read()
        await call.done_writing()
        assert response.results[0].code == grpc.StatusCode.UNAVAILABLE.value[0]
        info = await stub.Info(bookie_pb2.InfoRequest())
        assert info.read_only
