"""One request to another broker over the Pulsar protocol: END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION for topics a coordinator's broker does not serve.

Why this module exists: a transaction's coordinator and its topics may be served by
different brokers; as Pulsar's ``TransactionBufferClient`` the coordinator's broker then
speaks the binary protocol to the topic's owner (found by lookup). A request opens a
connection of the client layer (``magnetar.client``), sends the command, waits for the
answer with its request id (bounded), and closes; ends are rare next to messages, so
nothing is pooled.
"""

from __future__ import annotations

from typing import Final

from magnetar import __version__
from magnetar.broker.contracts import BrokerError
from magnetar.client import connection
from magnetar.wire import matching, pb, session, urls

TIMEOUT_S: Final = 30.0
_C = pb.BaseCommand
_OPTIONS: Final = connection.Options(
    client_version=f"magnetar-broker-{__version__}",
    connect_timeout_s=TIMEOUT_S,
    request_timeout_s=TIMEOUT_S,
)


class _InFlight:
    """Requests sent and not answered yet, in this process (Pulsar's
    pulsar_txn_tb_client_pending_requests)."""

    count = 0


def pending_requests() -> int:
    return _InFlight.count


async def request(service_url: str, cmd: pb.BaseCommand, response: int) -> pb.BaseCommand:
    """Send ``cmd`` to the broker at ``service_url``; its answer of type ``response`` (an
    ERROR answer raises BrokerError, so does a broken or silent connection)."""
    _InFlight.count += 1
    try:
        return await _request(service_url, cmd, response)
    finally:
        _InFlight.count -= 1


async def _request(service_url: str, cmd: pb.BaseCommand, response: int) -> pb.BaseCommand:
    rid = matching.request_id_of(cmd) or 0
    try:
        conn = await connection.connect(urls.broker_address(service_url), options=_OPTIONS)
    except (connection.ConnectionLostError, session.HandshakeRefusedError, urls.BadUrlError) as exc:
        raise BrokerError(
            pb.ServiceNotReady, f"broker {service_url} not reachable for transactions: {exc}"
        ) from exc
    try:
        answer = await conn.request(cmd)
    except connection.ConnectionLostError as exc:
        raise BrokerError(
            pb.ServiceNotReady, f"broker {service_url} not reachable for transactions: {exc}"
        ) from exc
    finally:
        conn.close()
    matching.set_request_id(answer, rid)
    if answer.type == _C.ERROR:
        raise BrokerError(answer.error.error, answer.error.message)
    if answer.type != response:
        raise BrokerError(
            pb.UnknownError, f"broker {service_url} answered with {answer.type}, not {response}"
        )
    return answer
