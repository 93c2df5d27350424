"""Routes: ``/admin/v3/transactions`` (pulsar-admin ``transactions``), answered from the
transaction coordinators (``broker/transactions/``).

* ``GET .../coordinatorStats[?coordinatorId=N]``: Pulsar's TransactionCoordinatorStats of
  one coordinator, or of each by id (the coordinators other brokers serve asked of them);
* ``GET .../transactionMetadata/{most}/{least}``: Pulsar's TransactionMetadata of a live
  transaction (404 "Transaction not found" once it ended: the coordinator forgets it then);
* ``GET .../slowTransactions/{timeout ms}[?coordinatorId=N]``: the live transactions open
  longer than that, by id;
* ``POST .../abortTransaction/{most}/{least}``: abort a live transaction (its messages are
  never delivered, its acknowledgements are undone), as its timeout would;
* ``GET .../transactionBufferStats/[persistent/]{tenant}/{ns}/{topic}``: a topic's
  transaction buffer (Pulsar's TransactionBufferStats: ``state``, ``maxReadPosition`` -- how
  far consumers may read --, ``ongoingTxnSize``, ``totalAbortedTransactions``), on the
  topic's owner.
* ``GET .../transactionInBufferStats/[persistent/]{tenant}/{ns}/{topic}/{most}/{least}``:
  one transaction in a topic's buffer (TransactionInBufferStats: ``startPosition`` of its
  first message while open, ``aborted``);
* ``GET .../pendingAckStats/[persistent/]{tenant}/{ns}/{topic}/{subscription}``: the
  transactions holding acknowledgements on a subscription (TransactionPendingAckStats:
  ``state``, ``ongoingTxnSize``; ``lowWaterMarks`` is not kept, so it is left out);
* ``GET .../transactionInPendingAckStats/[persistent/]{tenant}/{ns}/{topic}/{subscription}/
  {most}/{least}``: one transaction's hold there (TransactionInPendingAckStats:
  ``cumulativeAckPosition``, when it acknowledges cumulatively).

A coordinator is answered by the broker serving it (``307`` to it otherwise, as a topic
call is); a broker without ``transactionCoordinatorEnabled`` answers 503 with Pulsar's
reason. Super-user only, as in Pulsar (``broker/access.py``: a route it does not list).
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from magnetar.broker.admin import remote, validation
from magnetar.broker.admin.common import AdminError, service
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.contracts import BrokerError
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_ops import scope as topic_scope
from magnetar.broker.transactions.coordinator import TransactionCoordinator, TxnMeta
from magnetar.broker.transactions.ids import TxnId, assign_partition
from magnetar.broker.transactions.pending_acks import PendingAcks
from magnetar.wire import pb
from magnetar.wire.topics import TopicName

BASE = "/admin/v3/transactions"
NOT_ENABLED = "This Broker is not configured with transactionCoordinatorEnabled=true."


def _service_txns(request: web.Request) -> Any:
    txns = service(request).transactions
    if not txns.enabled:
        raise AdminError(503, NOT_ENABLED)
    return txns


def _coordinator_id(request: web.Request, raw: str) -> int:
    txns = _service_txns(request)
    tc = validation.path_integer(raw, "coordinatorId", minimum=0)
    if tc >= txns.coordinator_count:
        raise AdminError(
            404, f"Transaction coordinator {tc} not found ({txns.coordinator_count} coordinators)"
        )
    return tc


async def _coordinator(request: web.Request, tc: int) -> TransactionCoordinator:
    """Coordinator ``tc``, loaded on this broker (307 to the broker serving it)."""
    txns = _service_txns(request)
    await topic_scope.redirect_to_owner(paths.scope(request), TopicName.parse(assign_partition(tc)))
    try:
        found: TransactionCoordinator = await txns.connect(tc)
    except BrokerError as err:
        raise AdminError(503, err.message) from None
    return found


def _stats(coordinator: TransactionCoordinator) -> dict[str, Any]:
    out = coordinator.stats()
    live = coordinator.transactions()
    return {
        "state": out["state"],
        "leastSigBits": out["leastSigBits"],
        "lowWaterMark": min((m.txn.least for m in live), default=out["leastSigBits"] + 1) - 1,
        "ongoingTxnSize": out["ongoingTxnSize"],
    }


def _metadata(meta: TxnMeta) -> dict[str, Any]:
    """Pulsar's TransactionMetadata (``timeoutAt`` holds the timeout in ms, as Pulsar's
    does, not a point in time)."""
    return {
        "txnId": str(meta.txn),
        "status": meta.status.value,
        "openTimestamp": meta.opened_ms,
        "timeoutAt": meta.timeout_ms,
        "producedPartitions": {topic: {} for topic in meta.partitions},
        "ackedPartitions": _acked(meta.subscriptions),
    }


def _acked(subscriptions: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for topic, sub in subscriptions:
        out.setdefault(topic, {})[sub] = {}
    return out


async def coordinator_stats(request: web.Request) -> web.Response:
    """One coordinator's stats (``coordinatorId``), or each coordinator's by id."""
    txns = _service_txns(request)
    if "coordinatorId" in request.query:
        tc = _coordinator_id(request, request.query["coordinatorId"])
        return web.json_response(_stats(await _coordinator(request, tc)))
    svc = service(request)
    peers = remote.peers(request)
    out: dict[str, Any] = {}
    for tc in range(txns.coordinator_count):
        owner = await topic_scope.owner_elsewhere(svc, TopicName.parse(assign_partition(tc)))
        if owner is None:
            out[str(tc)] = _stats(await _coordinator(request, tc))
        else:
            out[str(tc)] = await peers.admin_get(
                owner, f"{BASE}/coordinatorStats?coordinatorId={tc}"
            )
    return web.json_response(out)


def _txn(request: web.Request) -> TxnId:
    m = request.match_info
    most = validation.path_integer(m["most"], "mostSigBits", minimum=0)
    least = validation.path_integer(m["least"], "leastSigBits", minimum=0)
    _coordinator_id(request, str(most))
    return TxnId(most, least)


def _live(coordinator: TransactionCoordinator, txn: TxnId) -> TxnMeta:
    try:
        return coordinator.get(txn)
    except BrokerError as err:
        if err.code == pb.TransactionNotFound:
            raise AdminError(404, f"Transaction not found: {txn}") from None
        raise


async def transaction_metadata(request: web.Request) -> web.Response:
    """A live transaction's metadata (status, open time, deadline, its topics)."""
    txn = _txn(request)
    coordinator = await _coordinator(request, txn.most)
    return web.json_response(_metadata(_live(coordinator, txn)))


