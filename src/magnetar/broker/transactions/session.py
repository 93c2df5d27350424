"""The transaction commands of a client connection, each one command in, one answer out.

Why this module exists: like ``broker.requests`` for lookups, these commands need nothing
of the connection but its send; the connection dispatches every type in :data:`COMMANDS`
here. With transactions disabled each is refused as Pulsar's ServerCnx does: an ERROR
with NotAllowedError "Transactions are not enabled.".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple, cast

from magnetar.broker.contracts import BrokerError
from magnetar.broker.requests import error_of
from magnetar.broker.transactions.ids import NOT_ENABLED, HasTxnId, TxnId, is_commit
from magnetar.broker.transactions.service import TransactionService
from magnetar.wire import commands, pb

log = logging.getLogger(__name__)
_C = pb.BaseCommand


def _response(
    spec: _Spec, request_id: int, txn: TxnId | None, exc: BaseException | None
) -> pb.BaseCommand:
    out = pb.BaseCommand(type=spec.response)
    r = getattr(out, spec.field)
    r.request_id = request_id
    if txn is not None:
        r.txnid_most_bits = txn.most
        r.txnid_least_bits = txn.least
    if exc is not None:
        code, message = error_of(exc)
        r.error = code
        r.message = message
    return out


async def handle(service: TransactionService, command: pb.BaseCommand) -> pb.BaseCommand:
    """The answer to one transaction command (errors included)."""
    t = command.type
    spec = _COMMANDS[t]
    body = commands.body(command)
    rid = int(getattr(body, "request_id"))  # noqa: B009 (every transaction command has one)
    if not service.enabled:
        return commands.error(request_id=rid, error=pb.NotAllowedError, message=NOT_ENABLED)
    try:
        txn = await spec.run(service, command)
    except Exception as exc:
        if not isinstance(exc, BrokerError):
            log.warning("transaction command %s failed", commands.type_name(t), exc_info=exc)
        else:
            log.info("transaction command %s refused: %s", commands.type_name(t), exc.message)
        return _response(spec, rid, TxnId.of(cast(HasTxnId, body)) if spec.with_txn else None, exc)
    return _response(spec, rid, txn, None)


async def _tc_connect(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    await service.connect(command.tcClientConnectRequest.tc_id)
    return None


async def _new_txn(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    cmd = command.newTxn
    # the clients send the timeout in milliseconds in this field, as Pulsar's broker reads it
    return await service.new_txn(cmd.tc_id, cmd.txn_ttl_seconds)


async def _add_partitions(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    cmd = command.addPartitionToTxn
    txn = TxnId.of(cmd)
    await service.add_partitions(txn, list(cmd.partitions))
    return txn


async def _add_subscriptions(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    cmd = command.addSubscriptionToTxn
    txn = TxnId.of(cmd)
    await service.add_subscriptions(txn, [(s.topic, s.subscription) for s in cmd.subscription])
    return txn


async def _end(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    cmd = command.endTxn
    txn = TxnId.of(cmd)
    await service.end(txn, is_commit(cmd.txn_action))
    return txn


async def _end_on_partition(service: TransactionService, command: pb.BaseCommand) -> TxnId | None:
    cmd = command.endTxnOnPartition
    txn = TxnId.of(cmd)
    await service.end_on_partition(cmd.topic, txn, is_commit(cmd.txn_action))
    return txn


async def _end_on_subscription(
    service: TransactionService, command: pb.BaseCommand
) -> TxnId | None:
    cmd = command.endTxnOnSubscription
    txn = TxnId.of(cmd)
    sub = cmd.subscription
    await service.end_on_subscription(sub.topic, sub.subscription, txn, is_commit(cmd.txn_action))
    return txn


class _Spec(NamedTuple):
    run: Callable[[TransactionService, pb.BaseCommand], Awaitable[TxnId | None]]
    """Carries the command out; the transaction id the answer names (None: none)."""
    response: pb.BaseCommand.Type.ValueType
    field: str
    """The answer's field in BaseCommand."""
    with_txn: bool
    """An error answer names the command's transaction id."""


_COMMANDS: Final[dict[int, _Spec]] = {
    _C.TC_CLIENT_CONNECT_REQUEST: _Spec(
        _tc_connect, _C.TC_CLIENT_CONNECT_RESPONSE, "tcClientConnectResponse", False
    ),
    _C.NEW_TXN: _Spec(_new_txn, _C.NEW_TXN_RESPONSE, "newTxnResponse", False),
    _C.ADD_PARTITION_TO_TXN: _Spec(
        _add_partitions, _C.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse", True
    ),
    _C.ADD_SUBSCRIPTION_TO_TXN: _Spec(
        _add_subscriptions,
        _C.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "addSubscriptionToTxnResponse",
        True,
    ),
    _C.END_TXN: _Spec(_end, _C.END_TXN_RESPONSE, "endTxnResponse", True),
    _C.END_TXN_ON_PARTITION: _Spec(
        _end_on_partition, _C.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse", True
    ),
    _C.END_TXN_ON_SUBSCRIPTION: _Spec(
        _end_on_subscription,
        _C.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        "endTxnOnSubscriptionResponse",
        True,
    ),
}

COMMANDS: Final = tuple(_COMMANDS)
"""The command types this module answers."""
