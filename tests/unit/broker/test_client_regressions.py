"""Codec-level regressions of the protocol gaps the official Java and Python clients hit
(issue 11): the exact bytes the broker's answers carry, checked without a socket.

* PRODUCER_SUCCESS without ``schema_version``: the Java client reads it unconditionally
  (``IllegalStateException: Field 'schema_version' is not set``) and never got a producer.
* CONNECTED without PIP-344's feature flag: the Java client refused partition lookups
  without auto-creation (``FeatureNotSupportedException``).
* MESSAGE ids without the partition index: ``message_id().partition()`` read -1 on a
  partitioned topic and a reader's has-message-available loop on one partition never ended.

Field numbers are those of Pulsar's PulsarApi.proto; protobuf tags are (field << 3) | type.
"""

from __future__ import annotations

import pytest

from magnetar.broker.connection import BROKER_FEATURES
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName
from tests.unit.broker.subscriptions.fakes import (
    LEDGER,
    FakeCnx,
    Ledger,
    entry_data,
    settle,
    subscribe_cmd,
)

_VARINT, _BYTES = 0, 2


def _tag(field: int, wire_type: int) -> int:
    return (field << 3) | wire_type


def _roundtrip(cmd: pb.BaseCommand) -> pb.BaseCommand:
    [frame] = frames.FrameDecoder().feed(frames.encode_command(cmd))
    return frame.command


def test_producer_success_always_carries_a_schema_version_on_the_wire() -> None:
    cmd = commands.producer_success(request_id=7, producer_name="p", schema_version=b"")
    inner = cmd.producer_success.SerializeToString()
    # field 4 (bytes), present with length 0 for a topic without a schema
    assert bytes([_tag(4, _BYTES), 0]) in inner
    assert _roundtrip(cmd).producer_success.HasField("schema_version")
    versioned = commands.producer_success(
        request_id=7, producer_name="p", schema_version=b"\0" * 7 + b"\3"
    )
    assert _roundtrip(versioned).producer_success.schema_version == b"\0" * 7 + b"\3"
    with pytest.raises(TypeError):
        commands.producer_success(request_id=7, producer_name="p")  # type: ignore[call-arg]


def test_connected_announces_pip_344_and_topic_watchers_and_nothing_else() -> None:
    cmd = commands.connected(server_version="m", protocol_version=20, feature_flags=BROKER_FEATURES)
    flags = _roundtrip(cmd).connected.feature_flags
    # supports_topic_watchers = 4, supports_get_partitioned_metadata_without_auto_creation = 5
    assert flags.SerializeToString() == bytes([_tag(4, _VARINT), 1, _tag(5, _VARINT), 1])
    assert flags.supports_get_partitioned_metadata_without_auto_creation
    assert flags.supports_topic_watchers
    # not implemented, so not announced: the clients fall back as against older brokers
    for absent in (
        "supports_auth_refresh",
        "supports_broker_entry_metadata",
        "supports_partial_producer",
        "supports_repl_dedup_by_lid_and_eid",
    ):
        assert not flags.HasField(absent), absent


def test_partitioned_metadata_request_keeps_the_no_auto_creation_bit() -> None:
    cmd = commands.partitioned_metadata(topic="persistent://public/default/t", request_id=3)
    assert _roundtrip(cmd).partitionMetadata.metadata_auto_creation_enabled  # default: true
    cmd.partitionMetadata.metadata_auto_creation_enabled = False
    assert bytes([_tag(6, _VARINT), 0]) in cmd.partitionMetadata.SerializeToString()
    assert _roundtrip(cmd).partitionMetadata.metadata_auto_creation_enabled is False


def test_message_carries_the_partition_index_on_the_wire() -> None:
    cmd = commands.message(consumer_id=1, message_id=MessageId(5, 9, 2))
    # a MESSAGE frame carries metadata and payload after the command: parse the command part
    data = pb.BaseCommand.FromString(cmd.SerializeToString()).message.message_id
    assert (data.ledgerId, data.entryId, data.partition) == (5, 9, 2)
    assert bytes([_tag(3, _VARINT), 2]) in cmd.message.message_id.SerializeToString()


async def test_a_partition_dispatches_message_ids_with_its_index() -> None:
    ml = Ledger()
    for _ in range(3):
        ml.add(entry_data())
    subs = TopicSubscriptionsImpl(
        TopicName.parse("persistent://public/default/t-partition-2"),
        ml,
    )
    cnx = FakeCnx()
    consumer = await subs.subscribe(subscribe_cmd(1), cnx)
    consumer.flow(10)
    await settle()
    assert [m.message_id for m in cnx.messages] == [MessageId(LEDGER, e, 2) for e in range(3)]