async def slow_transactions(request: web.Request) -> web.Response:
    """The live transactions open longer than ``timeout`` ms, by id (of one coordinator
    with ``coordinatorId``, else of every coordinator this broker serves)."""
    txns = _service_txns(request)
    timeout = validation.path_integer(request.match_info["timeout"], "timeout", minimum=0)
    if "coordinatorId" in request.query:
        tcs = [_coordinator_id(request, request.query["coordinatorId"])]
    else:
        tcs = list(range(txns.coordinator_count))
    svc = service(request)
    peers = remote.peers(request)
    now_ms = int(time.time() * 1000)
    out: dict[str, Any] = {}
    for tc in tcs:
        owner = await topic_scope.owner_elsewhere(svc, TopicName.parse(assign_partition(tc)))
        if owner is not None and "coordinatorId" not in request.query:
            path = f"{BASE}/slowTransactions/{timeout}?coordinatorId={tc}"
            out.update(await peers.admin_get(owner, path))
            continue
        coordinator = await _coordinator(request, tc)
        for meta in coordinator.transactions():
            if now_ms - meta.opened_ms > timeout:
                out[str(meta.txn)] = _metadata(meta)
    return web.json_response(out)


async def abort_transaction(request: web.Request) -> web.Response:
    """Abort a live transaction (409 when it is committing already)."""
    txn = _txn(request)
    coordinator = await _coordinator(request, txn.most)
    _live(coordinator, txn)
    try:
        await coordinator.end(txn, commit=False)
    except BrokerError as err:
        if err.code == pb.InvalidTxnStatus:
            raise AdminError(409, err.message) from None
        if err.code == pb.TransactionNotFound:
            raise AdminError(404, f"Transaction not found: {txn}") from None
        raise
    return web.Response(status=204)


async def _loaded(request: web.Request, operation: str) -> PersistentTopic:
    """The path's topic, loaded on this broker (307 to its owner otherwise)."""
    _service_txns(request)
    m = request.match_info
    topic = await topic_scope.topic_name(
        service(request),
        domain_name=m.get("domain", "persistent"),
        tenant=m["tenant"],
        namespace_name=m["namespace"],
        local=m["topic"],
    )
    return await topic_scope.stored(paths.scope(request), topic, operation)


