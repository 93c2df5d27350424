"""One client connection: framing, handshake, keepalive, write buffering, dispatch.

The middle of the three network layers (STYLE.md): bytes from the socket go through
:class:`frames.FrameDecoder`; typed commands go to the service layer (``BrokerService``,
topics, producers, and the subscriptions behind :class:`contracts.ConsumerHandle`); answers
come back through :class:`contracts.ServerCnx`, which this class implements. It knows
nothing of storage or subscription semantics.

Rules it enforces, after the reference broker:

* nothing but CONNECT before CONNECTED; CONNECTED announces min(client, ours) as protocol
  version and the max message size;
* bad input closes this connection only: random bytes, a frame over the limit, sizes that
  lie (all fatal to framing), an unknown command type (an ERROR first, then close), a SEND
  for a producer id that is not ready (close, as Pulsar's ServerCnx.handleSend);
* a checksum mismatch answers SEND_ERROR(ChecksumError) for that message and keeps going;
* keepalive: a connection silent for ``keepalive_interval_s`` is pinged, and closed if it
  stays silent for another interval (any received byte counts as an answer); a handshake
  not done within one interval is closed too;
* writes are coalesced (one ``writelines`` per event-loop turn) and the transport's
  high/low water marks drive :meth:`is_writable`/:meth:`wait_writable` for dispatchers.

Lock/await ordering: handlers that need I/O run as tasks owned by the connection; creation
of a producer is cancelled when the connection goes, creation of a consumer is not (the
subscription would leak) -- it finishes and then detaches.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, cast

from magnetar import __version__
from magnetar.broker import schemas, topic_list
from magnetar.broker.config import PROTOCOL_VERSION
from magnetar.broker.contracts import BrokerError, ConsumerHandle
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.service import BrokerService
from magnetar.wire import commands, frames, pb
from magnetar.wire.errors import UnknownCommandError, WireError
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicDomain

log = logging.getLogger(__name__)

SERVER_VERSION: Final = f"Magnetar-{__version__}"
_C = pb.BaseCommand
_DOMAINS_OF_MODE = {
    pb.CommandGetTopicsOfNamespace.PERSISTENT: (TopicDomain.PERSISTENT,),
    pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: (TopicDomain.NON_PERSISTENT,),
    pb.CommandGetTopicsOfNamespace.ALL: (TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT),
}
_MISMATCH: Final = frames.Checksum.MISMATCH
#: What CONNECTED announces: only features this broker implements (docs/compatibility.md).
BROKER_FEATURES: Final = pb.FeatureFlags(
    supports_get_partitioned_metadata_without_auto_creation=True,
    supports_topic_watchers=True,
)

_orphans: set[asyncio.Task[Any]] = set()
"""Tasks that outlive their connection (consumer detach); kept referenced until done."""


class State(enum.Enum):
    START = "start"
    CONNECTED = "connected"
    CLOSED = "closed"


def _error_of(exc: BaseException) -> tuple[pb.ServerError.ValueType, str]:
    if isinstance(exc, BrokerError):
        return exc.code, exc.message  # type: ignore[return-value]
    if isinstance(exc, WireError):
        return exc.server_error, str(exc)
    return pb.UnknownError, f"{type(exc).__name__}: {exc}"


class ServerConnection(asyncio.Protocol):
    """A client connection; implements :class:`contracts.ServerCnx`."""

    def __init__(
        self,
        service: BrokerService,
        *,
        on_closed: Callable[[ServerConnection], None] | None = None,
    ) -> None:
        cfg = service.config
        self.service = service
        self._on_closed = on_closed
        self._decoder = frames.FrameDecoder(max_frame_size=cfg.max_frame_size)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.state = State.START
        self._remote = "?"
        self._client_version = ""
        self._client_features = pb.FeatureFlags()
        self._protocol_version = 0
        # outgoing
        self._out: list[bytes | bytearray | memoryview] = []
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        # keepalive
        self._received = False
        self._waiting_pong = False
        self._keepalive: asyncio.TimerHandle | None = None
        # resources
        self._producers: dict[int, Producer] = {}
        self._producer_tasks: dict[int, asyncio.Task[None]] = {}
        self._consumers: dict[int, ConsumerHandle] = {}
        self._consumer_tasks: dict[int, asyncio.Task[None]] = {}
        self._watchers: dict[int, topic_list.TopicListWatcher | None] = {}
        """Topic list watchers by id (None while one is being opened)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- ServerCnx ----------------------------------------------------------------------------

    @property
    def remote_address(self) -> str:
        return self._remote

    @property
    def client_version(self) -> str:
        return self._client_version

    @property
    def protocol_version(self) -> int:
        return self._protocol_version

    def send_command(self, cmd: pb.BaseCommand) -> None:
        t = cmd.type
        if t == _C.CLOSE_CONSUMER:  # broker-side close: the client will subscribe again
            self._consumers.pop(cmd.close_consumer.consumer_id, None)
        elif t == _C.CLOSE_PRODUCER:
            self._producers.pop(cmd.close_producer.producer_id, None)
        self._write(frames.encode_command(cmd))

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
        if self.state is State.CLOSED:
            return
        self._out.extend(frames.encode_payload_command_parts(cmd, headers_and_payload))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def is_writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        if self.state is State.CLOSED:
            raise ConnectionError("connection closed")
        await self._writable.wait()
        if self.closed:
            raise ConnectionError("connection closed")

    def close(self) -> None:
        if self._transport is not None and self.state is not State.CLOSED:
            self._flush()
            self._transport.close()

    # --- writing ------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and self._transport is not None and self.state is not State.CLOSED:
            self._out = []
            self._transport.writelines(out)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport
        cfg = self.service.config
        transport.set_write_buffer_limits(high=cfg.write_buffer_high, low=cfg.write_buffer_low)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._remote = f"{peer[0]}:{peer[1]}"
        self._keepalive = self._loop.call_later(cfg.keepalive_interval_s, self._keepalive_tick)

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            for frame in self._decoder.feed(data):
                self._dispatch(frame)
                if self.state is State.CLOSED:
                    return
        except UnknownCommandError as err:
            log.info("%s: %s; closing the connection", self._remote, err)
            if self.state is State.CONNECTED:
                self._write(
                    frames.encode_command(
                        commands.error(request_id=0, error=pb.NotAllowedError, message=str(err))
                    )
                )
            self.close()
            return
        except WireError as err:
            log.info("%s: bad frame (%s); closing the connection", self._remote, err)
            self.close()
            return
        except Exception:
            log.exception("%s: error handling a command; closing the connection", self._remote)
            self.close()
            return
        if self._out:
            self._flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = State.CLOSED
        self._writable.set()  # wake waiters; they see CLOSED
        self._out = []
        if self._keepalive is not None:
            self._keepalive.cancel()
        for task in self._producer_tasks.values():
            task.cancel()
        for producer in list(self._producers.values()):
            producer.disconnect(notify=False)
        self._producers.clear()
        for handle in list(self._consumers.values()):
            self._orphan(handle.close())
        self._consumers.clear()
        for watcher in self._watchers.values():
            if watcher is not None:
                watcher.close()
        self._watchers.clear()
        for task in list(self._tasks):
            if task not in self._consumer_tasks.values():
                task.cancel()
        if self._on_closed is not None:
            self._on_closed(self)

    # --- keepalive ----------------------------------------------------------------------------

    def _keepalive_tick(self) -> None:
        if self.state is State.CLOSED:
            return
        if self.state is not State.CONNECTED:
            log.info("%s: no handshake within the keepalive interval; closing", self._remote)
            self.close()
            return
        if self._received:
            self._received = False
            self._waiting_pong = False
        elif self._waiting_pong:
            log.info("%s: no answer to ping; closing the connection", self._remote)
            self.close()
            return
        else:
            self._waiting_pong = True
            self._write(frames.PING_FRAME)
        self._keepalive = self._loop.call_later(
            self.service.config.keepalive_interval_s, self._keepalive_tick
        )

    # --- dispatch -----------------------------------------------------------------------------

    def _dispatch(self, frame: frames.Frame) -> None:
        t = frame.type
        if t == _C.SEND:  # the hot path first
            if self.state is State.CONNECTED:
                self._on_send(frame)
                return
        if self.state is not State.CONNECTED:
            if t == _C.CONNECT:
                self._on_connect(frame.command.connect)
            else:
                log.info("%s: %s before CONNECT; closing", self._remote, commands.type_name(t))
                self.close()
            return
        handler = _HANDLERS.get(t)
        if handler is not None:
            handler(self, frame)
        else:
            self._unsupported(frame)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    def _orphan(coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        _orphans.add(task)
        task.add_done_callback(_orphans.discard)

    def _error(self, request_id: int, exc: BaseException) -> None:
        code, message = _error_of(exc)
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
            log.debug("%s: ignoring %s", self._remote, name)

    # --- handshake and keepalive commands -----------------------------------------------------

    def _on_connect(self, cmd: pb.CommandConnect) -> None:
        self._client_version = cmd.client_version
        self._client_features = cmd.feature_flags
        self._protocol_version = min(cmd.protocol_version, PROTOCOL_VERSION)
        self.state = State.CONNECTED
        self._write(
            frames.encode_command(
                commands.connected(
                    server_version=SERVER_VERSION,
                    protocol_version=self._protocol_version,
                    max_message_size=self.service.config.max_message_size,
                    feature_flags=BROKER_FEATURES,
                )
            )
        )

    def _on_ping(self, frame: frames.Frame) -> None:
        self._write(frames.PONG_FRAME)

    def _on_pong(self, frame: frames.Frame) -> None:
        self._waiting_pong = False

    def _on_ignored(self, frame: frames.Frame) -> None:
        pass

    # --- lookup -------------------------------------------------------------------------------

    def _on_partitioned_metadata(self, frame: frames.Frame) -> None:
        self._spawn(self._partitioned_metadata(frame.command.partitionMetadata))

    async def _partitioned_metadata(self, cmd: pb.CommandPartitionedTopicMetadata) -> None:
        rid = cmd.request_id
        try:
            topic = self.service.parse_topic(cmd.topic)
            partitions = await self.service.partitioned_metadata(
                topic, auto_create=cmd.metadata_auto_creation_enabled
            )
        except Exception as exc:
            code, message = _error_of(exc)
            self._log_failure("partitioned metadata", cmd.topic, exc)
            self.send_command(
                commands.partitioned_metadata_response(request_id=rid, error=code, message=message)
            )
            return
        self.send_command(
            commands.partitioned_metadata_response(request_id=rid, partitions=partitions)
        )

    def _on_lookup(self, frame: frames.Frame) -> None:
        self._spawn(self._lookup(frame.command.lookupTopic))

    async def _lookup(self, cmd: pb.CommandLookupTopic) -> None:
        rid = cmd.request_id
        try:
            topic = self.service.parse_topic(cmd.topic)
            answer = await self.service.lookup(
                topic, authoritative=cmd.authoritative, listener=cmd.advertised_listener_name
            )
        except Exception as exc:
            code, message = _error_of(exc)
            self._log_failure("lookup", cmd.topic, exc)
            self.send_command(commands.lookup_response(request_id=rid, error=code, message=message))
            return
        self.send_command(
            commands.lookup_response(
                request_id=rid,
                broker_service_url=answer.service_url,
                redirect=answer.redirect,
                authoritative=answer.authoritative,
            )
        )

    def _log_failure(self, what: str, topic: str, exc: BaseException) -> None:
        if isinstance(exc, BrokerError):
            log.info("%s: %s of %r failed: %s", self._remote, what, topic, exc.message)
        else:
            log.warning("%s: %s of %r failed", self._remote, what, topic, exc_info=exc)

    def _on_topics_of_namespace(self, frame: frames.Frame) -> None:
        self._spawn(self._topics_of_namespace(frame.command.getTopicsOfNamespace))

    async def _topics_of_namespace(self, cmd: pb.CommandGetTopicsOfNamespace) -> None:
        rid = cmd.request_id
        try:
            tenant, sep, namespace = cmd.namespace.partition("/")
            if not sep or "/" in namespace:
                raise BrokerError(pb.InvalidTopicName, f"bad namespace name {cmd.namespace!r}")
            topics = await self.service.topics_of_namespace(
                tenant, namespace, domains=_DOMAINS_OF_MODE.get(cmd.mode, (TopicDomain.PERSISTENT,))
            )
        except Exception as exc:
            self._log_failure("topics of namespace", cmd.namespace, exc)
            self._error(rid, exc)
            return
        self.send_command(commands.get_topics_of_namespace_response(request_id=rid, topics=topics))

    def _on_get_schema(self, frame: frames.Frame) -> None:
        self._spawn(self._get_schema(frame.command.getSchema))

    async def _get_schema(self, cmd: pb.CommandGetSchema) -> None:
        rid = cmd.request_id
        try:
            topic = self.service.parse_topic(cmd.topic)
            version = (
                schemas.decode_version(cmd.schema_version)
                if cmd.HasField("schema_version") and cmd.schema_version
                else None
            )
            stored = await self.service.schemas.get(topic, version)
        except Exception as exc:
            self._log_failure("get schema", cmd.topic, exc)
            code, message = _error_of(exc)
            self.send_command(
                commands.get_schema_response(request_id=rid, error=code, message=message)
            )
            return
        if stored is None:
            self.send_command(
                commands.get_schema_response(
                    request_id=rid, error=pb.TopicNotFound, message="Topic not found or no-schema"
                )
            )
            return
        self.send_command(
            commands.get_schema_response(
                request_id=rid,
                schema=stored.to_proto(),
                schema_version=schemas.encode_version(stored.version),
            )
        )

    def _on_get_or_create_schema(self, frame: frames.Frame) -> None:
        self._spawn(self._get_or_create_schema(frame.command.getOrCreateSchema))

    async def _get_or_create_schema(self, cmd: pb.CommandGetOrCreateSchema) -> None:
        rid = cmd.request_id
        try:
            topic = self.service.parse_topic(cmd.topic)
            if not cmd.HasField("schema") or not schemas.is_stored(cmd.schema):
                raise BrokerError(pb.IncompatibleSchema, "no schema to register")
            version = await self.service.schemas.get_or_create(
                topic, cmd.schema, await self.service.schema_policy(topic)
            )
        except Exception as exc:
            self._log_failure("get or create schema", cmd.topic, exc)
            code, message = _error_of(exc)
            self.send_command(
                commands.get_or_create_schema_response(request_id=rid, error=code, message=message)
            )
            return
        self.send_command(
            commands.get_or_create_schema_response(
                request_id=rid, schema_version=schemas.encode_version(version)
            )
        )

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
        self._spawn(self._watch_topic_list(cmd))

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
            self._log_failure("watch topic list", cmd.namespace, exc)
            self._error(cmd.request_id, exc)
            return
        if self.state is State.CLOSED or cmd.watcher_id not in self._watchers:
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
        self._producer_tasks[pid] = self._spawn(self._create_producer(cmd))

    async def _create_producer(self, cmd: pb.CommandProducer) -> None:
        pid = cmd.producer_id
        rid = cmd.request_id
        service = self.service
        try:
            try:
                topic_name = service.parse_topic(cmd.topic)
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
                self._log_failure("create producer", cmd.topic, exc)
                self._error(rid, exc)
                return
            producer.topic_epoch = epoch
            if self.state is State.CLOSED:
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
                self._remote,
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
            seq, highest if highest > seq else seq, send.num_messages, bytes(hp), send.is_chunk
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
        self._spawn(self._close_producer(producer, rid))

    async def _close_producer(self, producer: Producer, request_id: int) -> None:
        await producer.close()
        self.send_command(commands.success(request_id))

    # --- consumers ----------------------------------------------------------------------------

    def _on_subscribe(self, frame: frames.Frame) -> None:
        cmd = frame.command.subscribe
        cid = cmd.consumer_id
        if cid in self._consumers:
            self.send_command(commands.success(cmd.request_id))
            return
        if cid in self._consumer_tasks:
            self.send_command(
                commands.error(
                    request_id=cmd.request_id,
                    error=pb.ServiceNotReady,
                    message="Consumer is already present on the connection",
                )
            )
            return
        self._consumer_tasks[cid] = self._spawn(self._subscribe(cmd))

    async def _subscribe(self, cmd: pb.CommandSubscribe) -> None:
        cid = cmd.consumer_id
        rid = cmd.request_id
        service = self.service
        try:
            try:
                topic_name = service.parse_topic(cmd.topic)
                topic = await service.get_topic(topic_name, create=cmd.force_topic_creation)
                if cmd.HasField("schema") and schemas.is_stored(cmd.schema):
                    await service.schemas.check_consumer(
                        topic_name, cmd.schema, await service.schema_policy(topic_name)
                    )
                handle = await topic.subscriptions.subscribe(cmd, self)
            except Exception as exc:
                self._log_failure("subscribe", cmd.topic, exc)
                self._error(rid, exc)
                return
            if self.state is State.CLOSED:
                await handle.close()
                return
            self._consumers[cid] = handle
            self.send_command(commands.success(rid))
        finally:
            self._consumer_tasks.pop(cid, None)

    def _consumer(self, consumer_id: int) -> ConsumerHandle | None:
        handle = self._consumers.get(consumer_id)
        if handle is None:
            log.debug("%s: command for unknown consumer %d", self._remote, consumer_id)
        return handle

    def _on_flow(self, frame: frames.Frame) -> None:
        cmd = frame.command.flow
        handle = self._consumer(cmd.consumer_id)
        if handle is not None:
            handle.flow(cmd.messagePermits)

    def _on_ack(self, frame: frames.Frame) -> None:
        cmd = frame.command.ack
        handle = self._consumer(cmd.consumer_id)
        if handle is None:
            if cmd.HasField("request_id"):
                self.send_command(
                    commands.ack_response(
                        consumer_id=cmd.consumer_id,
                        request_id=cmd.request_id,
                        error=pb.ConsumerNotFound,
                        message="consumer not found",
                    )
                )
            return
        self._spawn(self._ack(handle, cmd))

    async def _ack(self, handle: ConsumerHandle, cmd: pb.CommandAck) -> None:
        try:
            await handle.ack(cmd)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.warning("%s: ack failed", self._remote, exc_info=exc)
            if cmd.HasField("request_id"):
                code, message = _error_of(exc)
                self.send_command(
                    commands.ack_response(
                        consumer_id=cmd.consumer_id,
                        request_id=cmd.request_id,
                        error=code,
                        message=message,
                    )
                )
            return
        if cmd.HasField("request_id"):
            self.send_command(
                commands.ack_response(consumer_id=cmd.consumer_id, request_id=cmd.request_id)
            )

    def _on_redeliver(self, frame: frames.Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        handle = self._consumer(cmd.consumer_id)
        if handle is not None:
            handle.redeliver_unacknowledged(
                list(cmd.message_ids),
                consumer_epoch=cmd.consumer_epoch if cmd.HasField("consumer_epoch") else None,
            )

    def _consumer_request(
        self,
        consumer_id: int,
        request_id: int,
        work: Callable[[ConsumerHandle], Coroutine[Any, Any, None]],
    ) -> None:
        handle = self._consumer(consumer_id)
        if handle is None:
            self.send_command(
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
                    log.warning("%s: consumer request failed", self._remote, exc_info=exc)
                self._error(request_id, exc)

        self._spawn(run())

    def _on_seek(self, frame: frames.Frame) -> None:
        cmd = frame.command.seek

        async def work(handle: ConsumerHandle) -> None:
            await handle.seek(cmd)
            self.send_command(commands.success(cmd.request_id))

        self._consumer_request(cmd.consumer_id, cmd.request_id, work)

    def _on_unsubscribe(self, frame: frames.Frame) -> None:
        cmd = frame.command.unsubscribe

        async def work(handle: ConsumerHandle) -> None:
            await handle.unsubscribe()
            if self._consumers.get(cmd.consumer_id) is handle:
                del self._consumers[cmd.consumer_id]
            self.send_command(commands.success(cmd.request_id))

        self._consumer_request(cmd.consumer_id, cmd.request_id, work)

    def _on_close_consumer(self, frame: frames.Frame) -> None:
        cmd = frame.command.close_consumer
        handle = self._consumers.pop(cmd.consumer_id, None)
        if handle is None:
            self.send_command(commands.success(cmd.request_id))
            return

        async def run() -> None:
            try:
                await handle.close()
            except Exception:
                log.warning(
                    "%s: closing consumer %d failed", self._remote, cmd.consumer_id, exc_info=True
                )
            self.send_command(commands.success(cmd.request_id))

        self._spawn(run())

    def _on_get_last_message_id(self, frame: frames.Frame) -> None:
        cmd = frame.command.getLastMessageId

        async def work(handle: ConsumerHandle) -> None:
            last = await handle.get_last_message_id()
            self.send_command(
                commands.get_last_message_id_response(
                    request_id=cmd.request_id,
                    last_message_id=last.last,
                    consumer_mark_delete_position=last.mark_delete,
                )
            )

        self._consumer_request(cmd.consumer_id, cmd.request_id, work)

    def _on_consumer_stats(self, frame: frames.Frame) -> None:
        cmd = frame.command.consumerStats
        out = pb.BaseCommand(type=_C.CONSUMER_STATS_RESPONSE)
        r = out.consumerStatsResponse
        r.request_id = cmd.request_id
        handle = self._consumers.get(cmd.consumer_id)
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
            r.address = self._remote
        self.send_command(out)


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

_HANDLERS: Final[dict[int, Callable[[ServerConnection, frames.Frame], None]]] = {
    _C.PING: ServerConnection._on_ping,
    _C.PONG: ServerConnection._on_pong,
    _C.CONNECT: ServerConnection._on_ignored,  # a second CONNECT: nothing to do
    _C.AUTH_RESPONSE: ServerConnection._on_ignored,
    _C.PARTITIONED_METADATA: ServerConnection._on_partitioned_metadata,
    _C.LOOKUP: ServerConnection._on_lookup,
    _C.GET_TOPICS_OF_NAMESPACE: ServerConnection._on_topics_of_namespace,
    _C.GET_SCHEMA: ServerConnection._on_get_schema,
    _C.GET_OR_CREATE_SCHEMA: ServerConnection._on_get_or_create_schema,
    _C.WATCH_TOPIC_LIST: ServerConnection._on_watch_topic_list,
    _C.WATCH_TOPIC_LIST_CLOSE: ServerConnection._on_watch_topic_list_close,
    _C.PRODUCER: ServerConnection._on_producer,
    _C.CLOSE_PRODUCER: ServerConnection._on_close_producer,
    _C.SUBSCRIBE: ServerConnection._on_subscribe,
    _C.FLOW: ServerConnection._on_flow,
    _C.ACK: ServerConnection._on_ack,
    _C.REDELIVER_UNACKNOWLEDGED_MESSAGES: ServerConnection._on_redeliver,
    _C.SEEK: ServerConnection._on_seek,
    _C.UNSUBSCRIBE: ServerConnection._on_unsubscribe,
    _C.CLOSE_CONSUMER: ServerConnection._on_close_consumer,
    _C.GET_LAST_MESSAGE_ID: ServerConnection._on_get_last_message_id,
    _C.CONSUMER_STATS: ServerConnection._on_consumer_stats,
}
