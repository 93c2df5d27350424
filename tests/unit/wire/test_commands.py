"""Command builders produce what the official clients accept; dispatch helpers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf.message import Message

from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import DUPLICATE, EARLIEST, MessageId

T = pb.BaseCommand

BUILDERS: list[tuple[Callable[[], pb.BaseCommand], int]] = [
    (lambda: commands.connected(server_version="Magnetar", protocol_version=20,
                                max_message_size=5 << 20), T.CONNECTED),
    (commands.ping, T.PING),
    (commands.pong, T.PONG),
    (lambda: commands.success(3), T.SUCCESS),
    (lambda: commands.success(3, schema=pb.Schema(name="s", schema_data=b"{}",
                                                  type=pb.Schema.Json)), T.SUCCESS),
    (lambda: commands.error(request_id=1, error=pb.TopicNotFound, message="no"), T.ERROR),
    (lambda: commands.partitioned_metadata_response(request_id=1, partitions=4),
     T.PARTITIONED_METADATA_RESPONSE),
    (lambda: commands.partitioned_metadata_response(request_id=1, error=pb.MetadataError,
                                                    message="x"),
     T.PARTITIONED_METADATA_RESPONSE),
    (lambda: commands.lookup_response(request_id=1, broker_service_url="pulsar://h:6650"),
     T.LOOKUP_RESPONSE),
    (lambda: commands.lookup_response(request_id=1, error=pb.ServiceNotReady),
     T.LOOKUP_RESPONSE),
    (lambda: commands.producer_success(request_id=1, producer_name="p", schema_version=b""),
     T.PRODUCER_SUCCESS),
    (lambda: commands.send_receipt(producer_id=1, sequence_id=2, message_id=MessageId(3, 4)),
     T.SEND_RECEIPT),
    (lambda: commands.send_error(producer_id=1, sequence_id=2, error=pb.ChecksumError,
                                 message="bad crc"), T.SEND_ERROR),
    (lambda: commands.message(consumer_id=1, message_id=MessageId(3, 4, 0),
                              redelivery_count=2, ack_set=[5], consumer_epoch=1), T.MESSAGE),
    (lambda: commands.close_producer(producer_id=1, request_id=2), T.CLOSE_PRODUCER),
    (lambda: commands.close_consumer(consumer_id=1, request_id=2,
                                     assigned_broker_url="pulsar://x:1"), T.CLOSE_CONSUMER),
    (lambda: commands.active_consumer_change(consumer_id=1, is_active=True),
     T.ACTIVE_CONSUMER_CHANGE),
    (lambda: commands.reached_end_of_topic(1), T.REACHED_END_OF_TOPIC),
    (lambda: commands.get_last_message_id_response(request_id=1,
                                                   last_message_id=MessageId(3, -1)),
     T.GET_LAST_MESSAGE_ID_RESPONSE),
    (lambda: commands.get_topics_of_namespace_response(request_id=1, topics=["a", "b"]),
     T.GET_TOPICS_OF_NAMESPACE_RESPONSE),
    (lambda: commands.ack_response(consumer_id=1, request_id=2), T.ACK_RESPONSE),
    (lambda: commands.get_schema_response(request_id=1, error=pb.TopicNotFound, message="none"),
     T.GET_SCHEMA_RESPONSE),
    (lambda: commands.get_or_create_schema_response(request_id=1, schema_version=b"\0"),
     T.GET_OR_CREATE_SCHEMA_RESPONSE),
    (lambda: commands.auth_challenge(server_version="m", protocol_version=20, method="token",
                                     data=b""), T.AUTH_CHALLENGE),
    (lambda: commands.topic_migrated(resource_id=1, consumer=True), T.TOPIC_MIGRATED),
    (lambda: commands.connect(), T.CONNECT),
    (lambda: commands.partitioned_metadata(topic="t", request_id=1), T.PARTITIONED_METADATA),
    (lambda: commands.lookup(topic="t", request_id=1), T.LOOKUP),
    (lambda: commands.producer(topic="t", producer_id=1, request_id=2, metadata={"a": "b"}),
     T.PRODUCER),
    (lambda: commands.send(producer_id=1, sequence_id=2, num_messages=3), T.SEND),
    (lambda: commands.subscribe(topic="t", subscription="s", consumer_id=1, request_id=2,
                                durable=False, start_message_id=EARLIEST), T.SUBSCRIBE),
    (lambda: commands.flow(consumer_id=1, permits=1000), T.FLOW),
    (lambda: commands.ack(consumer_id=1, message_ids=[MessageId(1, 2)], request_id=9), T.ACK),
    (lambda: commands.redeliver_unacknowledged(consumer_id=1), T.REDELIVER_UNACKNOWLEDGED_MESSAGES),
]  # fmt: skip


@pytest.mark.parametrize(("build", "command_type"), BUILDERS)
def test_builders_encode_with_every_required_field(
    build: Callable[[], pb.BaseCommand], command_type: int
) -> None:
    cmd = build()
    assert cmd.type == command_type
    assert cmd.IsInitialized()  # what the C++ client's parser demands
    assert commands.has_body(cmd)
    t, body = commands.unpack(cmd)
    assert t == command_type
    assert isinstance(body, Message)
    if command_type not in commands.PAYLOAD_TYPES:
        [frame] = frames.FrameDecoder().feed(frames.encode_command(cmd))
        assert frame.command == cmd


def test_specific_fields() -> None:
    c = commands.connected(server_version="Magnetar", protocol_version=20).connected
    assert c.server_version == "Magnetar" and not c.HasField("max_message_size")
    r = commands.partitioned_metadata_response(request_id=5, partitions=0)
    assert r.partitionMetadataResponse.HasField("partitions")
    assert (
        r.partitionMetadataResponse.response == pb.CommandPartitionedTopicMetadataResponse.Success
    )
    lookup = commands.lookup_response(request_id=1, broker_service_url="u", redirect=True,
                                      authoritative=True).lookupTopicResponse  # fmt: skip
    assert lookup.response == pb.CommandLookupTopicResponse.Redirect and lookup.authoritative
    success = commands.producer_success(request_id=1, producer_name="p", schema_version=b"")
    ps = success.producer_success
    assert ps.HasField("last_sequence_id") and ps.last_sequence_id == -1
    dup = commands.send_receipt(producer_id=1, sequence_id=2, message_id=DUPLICATE)
    assert dup.send_receipt.message_id.ledgerId == 2**64 - 1
    assert not dup.send_receipt.message_id.HasField("partition")
    anon = commands.producer(topic="t", producer_id=1, request_id=1).producer
    assert anon.user_provided_producer_name is False


def test_type_name() -> None:
    assert commands.type_name(6) == "SEND"
    assert commands.type_name(999) == "UNKNOWN(999)"
