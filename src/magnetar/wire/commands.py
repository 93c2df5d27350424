"""Building and dispatching Pulsar commands (BaseCommand), independent of framing.

Incoming: ``unpack`` turns a decoded BaseCommand into ``(type, sub-command)`` so a connection
dispatches on one table instead of a chain of HasField checks; ``FIELD_BY_TYPE`` is derived
from the proto descriptor (sub-command field number == type value), never hand-kept.

Outgoing: one builder per response the broker sends, with keyword-only arguments and the
presence rules the official clients rely on (e.g. CONNECTED always carries server_version,
PRODUCER_SUCCESS always carries producer_name, message ids are written with -1 as uint64
max). Builders return the BaseCommand; ``frames.encode_command`` turns it into bytes. A few
client-side builders (connect, producer, subscribe, send...) exist for tests and tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from google.protobuf.message import Message

from magnetar.wire import pb
from magnetar.wire.ids import MessageId

CommandType: TypeAlias = pb.BaseCommand.Type.ValueType
ServerError: TypeAlias = pb.ServerError.ValueType

_C = pb.BaseCommand

PROTOCOL_VERSION: Final = 21
"""The highest protocol version Magnetar speaks, as a server (CONNECTED answers the lower of
the client's and this) and as a client (what its own connections announce in CONNECT). The
only definition: tests/unit/structure/test_client_layer.py fails on a second one."""

#: BaseCommand field name of each command type's sub-command (its field number == the type).
FIELD_BY_TYPE: Final[Mapping[int, str]] = {
    value: pb.BaseCommand.DESCRIPTOR.fields_by_number[value].name
    for value in pb.BaseCommand.Type.values()
}

#: Commands followed by message metadata and payload in their frame.
PAYLOAD_TYPES: Final[frozenset[CommandType]] = frozenset({_C.SEND, _C.MESSAGE})

#: Commands whose sub-command has no fields; tolerated when the sub-command is absent.
EMPTY_BODY_TYPES: Final[frozenset[CommandType]] = frozenset({_C.PING, _C.PONG})

_HAS_FIELD: Final[Any] = pb.BaseCommand.HasField


def type_name(command_type: int) -> str:
    """``6`` -> ``"SEND"``; unknown values give ``"UNKNOWN(n)"`` (for logs and errors)."""
    try:
        return pb.BaseCommand.Type.Name(command_type)  # type: ignore[arg-type]
    except ValueError:
        return f"UNKNOWN({command_type})"


def error_name(code: int) -> str:
    """``5`` -> ``"ServiceNotReady"``; unknown codes give ``"ServerError(n)"``."""
    try:
        return pb.ServerError.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ServerError({code})"


def body(cmd: pb.BaseCommand) -> Message:
    """The sub-command that ``cmd.type`` designates (a default instance if absent)."""
    return getattr(cmd, FIELD_BY_TYPE[cmd.type])  # type: ignore[no-any-return]


def unpack(cmd: pb.BaseCommand) -> tuple[CommandType, Message]:
    """``(type, sub-command)`` of a decoded command, for dispatch tables keyed by type."""
    t = cmd.type
    return t, getattr(cmd, FIELD_BY_TYPE[t])


def has_body(cmd: pb.BaseCommand) -> bool:
    """Whether the sub-command designated by ``cmd.type`` is present on the wire."""
    return bool(_HAS_FIELD(cmd, FIELD_BY_TYPE[cmd.type]))


def _kv(target: Any, items: Mapping[str, str] | None) -> None:
    if items:
        for key, value in items.items():
            target.add(key=key, value=value)


# --------------------------------------------------------------------------------------
# Broker -> client
# --------------------------------------------------------------------------------------


def connected(
    *,
    server_version: str,
    protocol_version: int,
    max_message_size: int | None = None,
    feature_flags: pb.FeatureFlags | None = None,
) -> pb.BaseCommand:
    """CONNECTED: ``protocol_version`` should be min(client's, ours)."""
    cmd = pb.BaseCommand(type=_C.CONNECTED)
    c = cmd.connected
    c.server_version = server_version
    c.protocol_version = protocol_version
    if max_message_size is not None:
        c.max_message_size = max_message_size
    if feature_flags is not None:
        c.feature_flags.CopyFrom(feature_flags)
    return cmd


def ping() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.PING)
    cmd.ping.SetInParent()
    return cmd


def pong() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.PONG)
    cmd.pong.SetInParent()
    return cmd


def success(request_id: int, *, schema: pb.Schema | None = None) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.SUCCESS)
    cmd.success.request_id = request_id
    if schema is not None:
        cmd.success.schema.CopyFrom(schema)
    return cmd


