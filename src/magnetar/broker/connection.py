"""One client connection's session: handshake and the per-command logic.

The middle of the three network layers: :class:`~magnetar.broker.transport.FrameTransport`
(framing, write coalescing, backpressure, keepalive) hands it decoded frames; typed commands
go to the service layer (``BrokerService``, topics, producers, and the subscriptions behind
:class:`contracts.ConsumerHandle`); answers come back through :class:`contracts.ServerCnx`,
which this class implements. It knows nothing of storage or subscription semantics, nor of
bytes.

Rules it enforces, after the reference broker:

* nothing but CONNECT before CONNECTED; CONNECTED announces min(client, ours) as protocol
  version and the max message size;
* bad input closes this connection only: random bytes, a frame over the limit, sizes that
  lie (all fatal to framing), an unknown command type (an ERROR first, then close), a SEND
  for a producer id that is not ready (close, as Pulsar's ServerCnx.handleSend);
* a checksum mismatch answers SEND_ERROR(ChecksumError) for that message and keeps going;
* keepalive and write coalescing are the transport's (:mod:`magnetar.broker.transport`);
* with authentication on (docs/security.md), CONNECT must carry credentials one of the
  providers accepts (or the anonymous role applies): otherwise ERROR(AuthenticationError)
  and close. Credentials that expire (tokens with ``exp``) are checked every
  ``authenticationRefreshCheckSeconds``: once expired, the client is sent AUTH_CHALLENGE and
  must answer with fresh ones (AUTH_RESPONSE, same role) before the next check, or the
  connection is closed. LOOKUP, PARTITIONED_METADATA, PRODUCER, SUBSCRIBE and the schema
  and topic-list requests are authorized for the connection's role (or, for a proxy role,
  the original principal it forwards).

Lock/await ordering: handlers that need I/O run as tasks owned by the connection; creation
of a producer is cancelled when the connection goes, creation of a consumer is not (the
subscription would leak) -- it finishes and then detaches. The consumer commands are
:class:`~magnetar.broker.consumers.ConsumerCommands`; requests answered from the service
alone are :mod:`magnetar.broker.requests`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

from magnetar import __version__
from magnetar.broker import access, requests, schemas, topic_list
from magnetar.broker.consumers import ConsumerCommands
from magnetar.broker.contracts import BROKER_REQUEST_ID, PRODUCER_CLOSE_REQUEST_ID, BrokerError
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.service import BrokerService
from magnetar.broker.transactions import session as txn_session
from magnetar.broker.transactions.ids import TxnId
from magnetar.broker.transport import FrameTransport
from magnetar.security import tls
from magnetar.security.authn import AuthenticationError, Identity
from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import MessageId

log = logging.getLogger(__name__)

SERVER_VERSION: Final = f"Magnetar-{__version__}"
_C = pb.BaseCommand
_MISMATCH: Final = frames.Checksum.MISMATCH
_NO_REQUEST: Final = 2**64 - 1
"""The request id of an ERROR that answers no request (Pulsar's -1 on the wire)."""
REFRESH_AUTH_DATA: Final = b"refresh"
"""What AUTH_CHALLENGE carries when the broker asks for fresh credentials (Pulsar's)."""
#: What CONNECTED announces: only features this broker implements (docs/compatibility.md).
BROKER_FEATURES: Final = pb.FeatureFlags(
    supports_get_partitioned_metadata_without_auto_creation=True,
    supports_topic_watchers=True,
)


class ServerConnection:
    """A client connection's session: implements :class:`contracts.ServerCnx`; its bytes go
    through :attr:`protocol` (a :class:`~magnetar.broker.transport.FrameTransport`)."""

    def __init__(
        self,
        service: BrokerService,
        *,
        on_closed: Callable[[ServerConnection], None] | None = None,
    ) -> None:
        cfg = service.config
        self.service = service
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self.protocol = FrameTransport(
            self,
            max_frame_size=cfg.max_frame_size,
            keepalive_interval_s=cfg.keepalive_interval_s,
            write_buffer_high=cfg.write_buffer_high,
            write_buffer_low=cfg.write_buffer_low,
        )
        """The asyncio protocol of the socket (what ``create_server`` is given)."""
        self._t = self.protocol
        self.connected = False
        self._client_version = ""
        self._client_features = pb.FeatureFlags()
        self._protocol_version = 0
        self.identity: Identity | None = None
        """Who the client is (None with authentication off)."""
        self.original_principal: str | None = None
        """The client a proxy connects for (CONNECT's original_principal)."""
        self._challenged = False
        self._refresh: asyncio.TimerHandle | None = None
        # resources
        self._producers: dict[int, Producer] = {}
        self._producer_tasks: dict[int, asyncio.Task[None]] = {}
        self.consumers = ConsumerCommands(self)
        self._watchers: dict[int, topic_list.TopicListWatcher | None] = {}
        """Topic list watchers by id (None while one is being opened)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- ServerCnx ----------------------------------------------------------------------------

    @property
    def remote_address(self) -> str:
        return self._t.remote

    @property
    def client_version(self) -> str:
        return self._client_version

    @property
    def protocol_version(self) -> int:
        return self._protocol_version

    def send_command(self, cmd: pb.BaseCommand) -> None:
        self._t.write(frames.encode_command(cmd))

    def send_receipt(
        self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
    ) -> None:
        self._t.write(
            frames.encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)
        )

    def close_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)
        self.send_command(
            commands.close_producer(producer_id=producer_id, request_id=PRODUCER_CLOSE_REQUEST_ID)
        )

    def close_consumer(self, consumer_id: int) -> None:
        self.consumers.handles.pop(consumer_id, None)
        self.send_command(
            commands.close_consumer(consumer_id=consumer_id, request_id=BROKER_REQUEST_ID)
        )

    def send_message(
        self,
        *,
        consumer_id: int,
        message_id: MessageId,
        redelivery_count: int,
        headers_and_payload: bytes | memoryview,
        ack_set: Sequence[int] | None = None,
        consumer_epoch: int | None = None,
    ) -> None:
        cmd = commands.message(
            consumer_id=consumer_id,
            message_id=message_id,
            redelivery_count=redelivery_count,
            ack_set=ack_set,
            consumer_epoch=consumer_epoch,
        )
        self._t.write_parts(frames.encode_payload_command_parts(cmd, headers_and_payload))

    @property
    def closed(self) -> bool:
        return self._t.closed

    def is_writable(self) -> bool:
        return self._t.is_writable()

    async def wait_writable(self) -> None:
        await self._t.wait_writable()

    def close(self) -> None:
        self._t.close()

    # --- the transport's session --------------------------------------------------------------

    def on_lost(self) -> None:
        """The socket is gone: producers detach, consumers close, watchers stop."""
        if self._refresh is not None:
            self._refresh.cancel()
        for task in self._producer_tasks.values():
            task.cancel()
        for producer in list(self._producers.values()):
            producer.disconnect(notify=False)
        self._producers.clear()
        self.consumers.lost()
        for watcher in self._watchers.values():
            if watcher is not None:
                watcher.close()
        self._watchers.clear()
        for task in list(self._tasks):
            if task not in self.consumers.tasks.values():
                task.cancel()
        if self._on_closed is not None:
            self._on_closed(self)

    # --- dispatch -----------------------------------------------------------------------------

    def on_frame(self, frame: frames.Frame) -> None:
        t = frame.type
        if t == _C.SEND:  # the hot path first
            if self.connected:
                self._on_send(frame)
                return
        if not self.connected:
            if t == _C.CONNECT:
                self._on_connect(frame.command.connect)
            else:
                log.info(
                    "%s: %s before CONNECT; closing", self.remote_address, commands.type_name(t)
                )
                self.close()
            return
        handler = _HANDLERS.get(t)
        if handler is not None:
            handler(self, frame)
        else:
            self._unsupported(frame)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def error(self, request_id: int, exc: BaseException) -> None:
        code, message = requests.error_of(exc)
        self.send_command(commands.error(request_id=request_id, error=code, message=message))

    def _unsupported(self, frame: frames.Frame) -> None:
        name = commands.type_name(frame.type)
        body = frame.body
        request_id = getattr(body, "request_id", None)
        if isinstance(request_id, int):
            self.send_command(
                commands.error(
                    request_id=request_id,
                    error=pb.NotAllowedError,
                    message=f"{name} is not supported by this broker",
                )
            )
        else:
            log.debug("%s: ignoring %s", self.remote_address, name)

    # --- handshake and keepalive commands -----------------------------------------------------

    def _on_connect(self, cmd: pb.CommandConnect) -> None:
        self._client_version = cmd.client_version
        self._client_features = cmd.feature_flags
        self._protocol_version = min(cmd.protocol_version, commands.PROTOCOL_VERSION)
        if cmd.HasField("original_principal") and cmd.original_principal:
            self.original_principal = cmd.original_principal
        authenticator = self.service.access.authenticator
        if authenticator is not None:
            try:
                self.identity = authenticator.authenticate(
                    cmd.auth_method_name or "none", cmd.auth_data, peer_cn=self._peer_cn()
                )
            except AuthenticationError as err:
                self._refuse_credentials(str(err))
                return
            rules = self.service.access.rules
            if rules.enabled and not rules.valid_original_principal(
                self.identity.role, self.original_principal
            ):
                log.info(
                    "%s: role %r with original principal %r: invalid roles; closing",
                    self.remote_address,
                    self.identity.role,
                    self.original_principal,
                )
                self.send_command(
                    commands.error(
                        request_id=_NO_REQUEST,
                        error=pb.AuthorizationError,
                        message="Invalid roles.",
                    )
                )
                self.close()
                return
            self._schedule_refresh()
        self.connected = True
        self.service.counters.connections_established += 1
        self._t.write(
            frames.encode_command(
                commands.connected(
                    server_version=SERVER_VERSION,
                    protocol_version=self._protocol_version,
                    max_message_size=self.service.config.max_message_size,
                    feature_flags=BROKER_FEATURES,
                )
            )
        )

    def _peer_cn(self) -> str | None:
        cert = self._t.extra_info("peercert")
        return tls.peer_common_name(cert if isinstance(cert, dict) else None)

    def _refuse_credentials(self, reason: str) -> None:
        log.info("%s: authentication failed: %s; closing", self.remote_address, reason)
        self.send_command(
            commands.error(request_id=_NO_REQUEST, error=pb.AuthenticationError, message=reason)
        )
        self.close()

    def _schedule_refresh(self) -> None:
        identity = self.identity
        if identity is None or identity.expires_at is None or self._t.closed:
            return
        interval = self.service.access.config.refresh_check_s
        self._refresh = self._loop.call_later(interval, self._refresh_tick)

    def _refresh_tick(self) -> None:
        """Every authenticationRefreshCheckSeconds while the credentials can expire."""
        identity = self.identity
        if self._t.closed or identity is None:
            return
        if self._challenged:
            self._refuse_credentials("the credentials expired and were not refreshed in time")
            return
        if identity.expired():
            if not self._client_features.supports_auth_refresh:
                self._refuse_credentials(
                    "the credentials expired and the client cannot refresh them"
                )
                return
            self._challenged = True
            self.send_command(
                commands.auth_challenge(
                    server_version=SERVER_VERSION,
                    protocol_version=self._protocol_version,
                    method=identity.method,
                    data=REFRESH_AUTH_DATA,
                )
            )
        self._schedule_refresh()

    def _on_auth_response(self, frame: frames.Frame) -> None:
        authenticator = self.service.access.authenticator
        if authenticator is None or self.identity is None:
            return
        answer = frame.command.authResponse.response
        try:
            identity = authenticator.authenticate(
                answer.auth_method_name or self.identity.method,
                answer.auth_data,
                peer_cn=self._peer_cn(),
            )
        except AuthenticationError as err:
            self._refuse_credentials(str(err))
            return
        if identity.role != self.identity.role:
            self._refuse_credentials(
                f"refreshed credentials are for role {identity.role!r}, not {self.identity.role!r}"
            )
            return
        self.identity = identity
        self._challenged = False

    async def authorize(
        self, op: access.TopicOp, topic: str, *, subscription: str | None = None
    ) -> None:
        """BrokerError(AuthorizationError) unless this connection may do ``op`` on
        ``topic``, or on namespace ``tenant/namespace`` when ``topic`` names one (a no-op
        with authorization off)."""
        svc = self.service
        if not svc.access.authorization_enabled:
            return
        if "://" not in topic and topic.count("/") == 1:
            tenant, namespace = topic.split("/")
            await svc.access.check_namespace(
                self.identity,
                op,
                tenant,
                namespace,
                original_principal=self.original_principal,
            )
            return
        await svc.access.check(
            self.identity,
            op,
            svc.parse_topic(topic),
            original_principal=self.original_principal,
            subscription=subscription,
        )

    def _on_ping(self, frame: frames.Frame) -> None:
        self._t.write(frames.PONG_FRAME)

    def _on_pong(self, frame: frames.Frame) -> None:
        self._t.pong_received()

    def _on_ignored(self, frame: frames.Frame) -> None:
        pass

    # --- lookup -------------------------------------------------------------------------------

    def _on_partitioned_metadata(self, frame: frames.Frame) -> None:
        cmd = frame.command.partitionMetadata
        self._answer(
            requests.partitioned_metadata(self.service, cmd, self.remote_address, self.authorize)
        )

    def _on_lookup(self, frame: frames.Frame) -> None:
        cmd = frame.command.lookupTopic
        self._answer(requests.lookup(self.service, cmd, self.remote_address, self.authorize))

    def _on_topics_of_namespace(self, frame: frames.Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        self._answer(
            requests.topics_of_namespace(self.service, cmd, self.remote_address, self.authorize)
        )

    def _on_get_schema(self, frame: frames.Frame) -> None:
        cmd = frame.command.getSchema
        self._answer(requests.get_schema(self.service, cmd, self.remote_address, self.authorize))

    def _on_get_or_create_schema(self, frame: frames.Frame) -> None:
        cmd = frame.command.getOrCreateSchema
        self._answer(
            requests.get_or_create_schema(self.service, cmd, self.remote_address, self.authorize)
        )

    def _answer(self, request: Coroutine[Any, Any, pb.BaseCommand]) -> None:
        """Run a request in the background and send its answer (a response or an error)."""

        async def run() -> None:
            self.send_command(await request)

        self.spawn(run())

    def _on_transaction(self, frame: frames.Frame) -> None:
        """TC_CLIENT_CONNECT, NEW_TXN, ADD_*_TO_TXN, END_TXN[_ON_*]: one answer each."""
        self._answer(txn_session.handle(self.service.transactions, frame.command))

    def log_failure(self, what: str, topic: str, exc: BaseException) -> None:
        requests.log_failure(self.remote_address, what, topic, exc)

    def _on_watch_topic_list(self, frame: frames.Frame) -> None:
        cmd = frame.command.watchTopicList
        if cmd.watcher_id in self._watchers:
            opening = self._watchers[cmd.watcher_id] is None
            self.send_command(
                commands.error(
                    request_id=cmd.request_id,
                    error=pb.ServiceNotReady if opening else pb.UnknownError,
                    message="Topic list watcher is already present on the connection",
                )
            )
            return
        self._watchers[cmd.watcher_id] = None
        self.spawn(self._watch_topic_list(cmd))

    async def _watch_topic_list(self, cmd: pb.CommandWatchTopicList) -> None:
        service = self.service

        async def persistent_topics(tenant: str, namespace: str) -> list[str]:
            return await service.topics_of_namespace(tenant, namespace)

        try:
            watcher, answer = await topic_list.open_watcher(
                cmd, store=service.store, list_topics=persistent_topics, send=self.send_command
            )
        except Exception as exc:
            self._watchers.pop(cmd.watcher_id, None)
            self.log_failure("watch topic list", cmd.namespace, exc)
            self.error(cmd.request_id, exc)
            return
        if self._t.closed or cmd.watcher_id not in self._watchers:
            watcher.close()  # the connection went, or the client closed it meanwhile
            return
        self._watchers[cmd.watcher_id] = watcher
        self.send_command(answer)

    def _on_watch_topic_list_close(self, frame: frames.Frame) -> None:
        cmd = frame.command.watchTopicListClose
        watcher = self._watchers.pop(cmd.watcher_id, None)
        if watcher is not None:
            watcher.close()
        self.send_command(commands.success(cmd.request_id))

    # --- producers ----------------------------------------------------------------------------

    def _on_producer(self, frame: frames.Frame) -> None:
        cmd = frame.command.producer
        pid = cmd.producer_id
        existing = self._producers.get(pid)
        if existing is not None:
            # the client retried a creation that already succeeded
            self.send_command(
                commands.producer_success(
                    request_id=cmd.request_id,
                    producer_name=existing.name,
                    schema_version=existing.schema_version,
                    topic_epoch=existing.topic_epoch,
                )
            )
            return
        if pid in self._producer_tasks:
            self.send_command(
                commands.error(
                    request_id=cmd.request_id,
                    error=pb.ServiceNotReady,
                    message="Producer is already present on the connection",
                )
            )
            return
        self._producer_tasks[pid] = self.spawn(self._create_producer(cmd))

    async def _create_producer(self, cmd: pb.CommandProducer) -> None:
        pid = cmd.producer_id
        rid = cmd.request_id
        service = self.service
        try:
            try:
                topic_name = service.parse_topic(cmd.topic)
                await self.authorize(access.TopicOp.PRODUCE, cmd.topic)
                topic = await service.get_topic(topic_name)
                schema_version = schemas.NO_VERSION
                policy = await service.schema_policy(topic_name)
                if cmd.HasField("schema") and schemas.is_stored(cmd.schema):
                    schema_version = schemas.encode_version(
                        await service.schemas.get_or_create(topic_name, cmd.schema, policy)
                    )
                else:
                    await service.schemas.check_producer_without_schema(topic_name, policy)
                name = cmd.producer_name or service.new_producer_name()
                try:
                    mode = AccessMode(cmd.producer_access_mode)
                except ValueError:
                    raise BrokerError(
                        pb.NotAllowedError, f"unknown access mode {cmd.producer_access_mode}"
                    ) from None
                producer = Producer(
                    topic=topic,
                    cnx=self,
                    producer_id=pid,
                    name=name,
                    epoch=cmd.epoch,
                    access_mode=mode,
                    user_provided_name=bool(cmd.producer_name) and cmd.user_provided_producer_name,
                    topic_epoch=cmd.topic_epoch if cmd.HasField("topic_epoch") else None,
                    metadata={kv.key: kv.value for kv in cmd.metadata},
                    schema_version=schema_version,
                    on_detach=self._forget_producer,
                )

                def queued() -> None:
                    # WaitForExclusive: a client announcing supports_partial_producer is told
                    # at once that its producer is queued; older clients just wait.
                    if not self._client_features.supports_partial_producer:
                        return
                    self.send_command(
                        commands.producer_success(
                            request_id=rid,
                            producer_name=name,
                            schema_version=schema_version,
                            producer_ready=False,
                        )
                    )

                epoch = await topic.add_producer(producer, on_queued=queued)
            except Exception as exc:
                self.log_failure("create producer", cmd.topic, exc)
                self.error(rid, exc)
                return
            producer.topic_epoch = epoch
            if self._t.closed:
                producer.disconnect(notify=False)
                return
            self._producers[pid] = producer
            self.send_command(
                commands.producer_success(
                    request_id=rid,
                    producer_name=producer.name,
                    last_sequence_id=topic.last_sequence_id(producer.name),
                    schema_version=producer.schema_version,
                    topic_epoch=epoch,
                )
            )
        finally:
            self._producer_tasks.pop(pid, None)

    def _forget_producer(self, producer: Producer) -> None:
        if self._producers.get(producer.producer_id) is producer:
            del self._producers[producer.producer_id]

    def _on_send(self, frame: frames.Frame) -> None:
        send = frame.command.send
        producer = self._producers.get(send.producer_id)
        if producer is None:
            log.warning(
                "%s: SEND for producer %d which is not ready; closing the connection",
                self.remote_address,
                send.producer_id,
            )
            self.close()
            return
        seq = send.sequence_id
        if frame.checksum is _MISMATCH:
            producer.send_checksum_error(seq)
            return
        highest = send.highest_sequence_id
        hp = frame.headers_and_payload
        assert hp is not None
        producer.publish(
            seq,
            highest if highest > seq else seq,
            send.num_messages,
            hp,  # a view into the received frame: the ledger makes the one copy (wrap)
            send.is_chunk,
            TxnId.of(send) if send.HasField("txnid_most_bits") else None,
        )

    def _on_close_producer(self, frame: frames.Frame) -> None:
        cmd = frame.command.close_producer
        rid = cmd.request_id
        pending = self._producer_tasks.pop(cmd.producer_id, None)
        if pending is not None:
            pending.cancel()
        producer = self._producers.pop(cmd.producer_id, None)
        if producer is None:
            self.send_command(commands.success(rid))
            return
        self.spawn(self._close_producer(producer, rid))

    async def _close_producer(self, producer: Producer, request_id: int) -> None:
        await producer.close()
        self.send_command(commands.success(request_id))


def _consumer_command(
    handler: Callable[[ConsumerCommands, frames.Frame], None],
) -> Callable[[ServerConnection, frames.Frame], None]:
    return lambda cnx, frame: handler(cnx.consumers, frame)


_HANDLERS: Final[dict[int, Callable[[ServerConnection, frames.Frame], None]]] = {
    _C.PING: ServerConnection._on_ping,
    _C.PONG: ServerConnection._on_pong,
    _C.CONNECT: ServerConnection._on_ignored,  # a second CONNECT: nothing to do
    _C.AUTH_RESPONSE: ServerConnection._on_auth_response,
    _C.PARTITIONED_METADATA: ServerConnection._on_partitioned_metadata,
    _C.LOOKUP: ServerConnection._on_lookup,
    _C.GET_TOPICS_OF_NAMESPACE: ServerConnection._on_topics_of_namespace,
    _C.GET_SCHEMA: ServerConnection._on_get_schema,
    _C.GET_OR_CREATE_SCHEMA: ServerConnection._on_get_or_create_schema,
    _C.WATCH_TOPIC_LIST: ServerConnection._on_watch_topic_list,
    _C.WATCH_TOPIC_LIST_CLOSE: ServerConnection._on_watch_topic_list_close,
    _C.PRODUCER: ServerConnection._on_producer,
    _C.CLOSE_PRODUCER: ServerConnection._on_close_producer,
    **{t: ServerConnection._on_transaction for t in txn_session.COMMANDS},
    _C.SUBSCRIBE: _consumer_command(ConsumerCommands.on_subscribe),
    _C.FLOW: _consumer_command(ConsumerCommands.on_flow),
    _C.ACK: _consumer_command(ConsumerCommands.on_ack),
    _C.REDELIVER_UNACKNOWLEDGED_MESSAGES: _consumer_command(ConsumerCommands.on_redeliver),
    _C.SEEK: _consumer_command(ConsumerCommands.on_seek),
    _C.UNSUBSCRIBE: _consumer_command(ConsumerCommands.on_unsubscribe),
    _C.CLOSE_CONSUMER: _consumer_command(ConsumerCommands.on_close_consumer),
    _C.GET_LAST_MESSAGE_ID: _consumer_command(ConsumerCommands.on_get_last_message_id),
    _C.CONSUMER_STATS: _consumer_command(ConsumerCommands.on_consumer_stats),
}