async def transaction_in_buffer_stats(request: web.Request) -> web.Response:
    """One transaction in a topic's buffer: its first message's position, whether aborted."""
    loaded = await _loaded(request, "Transaction in buffer stats of")
    if loaded.txn_buffer is None:
        raise AdminError(503, NOT_ENABLED)
    return web.json_response(loaded.txn_buffer.in_buffer(_txn(request)))


def _pending_acks(request: web.Request, loaded: PersistentTopic) -> tuple[PendingAcks, str]:
    sub = request.match_info["subscription"]
    if sub not in loaded.subscriptions.names():
        raise AdminError(404, "Subscription not found")
    pending = _service_txns(request).pending_acks(loaded.full_name)
    if pending is None:
        raise AdminError(503, NOT_ENABLED)
    return pending, sub


async def pending_ack_stats(request: web.Request) -> web.Response:
    """The transactions holding acknowledgements on a subscription."""
    loaded = await _loaded(request, "Pending ack stats of")
    pending, sub = _pending_acks(request, loaded)
    return web.json_response(pending.stats(sub))


async def transaction_in_pending_ack_stats(request: web.Request) -> web.Response:
    """One transaction's acknowledgements held on a subscription."""
    loaded = await _loaded(request, "Transaction in pending ack stats of")
    pending, sub = _pending_acks(request, loaded)
    position = pending.cumulative_position(sub, _txn(request))
    return web.json_response({} if position is None else {"cumulativeAckPosition": str(position)})


async def transaction_buffer_stats(request: web.Request) -> web.Response:
    """A topic's transaction buffer: how far consumers may read, its live transactions."""
    loaded = await _loaded(request, "Transaction buffer stats of")
    buffer = loaded.txn_buffer
    if buffer is None:
        raise AdminError(503, NOT_ENABLED)
    found = buffer.stats()
    return web.json_response(
        {
            "state": found["state"],
            "maxReadPosition": found["maxReadPosition"],
            "ongoingTxnSize": found["ongoingTxnSize"],
            "totalAbortedTransactions": found["abortedTxnCount"],
        }
    )


async def transaction_buffer_stats_with_domain(request: web.Request) -> web.Response:
    """A topic's transaction buffer, the topic named with its domain (``persistent/...``)."""
    return await transaction_buffer_stats(request)


async def transaction_in_buffer_stats_with_domain(request: web.Request) -> web.Response:
    """One transaction in a topic's buffer, the topic named with its domain."""
    return await transaction_in_buffer_stats(request)


async def pending_ack_stats_with_domain(request: web.Request) -> web.Response:
    """A subscription's pending acknowledgements, the topic named with its domain."""
    return await pending_ack_stats(request)


async def transaction_in_pending_ack_stats_with_domain(request: web.Request) -> web.Response:
    """One transaction's held acknowledgements, the topic named with its domain."""
    return await transaction_in_pending_ack_stats(request)


_WITH_DOMAIN = (
    transaction_in_buffer_stats_with_domain,
    pending_ack_stats_with_domain,
    transaction_in_pending_ack_stats_with_domain,
)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(
        BASE + "/transactionBufferStats/{tenant}/{namespace}/{topic}", transaction_buffer_stats
    )
    router.add_get(
        BASE + "/transactionBufferStats/{domain}/{tenant}/{namespace}/{topic}",
        transaction_buffer_stats_with_domain,
    )
    for prefix, handlers in (
        ("", (transaction_in_buffer_stats, pending_ack_stats, transaction_in_pending_ack_stats)),
        ("{domain}/", _WITH_DOMAIN),
    ):
        topic = prefix + "{tenant}/{namespace}/{topic}"
        in_buffer, pending, in_pending = handlers
        router.add_get(f"{BASE}/transactionInBufferStats/{topic}/{{most}}/{{least}}", in_buffer)
        router.add_get(f"{BASE}/pendingAckStats/{topic}/{{subscription}}", pending)
        router.add_get(
            f"{BASE}/transactionInPendingAckStats/{topic}/{{subscription}}/{{most}}/{{least}}",
            in_pending,
        )
    router.add_get(f"{BASE}/coordinatorStats", coordinator_stats)
    router.add_get(BASE + "/transactionMetadata/{most}/{least}", transaction_metadata)
    router.add_get(BASE + "/slowTransactions/{timeout}", slow_transactions)
    router.add_post(BASE + "/abortTransaction/{most}/{least}", abort_transaction)
