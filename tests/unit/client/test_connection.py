"""The asyncio client connection against a peer written for the test, on a loopback port:
what no Magnetar broker does yet (AUTH_CHALLENGE, until the security work lands) or ever
should (fall silent): credentials answer a challenge, a silent peer is pinged and then
dropped, a refused handshake and a request left unanswered fail their callers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from magnetar.client import connection
from magnetar.wire import commands, frames, pb, session, urls
from tests.support.procs import LOOPBACK

_C = pb.BaseCommand
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Serve = Callable[[Script], Awaitable[urls.Address]]


@dataclasses.dataclass
class _Token:
    """A token that was rotated between CONNECT and the broker's challenge."""

    method: str = "token"
    tokens: tuple[bytes, ...] = (b"first", b"rotated")
    reads: int = 0

    def auth_data(self) -> bytes:
        self.reads += 1
        return self.tokens[min(self.reads, len(self.tokens)) - 1]


async def _frame(reader: asyncio.StreamReader) -> frames.Frame:
    size = await reader.readexactly(4)
    body = await reader.readexactly(int.from_bytes(size, "big"))
    return next(frames.FrameDecoder().feed(size + body))


def _connected() -> bytes:
    return frames.encode_command(commands.connected(server_version="peer", protocol_version=21))


@pytest.fixture
async def peer() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def serve(script: Script) -> urls.Address:
        server = await asyncio.start_server(script, LOOPBACK, 0)
        servers.append(server)
        return urls.Address(LOOPBACK, server.sockets[0].getsockname()[1])

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_credentials_answer_the_challenge_then_requests_flow(peer: Serve) -> None:
    seen: list[pb.BaseCommand] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append((await _frame(reader)).command)  # CONNECT
        challenge = commands.auth_challenge(
            server_version="peer", protocol_version=21, method="token", data=b"refresh"
        )
        writer.write(frames.encode_command(challenge))
        seen.append((await _frame(reader)).command)  # AUTH_RESPONSE
        writer.write(_connected())
        ask = (await _frame(reader)).command
        writer.write(frames.encode_command(commands.success(ask.subscribe.request_id)))
        await reader.read()  # (until the client closes)

    address = await peer(script)
    conn = await connection.connect(address, options=connection.Options(auth=_Token()))
    connect, response = seen
    assert (connect.connect.auth_method_name, connect.connect.auth_data) == ("token", b"first")
    assert response.authResponse.response.auth_data == b"rotated"
    subscribe = commands.subscribe(topic="t", subscription="s", consumer_id=1, request_id=0)
    assert (await conn.request(subscribe)).type == _C.SUCCESS
    conn.close()


async def test_a_silent_peer_is_pinged_then_dropped(peer: Serve) -> None:
    pinged = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _frame(reader)
        writer.write(_connected())
        while True:  # never answers again
            if (await _frame(reader)).type == _C.PING:
                pinged.set()

    address = await peer(script)
    conn = await connection.connect(address, options=connection.Options(keepalive_s=0.2))
    lost = await asyncio.wait_for(conn.closed, timeout=10)
    assert pinged.is_set()
    assert "keepalive timed out" in str(lost)
    with pytest.raises(connection.ConnectionLostError):
        await conn.request(commands.lookup(topic="t", request_id=0))


async def test_a_refused_handshake_and_an_unanswered_request(peer: Serve) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _frame(reader)
        error = commands.error(request_id=0, error=pb.AuthenticationError, message="who?")
        writer.write(frames.encode_command(error))
        await reader.read()

    with pytest.raises(session.HandshakeRefusedError, match="AuthenticationError: who"):
        await connection.connect(await peer(refuse), options=connection.Options())

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _frame(reader)
        writer.write(_connected())
        await reader.read()

    conn = await connection.connect(await peer(mute), options=connection.Options())
    with pytest.raises(connection.RequestTimeoutError, match="did not answer LOOKUP"):
        await conn.request(commands.lookup(topic="t", request_id=0), within_s=0.2)
    assert conn.is_closed