def error(*, request_id: int, error: ServerError, message: str) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.ERROR)
    e = cmd.error
    e.request_id = request_id
    e.error = error
    e.message = message
    return cmd


def partitioned_metadata_response(
    *,
    request_id: int,
    partitions: int = 0,
    error: ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """PARTITIONED_METADATA_RESPONSE: Success with ``partitions`` (0 = not partitioned), or
    Failed with ``error``/``message`` when ``error`` is given."""
    cmd = pb.BaseCommand(type=_C.PARTITIONED_METADATA_RESPONSE)
    r = cmd.partitionMetadataResponse
    r.request_id = request_id
    if error is None:
        r.response = pb.CommandPartitionedTopicMetadataResponse.Success
        r.partitions = partitions
    else:
        r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        r.error = error
        r.message = message or ""
    return cmd


def lookup_response(
    *,
    request_id: int,
    broker_service_url: str | None = None,
    broker_service_url_tls: str | None = None,
    redirect: bool = False,
    authoritative: bool = False,
    proxy_through_service_url: bool = False,
    error: ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """LOOKUP_RESPONSE: Connect (this broker serves the topic), Redirect (``redirect=True``:
    ask the broker at the URL, authoritatively), or Failed when ``error`` is given."""
    cmd = pb.BaseCommand(type=_C.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    LT = pb.CommandLookupTopicResponse
    if error is not None:
        r.response = LT.Failed
        r.error = error
        r.message = message or ""
        return cmd
    r.response = LT.Redirect if redirect else LT.Connect
    if broker_service_url is not None:
        r.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        r.brokerServiceUrlTls = broker_service_url_tls
    r.authoritative = authoritative
    if proxy_through_service_url:
        r.proxy_through_service_url = True
    return cmd


def producer_success(
    *,
    request_id: int,
    producer_name: str,
    schema_version: bytes,
    last_sequence_id: int = -1,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> pb.BaseCommand:
    """PRODUCER_SUCCESS: the client continues its sequence ids from ``last_sequence_id``.

    ``schema_version`` is always set (empty for a topic without a schema), as Pulsar's broker
    does: the Java client reads it unconditionally and cannot create a producer without it."""
    cmd = pb.BaseCommand(type=_C.PRODUCER_SUCCESS)
    r = cmd.producer_success
    r.request_id = request_id
    r.producer_name = producer_name
    r.last_sequence_id = last_sequence_id
    r.schema_version = schema_version
    if topic_epoch is not None:
        r.topic_epoch = topic_epoch
    if not producer_ready:
        r.producer_ready = False
    return cmd


def send_receipt(
    *,
    producer_id: int,
    sequence_id: int,
    message_id: MessageId,
    highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    """SEND_RECEIPT; must go out in sequence order per producer. A duplicate's receipt
    carries ``ids.DUPLICATE`` (-1:-1)."""
    cmd = pb.BaseCommand(type=_C.SEND_RECEIPT)
    r = cmd.send_receipt
    r.producer_id = producer_id
    r.sequence_id = sequence_id
    message_id.fill(r.message_id)
    if highest_sequence_id is not None:
        r.highest_sequence_id = highest_sequence_id
    return cmd


def send_error(
    *, producer_id: int, sequence_id: int, error: ServerError, message: str
) -> pb.BaseCommand:
    """SEND_ERROR: the client reconnects and resends, except for ChecksumError."""
    cmd = pb.BaseCommand(type=_C.SEND_ERROR)
    r = cmd.send_error
    r.producer_id = producer_id
    r.sequence_id = sequence_id
    r.error = error
    r.message = message
    return cmd


def message(
    *,
    consumer_id: int,
    message_id: MessageId,
    redelivery_count: int = 0,
    ack_set: Iterable[int] | None = None,
    consumer_epoch: int | None = None,
) -> pb.BaseCommand:
    """MESSAGE (the command part; the stored metadata+payload follow it in the frame)."""
    cmd = pb.BaseCommand(type=_C.MESSAGE)
    m = cmd.message
    m.consumer_id = consumer_id
    message_id.fill(m.message_id)
    if redelivery_count:
        m.redelivery_count = redelivery_count
    if ack_set:
        m.ack_set.extend(ack_set)
    if consumer_epoch is not None:
        m.consumer_epoch = consumer_epoch
    return cmd


def close_producer(
    *,
    producer_id: int,
    request_id: int,
    assigned_broker_url: str | None = None,
    assigned_broker_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_PRODUCER from the broker (unload...): the client looks up and re-creates it."""
    cmd = pb.BaseCommand(type=_C.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    _closing(cmd.close_producer, request_id, assigned_broker_url, assigned_broker_url_tls)
    return cmd


def close_consumer(
    *,
    consumer_id: int,
    request_id: int,
    assigned_broker_url: str | None = None,
    assigned_broker_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_CONSUMER from the broker (unload, seek...): the client re-subscribes."""
    cmd = pb.BaseCommand(type=_C.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    _closing(cmd.close_consumer, request_id, assigned_broker_url, assigned_broker_url_tls)
    return cmd


def _closing(
    body: pb.CommandCloseProducer | pb.CommandCloseConsumer,
    request_id: int,
    url: str | None,
    url_tls: str | None,
) -> None:
    """What CLOSE_PRODUCER and CLOSE_CONSUMER share: the request id and, when the broker
    knows it, where the client should go instead."""
    body.request_id = request_id
    if url is not None:
        body.assignedBrokerServiceUrl = url
    if url_tls is not None:
        body.assignedBrokerServiceUrlTls = url_tls


def active_consumer_change(*, consumer_id: int, is_active: bool) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.ACTIVE_CONSUMER_CHANGE)
    cmd.active_consumer_change.consumer_id = consumer_id
    cmd.active_consumer_change.is_active = is_active
    return cmd


def reached_end_of_topic(consumer_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = consumer_id
    return cmd


def get_last_message_id_response(
    *,
    request_id: int,
    last_message_id: MessageId,
    consumer_mark_delete_position: MessageId | None = None,
) -> pb.BaseCommand:
    """GET_LAST_MESSAGE_ID_RESPONSE; an empty topic answers entry -1, and the batch index is
    the last index of the last entry."""
    cmd = pb.BaseCommand(type=_C.GET_LAST_MESSAGE_ID_RESPONSE)
    r = cmd.getLastMessageIdResponse
    r.request_id = request_id
    last_message_id.fill(r.last_message_id)
    if consumer_mark_delete_position is not None:
        consumer_mark_delete_position.fill(r.consumer_mark_delete_position)
    return cmd


def get_topics_of_namespace_response(
    *,
    request_id: int,
    topics: Iterable[str],
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    r = cmd.getTopicsOfNamespaceResponse
    r.request_id = request_id
    r.topics.extend(topics)
    if filtered:
        r.filtered = True
    if topics_hash is not None:
        r.topics_hash = topics_hash
    if not changed:
        r.changed = False
    return cmd


def ack_response(
    *,
    consumer_id: int,
    request_id: int,
    error: ServerError | None = None,
    message: str | None = None,
    txnid_least_bits: int | None = None,
    txnid_most_bits: int | None = None,
) -> pb.BaseCommand:
    """ACK_RESPONSE, owed when the ACK carried a request_id."""
    cmd = pb.BaseCommand(type=_C.ACK_RESPONSE)
    r = cmd.ackResponse
    r.consumer_id = consumer_id
    r.request_id = request_id
    if error is not None:
        r.error = error
        r.message = message or ""
    if txnid_least_bits is not None:
        r.txnid_least_bits = txnid_least_bits
    if txnid_most_bits is not None:
        r.txnid_most_bits = txnid_most_bits
    return cmd


def get_schema_response(
    *,
    request_id: int,
    schema: pb.Schema | None = None,
    schema_version: bytes | None = None,
    error: ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """GET_SCHEMA_RESPONSE; no schema is answered with ``error=pb.TopicNotFound``."""
    cmd = pb.BaseCommand(type=_C.GET_SCHEMA_RESPONSE)
    _schema_answer(cmd.getSchemaResponse, request_id, schema_version, error, message)
    if schema is not None:
        cmd.getSchemaResponse.schema.CopyFrom(schema)
    return cmd


def get_or_create_schema_response(
    *,
    request_id: int,
    schema_version: bytes | None = None,
    error: ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """GET_OR_CREATE_SCHEMA_RESPONSE: the version the schema has (or was given), or an error."""
    cmd = pb.BaseCommand(type=_C.GET_OR_CREATE_SCHEMA_RESPONSE)
    _schema_answer(cmd.getOrCreateSchemaResponse, request_id, schema_version, error, message)
    return cmd


def _schema_answer(
    r: pb.CommandGetSchemaResponse | pb.CommandGetOrCreateSchemaResponse,
    request_id: int,
    schema_version: bytes | None,
    error: ServerError | None,
    message: str | None,
) -> None:
    """What both schema answers carry: the request id, the version or the error."""
    r.request_id = request_id
    if error is not None:
        r.error_code = error
        r.error_message = message or ""
    if schema_version is not None:
        r.schema_version = schema_version


def auth_challenge(
    *, server_version: str, protocol_version: int, method: str, data: bytes
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.AUTH_CHALLENGE)
    c = cmd.authChallenge
    c.server_version = server_version
    c.protocol_version = protocol_version
    c.challenge.auth_method_name = method
    c.challenge.auth_data = data
    return cmd


def topic_migrated(
    *,
    resource_id: int,
    consumer: bool,
    broker_service_url: str | None = None,
    broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """TOPIC_MIGRATED; only send it to clients that announced protocol version >= 20."""
    cmd = pb.BaseCommand(type=_C.TOPIC_MIGRATED)
    c = cmd.topicMigrated
    c.resource_id = resource_id
    RT = pb.CommandTopicMigrated
    c.resource_type = RT.Consumer if consumer else RT.Producer
    if broker_service_url is not None:
        c.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        c.brokerServiceUrlTls = broker_service_url_tls
    return cmd


# --------------------------------------------------------------------------------------
# Client -> broker (tests, tools, the perf client)
# --------------------------------------------------------------------------------------


def connect(
    *,
    client_version: str = "magnetar-wire",
    protocol_version: int = PROTOCOL_VERSION,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    feature_flags: pb.FeatureFlags | None = None,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.CONNECT)
    c = cmd.connect
    c.client_version = client_version
    c.protocol_version = protocol_version
    if auth_method_name is not None:
        c.auth_method_name = auth_method_name
    if auth_data is not None:
        c.auth_data = auth_data
    if feature_flags is not None:
        c.feature_flags.CopyFrom(feature_flags)
    return cmd


def partitioned_metadata(*, topic: str, request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    return cmd


def lookup(*, topic: str, request_id: int, authoritative: bool = False) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.LOOKUP)
    cmd.lookupTopic.topic = topic
    cmd.lookupTopic.request_id = request_id
    cmd.lookupTopic.authoritative = authoritative
    return cmd


def producer(
    *,
    topic: str,
    producer_id: int,
    request_id: int,
    producer_name: str | None = None,
    epoch: int = 0,
    access_mode: pb.ProducerAccessMode.ValueType = pb.Shared,
    metadata: Mapping[str, str] | None = None,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.PRODUCER)
    p = cmd.producer
    p.topic = topic
    p.producer_id = producer_id
    p.request_id = request_id
    if producer_name is not None:
        p.producer_name = producer_name
    else:
        p.user_provided_producer_name = False
    if epoch:
        p.epoch = epoch
    if access_mode != pb.Shared:
        p.producer_access_mode = access_mode
    _kv(p.metadata, metadata)
    return cmd


def send(
    *,
    producer_id: int,
    sequence_id: int,
    num_messages: int = 1,
    highest_sequence_id: int | None = None,
    is_chunk: bool = False,
) -> pb.BaseCommand:
    """SEND (the command part; metadata and payload follow it in the frame)."""
    cmd = pb.BaseCommand(type=_C.SEND)
    s = cmd.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    if num_messages != 1:
        s.num_messages = num_messages
    if highest_sequence_id is not None:
        s.highest_sequence_id = highest_sequence_id
    if is_chunk:
        s.is_chunk = True
    return cmd


def subscribe(
    *,
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    sub_type: pb.CommandSubscribe.SubType.ValueType = pb.CommandSubscribe.Exclusive,
    consumer_name: str | None = None,
    durable: bool = True,
    start_message_id: MessageId | None = None,
    initial_position: pb.CommandSubscribe.InitialPosition.ValueType = (pb.CommandSubscribe.Latest),
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.SUBSCRIBE)
    s = cmd.subscribe
    s.topic = topic
    s.subscription = subscription
    s.subType = sub_type
    s.consumer_id = consumer_id
    s.request_id = request_id
    if consumer_name is not None:
        s.consumer_name = consumer_name
    if not durable:
        s.durable = False
    if start_message_id is not None:
        start_message_id.fill(s.start_message_id)
    s.initialPosition = initial_position
    return cmd


def flow(*, consumer_id: int, permits: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.FLOW)
    cmd.flow.consumer_id = consumer_id
    cmd.flow.messagePermits = permits
    return cmd


def ack(
    *,
    consumer_id: int,
    message_ids: Iterable[MessageId],
    cumulative: bool = False,
    request_id: int | None = None,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.ACK)
    a = cmd.ack
    a.consumer_id = consumer_id
    a.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    for mid in message_ids:
        mid.fill(a.message_id.add())
    if request_id is not None:
        a.request_id = request_id
    return cmd


def redeliver_unacknowledged(
    *, consumer_id: int, message_ids: Iterable[MessageId] = ()
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=_C.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    r = cmd.redeliverUnacknowledgedMessages
    r.consumer_id = consumer_id
    for mid in message_ids:
        mid.fill(r.message_ids.add())
    return cmd
