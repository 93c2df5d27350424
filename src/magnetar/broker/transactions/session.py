"""The transaction commands of a client connection, each one command in, one answer out.

Why this module exists: like ``broker.requests`` for lookups, these commands need nothing
of the connection but its send; the connection dispatches every type in :data:`COMMANDS`
here. With transactions disabled each is refused as Pulsar's ServerCnx does: an ERROR
with NotAllowedError "Transactions are not enabled.".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, cast

from magnetar.broker.contracts import BrokerError
from magnetar.broker.transactions.ids import NOT_ENABLED, HasTxnId, TxnId, is_commit
from magnetar.broker.transactions.service import TransactionService
from magnetar.wire import commands, pb
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)
_C = pb.BaseCommand

COMMANDS: Final = (
    _C.TC_CLIENT_CONNECT_REQUEST,
    _C.NEW_TXN,
    _C.ADD_PARTITION_TO_TXN,
    _C.ADD_SUBSCRIPTION_TO_TXN,
    _C.END_TXN,
    _C.END_TXN_ON_PARTITION,
    _C.END_TXN_ON_SUBSCRIPTION,
)


def _error_of(exc: BaseException) -> tuple[pb.ServerError.ValueType, str]:
    if isinstance(exc, BrokerError):
        return exc.code, exc.message  # type: ignore[return-value]
    if isinstance(exc, WireError):
        return exc.server_error, str(exc)
    return pb.UnknownError, f"{type(exc).__name__}: {exc}"


def _response(
    cmd_type: pb.BaseCommand.Type.ValueType,
    field: str,
    request_id: int,
    txn: TxnId | None,
    exc: BaseException | None,
) -> pb.BaseCommand:
    out = pb.BaseCommand(type=cmd_type)
    r = getattr(out, field)
    r.request_id = request_id
    if txn is not None:
        r.txnid_most_bits = txn.most
        r.txnid_least_bits = txn.least
    if exc is not None:
        code, message = _error_of(exc)
        r.error = code
        r.message = message
    return out


async def handle(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    """The answer to one transaction command (errors included)."""
    t = command.type
    handler = _HANDLERS[t]
    body = commands.body(command)
    rid = int(getattr(body, "request_id"))  # noqa: B009 (every transaction command has one)
    if not service.enabled:
        return commands.error(request_id=rid, error=pb.NotAllowedError, message=NOT_ENABLED)
    try:
        return await handler(service, command)
    except Exception as exc:
        if not isinstance(exc, BrokerError):
            log.warning("transaction command %s failed", commands.type_name(t), exc_info=exc)
        else:
            log.info("transaction command %s refused: %s", commands.type_name(t), exc.message)
        response_type, field, with_txn = _ERRORS[t]
        txn = TxnId.of(cast(HasTxnId, body)) if with_txn else None
        return _response(response_type, field, rid, txn, exc)


async def _tc_connect(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    cmd = command.tcClientConnectRequest
    await service.connect(cmd.tc_id)
    return _response(
        _C.TC_CLIENT_CONNECT_RESPONSE, "tcClientConnectResponse", cmd.request_id, None, None
    )


async def _new_txn(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    cmd = command.newTxn
    # the clients send the timeout in milliseconds in this field, as Pulsar's broker reads it
    txn = await service.new_txn(cmd.tc_id, cmd.txn_ttl_seconds)
    return _response(_C.NEW_TXN_RESPONSE, "newTxnResponse", cmd.request_id, txn, None)


async def _add_partitions(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    cmd = command.addPartitionToTxn
    txn = TxnId.of(cmd)
    await service.add_partitions(txn, list(cmd.partitions))
    return _response(
        _C.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse", cmd.request_id, txn, None
    )


async def _add_subscriptions(
    service: TransactionService, command: pb.BaseCommand
) -> pb.BaseCommand:
    cmd = command.addSubscriptionToTxn
    txn = TxnId.of(cmd)
    await service.add_subscriptions(txn, [(s.topic, s.subscription) for s in cmd.subscription])
    return _response(
        _C.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "addSubscriptionToTxnResponse",
        cmd.request_id,
        txn,
        None,
    )


async def _end(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    cmd = command.endTxn
    txn = TxnId.of(cmd)
    await service.end(txn, is_commit(cmd.txn_action))
    return _response(_C.END_TXN_RESPONSE, "endTxnResponse", cmd.request_id, txn, None)


async def _end_on_partition(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    cmd = command.endTxnOnPartition
    txn = TxnId.of(cmd)
    await service.end_on_partition(cmd.topic, txn, is_commit(cmd.txn_action))
    return _response(
        _C.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse", cmd.request_id, txn, None
    )


async def _end_on_subscription(
    service: TransactionService, command: pb.BaseCommand
) -> pb.BaseCommand:
    cmd = command.endTxnOnSubscription
    txn = TxnId.of(cmd)
    sub = cmd.subscription
    await service.end_on_subscription(sub.topic, sub.subscription, txn, is_commit(cmd.txn_action))
    return _response(
        _C.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        "endTxnOnSubscriptionResponse",
        cmd.request_id,
        txn,
        None,
    )


_Handler = Callable[[TransactionService, pb.BaseCommand], Awaitable[pb.BaseCommand]]

_HANDLERS: Final[dict[int, _Handler]] = {
    _C.TC_CLIENT_CONNECT_REQUEST: _tc_connect,
    _C.NEW_TXN: _new_txn,
    _C.ADD_PARTITION_TO_TXN: _add_partitions,
    _C.ADD_SUBSCRIPTION_TO_TXN: _add_subscriptions,
    _C.END_TXN: _end,
    _C.END_TXN_ON_PARTITION: _end_on_partition,
    _C.END_TXN_ON_SUBSCRIPTION: _end_on_subscription,
}

_ERRORS: Final[dict[int, tuple[pb.BaseCommand.Type.ValueType, str, bool]]] = {
    _C.TC_CLIENT_CONNECT_REQUEST: (
        _C.TC_CLIENT_CONNECT_RESPONSE,
        "tcClientConnectResponse",
        False,
    ),
    _C.NEW_TXN: (_C.NEW_TXN_RESPONSE, "newTxnResponse", False),
    _C.ADD_PARTITION_TO_TXN: (_C.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse", True),
    _C.ADD_SUBSCRIPTION_TO_TXN: (
        _C.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "addSubscriptionToTxnResponse",
        True,
    ),
    _C.END_TXN: (_C.END_TXN_RESPONSE, "endTxnResponse", True),
    _C.END_TXN_ON_PARTITION: (_C.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse", True),
    _C.END_TXN_ON_SUBSCRIPTION: (
        _C.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        "endTxnOnSubscriptionResponse",
        True,
    ),
}
