"""MessageId: ordering, the -1 <-> uint64 max normalisation, and the official client's form."""

from __future__ import annotations

import pytest

from magnetar.wire import pb
from magnetar.wire.ids import EARLIEST, LATEST, MessageId, to_signed, to_unsigned


def test_ordering() -> None:
    ids = [MessageId(2, 0), MessageId(1, 5, 0, 3), MessageId(1, 5), MessageId(1, 5, 0, 0),
           EARLIEST, MessageId(1, 4)]  # fmt: skip
    assert sorted(ids) == [EARLIEST, MessageId(1, 4), MessageId(1, 5), MessageId(1, 5, 0, 0),
                           MessageId(1, 5, 0, 3), MessageId(2, 0)]  # fmt: skip
    assert EARLIEST < MessageId(0, 0) < LATEST
    assert MessageId(1, 5, 0, 3).entry() == MessageId(1, 5, 0)
    assert len({MessageId(1, 2), MessageId(1, 2)}) == 1


def test_sign_normalisation() -> None:
    assert to_signed(2**64 - 1) == -1 and to_unsigned(-1) == 2**64 - 1
    assert to_signed(5) == 5 and to_unsigned(5) == 5
    data = pb.MessageIdData(ledgerId=2**64 - 1, entryId=2**64 - 1)
    mid = MessageId.from_proto(data)
    assert mid == EARLIEST and mid.is_earliest and mid.partition == -1
    assert EARLIEST.to_proto() == data
    assert LATEST.is_latest
    assert str(MessageId(1, 2, 3, 4)) == "1:2:3:4"


def test_proto_round_trip_writes_partition_and_batch_only_when_set() -> None:
    plain = MessageId(10, 20).to_proto()
    assert not plain.HasField("partition") and not plain.HasField("batch_index")
    full = MessageId(10, 20, 2, 3)
    assert (
        MessageId.from_proto(pb.MessageIdData.FromString(full.to_proto().SerializeToString()))
        == full
    )


def test_official_client_serialisation() -> None:
    pulsar = pytest.importorskip("pulsar")
    cases = [(10, 20, 2, 3), (10, 20, -1, -1), (7, 0, 5, -1), (123456789012, 42, -1, 9)]
    for ledger, entry, partition, batch in cases:
        theirs = pulsar.MessageId(partition=partition, ledger_id=ledger, entry_id=entry,
                                  batch_index=batch)  # fmt: skip
        ours = MessageId(ledger, entry, partition, batch)
        assert MessageId.from_proto(pb.MessageIdData.FromString(theirs.serialize())) == ours
        back = pulsar.MessageId.deserialize(ours.to_proto().SerializeToString())
        assert (back.ledger_id(), back.entry_id(), back.partition(), back.batch_index()) == (
            ledger, entry, partition, batch,
        )  # fmt: skip
    earliest = pb.MessageIdData.FromString(pulsar.MessageId.earliest.serialize())
    assert MessageId.from_proto(earliest) == EARLIEST
    latest = pb.MessageIdData.FromString(pulsar.MessageId.latest.serialize())
    assert MessageId.from_proto(latest) == LATEST
    assert EARLIEST.to_proto().SerializeToString() == pulsar.MessageId.earliest.serialize()
