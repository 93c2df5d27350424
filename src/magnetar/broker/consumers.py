"""The consumer commands of a client connection: SUBSCRIBE, FLOW, ACK, redelivery, SEEK,
UNSUBSCRIBE, CLOSE_CONSUMER, GET_LAST_MESSAGE_ID, CONSUMER_STATS.

Why this module exists: the consumers of one connection (their handles by consumer id, the
subscriptions being created) are one concern of the session
(:class:`magnetar.broker.connection.ServerConnection`); the subscriptions behind
:class:`~magnetar.broker.contracts.ConsumerHandle` do the work. Creation of a consumer is
not cancelled when the connection goes (the subscription would leak): it finishes and then
detaches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from magnetar.broker import requests, schemas
from magnetar.broker.access import TopicOp
from magnetar.broker.contracts import BrokerError, ConsumerHandle, ServerCnx
from magnetar.broker.service import BrokerService
from magnetar.wire import commands, frames, pb

log = logging.getLogger(__name__)
_C = pb.BaseCommand


class Session(ServerCnx, Protocol):
    """What the consumer commands need from their connection."""

    service: BrokerService

    @property
    def closed(self) -> bool: ...
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...
    def error(self, request_id: int, exc: BaseException) -> None: ...
    def log_failure(self, what: str, topic: str, exc: BaseException) -> None: ...
    async def authorize(
        self, op: TopicOp, topic: str, *, subscription: str | None = None
    ) -> None: ...


class ConsumerCommands:
    def __init__(self, session: Session) -> None:
        self._s = session
        self.handles: dict[int, ConsumerHandle] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        """Subscriptions being created, by consumer id."""

    def lost(self) -> None:
        """The connection is gone: every consumer closes (in the background)."""
        for handle in list(self.handles.values()):
            _orphan(handle.close())
        self.handles.clear()

    def on_subscribe(self, frame: frames.Frame) -> None:
        cmd = frame.command.subscribe
        cid = cmd.consumer_id
        if cid in self.handles:
            self._s.send_command(commands.success(cmd.request_id))
            return
        if cid in self.tasks:
            self._s.send_command(
                commands.error(
                    request_id=cmd.request_id,
                    error=pb.ServiceNotReady,
                    message="Consumer is already present on the connection",
                )
            )
            return
        self.tasks[cid] = self._s.spawn(self._subscribe(cmd))

    async def _subscribe(self, cmd: pb.CommandSubscribe) -> None:
        cid = cmd.consumer_id
        rid = cmd.request_id
        service = self._s.service
        try:
            try:
                topic_name = service.parse_topic(cmd.topic)
                await self._s.authorize(TopicOp.CONSUME, cmd.topic, subscription=cmd.subscription)
                topic = await service.get_topic(topic_name, create=cmd.force_topic_creation)
                if cmd.HasField("schema") and schemas.is_stored(cmd.schema):
                    await service.schemas.check_consumer(
                        topic_name, cmd.schema, await service.schema_policy(topic_name)
                    )
                topic.check_consumer_limit()
                handle = await topic.subscriptions.subscribe(cmd, self._s)
            except Exception as exc:
                self._s.log_failure("subscribe", cmd.topic, exc)
                self._s.error(rid, exc)
                return
            if self._s.closed:
                await handle.close()
                return
            self.handles[cid] = handle
            self._s.send_command(commands.success(rid))
        finally:
            self.tasks.pop(cid, None)

    def _consumer(self, consumer_id: int) -> ConsumerHandle | None:
        handle = self.handles.get(consumer_id)
        if handle is None:
            log.debug("%s: command for unknown consumer %d", self._s.remote_address, consumer_id)
        return handle

    def on_flow(self, frame: frames.Frame) -> None:
        cmd = frame.command.flow
        handle = self._consumer(cmd.consumer_id)
        if handle is not None:
            handle.flow(cmd.messagePermits)

    def on_ack(self, frame: frames.Frame) -> None:
        cmd = frame.command.ack
        handle = self._consumer(cmd.consumer_id)
        if handle is None:
            if cmd.HasField("request_id"):
                self._s.send_command(
                    commands.ack_response(
                        consumer_id=cmd.consumer_id,
                        request_id=cmd.request_id,
                        error=pb.ConsumerNotFound,
                        message="consumer not found",
                    )
                )
            return
        self._s.spawn(self._ack(handle, cmd))

    async def _ack(self, handle: ConsumerHandle, cmd: pb.CommandAck) -> None:
        txn = cmd.HasField("txnid_most_bits")
        try:
            if txn:
                await self._s.service.transactions.ack(handle, cmd)
            else:
                await handle.ack(cmd)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.warning("%s: ack failed", self._s.remote_address, exc_info=exc)
            if cmd.HasField("request_id"):
                code, message = requests.error_of(exc)
                self._s.send_command(
                    commands.ack_response(
                        consumer_id=cmd.consumer_id,
                        request_id=cmd.request_id,
                        error=code,
                        message=message,
                        txnid_least_bits=cmd.txnid_least_bits if txn else None,
                        txnid_most_bits=cmd.txnid_most_bits if txn else None,
                    )
                )
            return
        if cmd.HasField("request_id"):
            self._s.send_command(
                commands.ack_response(
                    consumer_id=cmd.consumer_id,
                    request_id=cmd.request_id,
                    txnid_least_bits=cmd.txnid_least_bits if txn else None,
                    txnid_most_bits=cmd.txnid_most_bits if txn else None,
                )
            )

    def on_redeliver(self, frame: frames.Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        handle = self._consumer(cmd.consumer_id)
        if handle is not None:
            handle.redeliver_unacknowledged(
                list(cmd.message_ids),
                consumer_epoch=cmd.consumer_epoch if cmd.HasField("consumer_epoch") else None,
            )

    def _request(
        self,
        consumer_id: int,
        request_id: int,
        work: Callable[[ConsumerHandle], Coroutine[Any, Any, None]],
    ) -> None:
        handle = self._consumer(consumer_id)
        if handle is None:
            self._s.send_command(
                commands.error(
                    request_id=request_id, error=pb.ConsumerNotFound, message="Consumer not found"
                )
            )
            return

        async def run() -> None:
            try:
                await work(handle)
            except Exception as exc:
                if not isinstance(exc, BrokerError):
                    log.warning("%s: consumer request failed", self._s.remote_address, exc_info=exc)
                self._s.error(request_id, exc)

        self._s.spawn(run())

    def on_seek(self, frame: frames.Frame) -> None:
        cmd = frame.command.seek

        async def work(handle: ConsumerHandle) -> None:
            await handle.seek(cmd)
            self._s.send_command(commands.success(cmd.request_id))

        self._request(cmd.consumer_id, cmd.request_id, work)

    def on_unsubscribe(self, frame: frames.Frame) -> None:
        cmd = frame.command.unsubscribe

        async def work(handle: ConsumerHandle) -> None:
            await handle.unsubscribe()
            if self.handles.get(cmd.consumer_id) is handle:
                del self.handles[cmd.consumer_id]
            self._s.send_command(commands.success(cmd.request_id))

        self._request(cmd.consumer_id, cmd.request_id, work)

    def on_close_consumer(self, frame: frames.Frame) -> None:
        cmd = frame.command.close_consumer
        handle = self.handles.pop(cmd.consumer_id, None)
        if handle is None:
            self._s.send_command(commands.success(cmd.request_id))
            return

        async def run() -> None:
            try:
                await handle.close()
            except Exception:
                log.warning(
                    "%s: closing consumer %d failed",
                    self._s.remote_address,
                    cmd.consumer_id,
                    exc_info=True,
                )
            self._s.send_command(commands.success(cmd.request_id))

        self._s.spawn(run())

    def on_get_last_message_id(self, frame: frames.Frame) -> None:
        cmd = frame.command.getLastMessageId

        async def work(handle: ConsumerHandle) -> None:
            last = await handle.get_last_message_id()
            self._s.send_command(
                commands.get_last_message_id_response(
                    request_id=cmd.request_id,
                    last_message_id=last.last,
                    consumer_mark_delete_position=last.mark_delete,
                )
            )

        self._request(cmd.consumer_id, cmd.request_id, work)

    def on_consumer_stats(self, frame: frames.Frame) -> None:
        cmd = frame.command.consumerStats
        out = pb.BaseCommand(type=_C.CONSUMER_STATS_RESPONSE)
        r = out.consumerStatsResponse
        r.request_id = cmd.request_id
        handle = self.handles.get(cmd.consumer_id)
        if handle is None:
            r.error_code = pb.ConsumerNotFound
            r.error_message = "Consumer not found"
        else:
            stats = handle.stats()
            for field, kind in _CONSUMER_STATS_FIELDS.items():
                value = stats.get(field)
                if value is not None:
                    setattr(r, field, kind(value))
            r.consumerName = handle.consumer_name
            r.address = self._s.remote_address
        self._s.send_command(out)


_CONSUMER_STATS_FIELDS: Final[dict[str, Callable[[Any], Any]]] = {
    "msgRateOut": float,
    "msgThroughputOut": float,
    "msgRateRedeliver": float,
    "availablePermits": int,
    "unackedMessages": int,
    "blockedConsumerOnUnackedMsgs": bool,
    "connectedSince": str,
    "type": str,
    "msgRateExpired": float,
    "msgBacklog": int,
    "messageAckRate": float,
}


_orphans: set[asyncio.Task[Any]] = set()
"""Tasks that outlive their connection (consumer detach); kept referenced until done."""


def _orphan(coro: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _orphans.add(task)
    task.add_done_callback(_orphans.discard)
