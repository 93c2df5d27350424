"""The generated protocol module: wire facts and the required/optional behaviour we rely on."""

from __future__ import annotations

import pytest
from google.protobuf.message import EncodeError

from magnetar.wire import commands, pb


def test_every_command_type_has_its_field_at_the_same_number() -> None:
    base = pb.BaseCommand.DESCRIPTOR
    for value in pb.BaseCommand.Type.values():
        field = base.fields_by_number[value]
        assert field.message_type is not None, value
    assert set(commands.FIELD_BY_TYPE) == set(pb.BaseCommand.Type.values())
    # sub-command fields exist exactly for the type values (plus `type` itself = 1)
    assert set(base.fields_by_number) == {1, *pb.BaseCommand.Type.values()}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONNECT", 2),
        ("SEND", 6),
        ("MESSAGE", 9),
        ("PING", 18),
        ("PONG", 19),
        ("REDELIVER_UNACKNOWLEDGED_MESSAGES", 20),
        ("LOOKUP_RESPONSE", 24),
        ("ACTIVE_CONSUMER_CHANGE", 31),
        ("ACK_RESPONSE", 38),
        ("GET_OR_CREATE_SCHEMA_RESPONSE", 40),
        ("NEW_TXN", 50),
        ("TC_CLIENT_CONNECT_RESPONSE", 63),
        ("WATCH_TOPIC_LIST", 64),
        ("WATCH_TOPIC_LIST_CLOSE", 67),
        ("TOPIC_MIGRATED", 68),
    ],
)
def test_command_type_values(name: str, value: int) -> None:
    assert pb.BaseCommand.Type.Value(name) == value


def _numbers(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_field_numbers_from_the_protocol_documentation() -> None:
    assert _numbers(pb.CommandProducer) == {
        "topic": 1, "producer_id": 2, "request_id": 3, "producer_name": 4, "encrypted": 5,
        "metadata": 6, "schema": 7, "epoch": 8, "user_provided_producer_name": 9,
        "producer_access_mode": 10, "topic_epoch": 11, "txn_enabled": 12,
        "initial_subscription_name": 13,
    }  # fmt: skip
    sub = _numbers(pb.CommandSubscribe)
    assert sub["subType"] == 3 and sub["start_message_id"] == 9 and sub["initialPosition"] == 13
    assert sub["keySharedMeta"] == 17 and sub["consumer_epoch"] == 19
    md = _numbers(pb.MessageMetadata)
    assert md["num_messages_in_batch"] == 11 and md["marker_type"] == 20
    assert md["txnid_least_bits"] == 22 and md["txnid_most_bits"] == 23
    assert md["highest_sequence_id"] == 24 and md["null_value"] == 25 and md["uuid"] == 26
    assert (md["num_chunks_from_msg"], md["total_chunk_msg_size"], md["chunk_id"]) == (27, 28, 29)
    assert md["null_partition_key"] == 30
    assert _numbers(pb.CommandAckResponse)["request_id"] == 6
    assert _numbers(pb.CommandAck)["request_id"] == 8
    assert _numbers(pb.MessageIdData)["first_chunk_message_id"] == 7
    assert _numbers(pb.BrokerEntryMetadata) == {"broker_timestamp": 1, "index": 2}
    assert _numbers(pb.KeySharedMeta) == {
        "keySharedMode": 1, "hashRanges": 3, "allowOutOfOrderDelivery": 4,
    }  # fmt: skip
    assert _numbers(pb.CommandGetTopicsOfNamespaceResponse)["changed"] == 5
    assert _numbers(pb.Schema) == {"name": 1, "schema_data": 3, "type": 4, "properties": 5}


def test_enum_values() -> None:
    assert [pb.ServerError.Name(v) for v in range(26)][-1] == "ProducerFenced"  # type: ignore[arg-type]
    assert pb.ServerError.Value("ChecksumError") == 9
    assert pb.ServerError.Value("InvalidTopicName") == 17
    assert pb.ProtocolVersion.Value("v21") == 21
    assert len(pb.ProtocolVersion.values()) == 22
    assert [pb.CompressionType.Name(v) for v in range(5)] == [  # type: ignore[arg-type]
        "NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY",
    ]  # fmt: skip
    assert pb.ExclusiveWithFencing == 3
    assert pb.CommandSubscribe.Key_Shared == 3
    assert pb.CommandSubscribe.Earliest == 1
    assert pb.CommandLookupTopicResponse.Failed == 2
    assert pb.CommandAck.ChecksumMismatch == 2
    assert pb.CommandGetTopicsOfNamespace.ALL == 2
    assert pb.Schema.ProtobufNative == 20
    assert pb.STICKY == 1
    assert pb.ABORT == 1


def test_defaults_the_clients_assume() -> None:
    assert pb.MessageIdData().partition == -1
    assert pb.MessageIdData().batch_index == -1
    assert pb.CommandSubscribe().durable is True
    assert pb.CommandSubscribe().force_topic_creation is True
    assert pb.CommandProducer().user_provided_producer_name is True
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.MessageMetadata().num_messages_in_batch == 1
    assert pb.CommandSend().num_messages == 1
    assert pb.CommandGetTopicsOfNamespaceResponse().changed is True
    assert pb.CommandPartitionedTopicMetadata().metadata_auto_creation_enabled is True


def test_decoding_never_checks_required_fields() -> None:
    # the broker must not reject what a (possibly sloppy) client sends
    assert not pb.MessageIdData.FromString(b"").HasField("ledgerId")
    cmd = pb.BaseCommand.FromString(b"\x08\x07\x3a\x00")  # SEND_RECEIPT with an empty body
    assert cmd.HasField("send_receipt") and not cmd.send_receipt.HasField("producer_id")
    assert pb.MessageMetadata.FromString(b"\x10\x05").sequence_id == 5


def test_encoding_refuses_missing_fields_the_client_requires() -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER_SUCCESS)
    cmd.producer_success.request_id = 1  # producer_name missing: the C++ client would drop us
    with pytest.raises(EncodeError):
        cmd.SerializeToString()
    # client-only commands are lenient
    pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend()).SerializeToString()


def test_unknown_enum_values_read_as_absent() -> None:
    sub = pb.CommandSubscribe.FromString(b"\x18\x07")  # subType = 7, unknown to us
    assert not sub.HasField("subType") and sub.subType == pb.CommandSubscribe.Exclusive
