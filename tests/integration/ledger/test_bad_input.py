"""Bad input to a bookie gets a specific gRPC error; the bookie keeps serving others."""

from __future__ import annotations

import grpc
import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.rpc import bookie_pb2, bookie_pb2_grpc
from tests.integration.ledger.conftest import wait_bookies

pytestmark = pytest.mark.etcd

FENCED = grpc.StatusCode.FAILED_PRECONDITION.value[0]
TOO_LARGE = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
BAD_KEY = grpc.StatusCode.PERMISSION_DENIED.value[0]


async def add(stub, request) -> bookie_pb2.AddResponse:
    call = stub.AddEntries()
    await call.write(request)
    response = await call.read()
    await call.done_writing()
    return response


async def test_bad_input_gets_specific_errors(bookies, ledgers: LedgerClient) -> None:
    (bookie,) = bookies(1)
    await wait_bookies(ledgers, 1)
    healthy = await ledgers.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
    assert await healthy.add_entry(b"before") == 0

    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        key = b"k" * 16

        # an entry over the size limit
        big = bookie_pb2.Entry(entry_id=0, data=b"x" * (6 * 1024 * 1024))
        r = await add(
            stub,
            bookie_pb2.AddRequest(
                ledger_id=900, last_add_confirmed=-1, master_key=key, entries=[big]
            ),
        )
        assert r.results[0].code == TOO_LARGE, r.results[0]

        # a ledger written with one key, then another key
        ok = bookie_pb2.Entry(entry_id=0, data=b"fine")
        r = await add(
            stub,
            bookie_pb2.AddRequest(
                ledger_id=901, last_add_confirmed=-1, master_key=key, entries=[ok]
            ),
        )
        assert r.results[0].code == 0
        r = await add(
            stub,
            bookie_pb2.AddRequest(
                ledger_id=901, last_add_confirmed=-1, master_key=b"other", entries=[ok]
            ),
        )
        assert r.results[0].code == BAD_KEY

        # an unknown ledger
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReadEntries(
                bookie_pb2.ReadRequest(ledger_id=424242, first_entry_id=0, last_entry_id=0)
            )
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

        # a read past the LAC (entry 0 is stored, but no LAC covers it yet)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReadEntries(
                bookie_pb2.ReadRequest(ledger_id=901, first_entry_id=0, last_entry_id=0)
            )
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE
        assert "last add confirmed" in err.value.details()

        # an add to a fenced ledger
        await stub.Fence(bookie_pb2.FenceRequest(ledger_id=901, master_key=key))
        nxt = bookie_pb2.Entry(entry_id=1, data=b"late")
        r = await add(
            stub,
            bookie_pb2.AddRequest(
                ledger_id=901, last_add_confirmed=-1, master_key=key, entries=[nxt]
            ),
        )
        assert r.results[0].code == FENCED

        # a bad range
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReadEntries(
                bookie_pb2.ReadRequest(ledger_id=901, first_entry_id=5, last_entry_id=2)
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        # a garbled request: bytes that are not the message
        garbled = channel.unary_unary(
            "/magnetar.bookie.v1.Bookie/ReadEntries",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await garbled(b"\xff\xff\xff\xff\x0f garbage")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        info = await stub.Info(bookie_pb2.InfoRequest())
        assert info.bookie_id == bookie.bookie_id

    # the other client was not disturbed
    assert await healthy.add_entry(b"after") == 1
    await healthy.close()
    assert "bookie_ADD_ENTRY" in bookie.metrics()
