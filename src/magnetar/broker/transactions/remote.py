"""One request to another broker over the Pulsar protocol: END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION for topics a coordinator's broker does not serve.

Why this module exists: a transaction's coordinator and its topics may be served by
different brokers; as Pulsar's ``TransactionBufferClient`` the coordinator's broker then
speaks the binary protocol to the topic's owner (found by lookup). A request opens a
connection, sends CONNECT and the command, waits for the answer with the same request id
(bounded), and closes; ends are rare next to messages, so nothing is pooled.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from magnetar.broker.config import PROTOCOL_VERSION
from magnetar.broker.contracts import BrokerError
from magnetar.wire import commands, frames, pb

TIMEOUT_S: Final = 30.0
_C = pb.BaseCommand


def _address(service_url: str) -> tuple[str, int]:
    host, _, port = service_url.removeprefix("pulsar://").rstrip("/").rpartition(":")
    return host, int(port)


async def request(service_url: str, cmd: pb.BaseCommand, response: int) -> pb.BaseCommand:
    """Send ``cmd`` to the broker at ``service_url``; its answer of type ``response`` (an
    ERROR answer raises BrokerError, so does a broken or silent connection)."""
    rid = int(getattr(commands.body(cmd), "request_id"))  # noqa: B009 (every request has one)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            return await _exchange(service_url, cmd, response, rid)
    except (OSError, TimeoutError, EOFError) as exc:
        raise BrokerError(
            pb.ServiceNotReady, f"broker {service_url} not reachable for transactions: {exc}"
        ) from exc


async def _exchange(
    service_url: str, cmd: pb.BaseCommand, response: int, rid: int
) -> pb.BaseCommand:
    host, port = _address(service_url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            frames.encode_command(
                commands.connect(
                    client_version="magnetar-broker", protocol_version=PROTOCOL_VERSION
                )
            )
        )
        writer.write(frames.encode_command(cmd))
        await writer.drain()
        decoder = frames.FrameDecoder()
        while True:
            data = await reader.read(65536)
            if not data:
                raise EOFError("connection closed before the answer")
            for frame in decoder.feed(data):
                if frame.type == _C.ERROR and frame.command.error.request_id == rid:
                    e = frame.command.error
                    raise BrokerError(e.error, e.message)
                if frame.type == response:
                    return frame.command
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
