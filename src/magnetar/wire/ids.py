"""Message ids as a small ordered value type, and their wire form (MessageIdData).

The broker assigns (ledger, entry) when it persists an entry; the client adds the partition
index and, inside a batch entry, the batch index. Ids travel as MessageIdData with *unsigned*
ledger/entry fields, yet Pulsar uses -1 as a sentinel (earliest = (-1, -1), "no entry" in
GET_LAST_MESSAGE_ID responses), which arrives as 2**64 - 1. This module normalises those to
signed values on the way in and back on the way out, so the rest of Magnetar only ever sees
signed 64-bit positions.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from magnetar.wire import pb

_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1


def to_signed(value: int) -> int:
    """Read a uint64 wire value as the int64 it stands for (2**64 - 1 -> -1)."""
    return value - _U64 if value > _I64_MAX else value


def to_unsigned(value: int) -> int:
    """Write an int64 position into a uint64 wire field (-1 -> 2**64 - 1)."""
    return value + _U64 if value < 0 else value


class MessageId(NamedTuple):
    """Position of a message: ledger, entry, partition (-1: none), batch index (-1: none).

    Ordered by (ledger, entry, partition, batch_index) -- tuple order, so comparisons and
    hashing run in C. A batch index of -1 (the entry as a whole) sorts before index 0.
    Comparing ids of different partitions is meaningless; callers compare within one.
    """

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1

    @classmethod
    def from_proto(cls, data: pb.MessageIdData) -> MessageId:
        """Read a MessageIdData; absent partition/batch_index read as -1 (their defaults)."""
        return cls(
            to_signed(data.ledgerId),
            to_signed(data.entryId),
            data.partition,
            data.batch_index,
        )

    def fill(self, data: pb.MessageIdData) -> pb.MessageIdData:
        """Write this id into ``data`` (e.g. ``cmd.send_receipt.message_id``) and return it.

        Partition and batch index are only written when set, as the official clients do.
        """
        data.ledgerId = to_unsigned(self.ledger_id)
        data.entryId = to_unsigned(self.entry_id)
        if self.partition >= 0:
            data.partition = self.partition
        if self.batch_index >= 0:
            data.batch_index = self.batch_index
        return data

    def to_proto(self) -> pb.MessageIdData:
        """A new MessageIdData holding this id."""
        return self.fill(pb.MessageIdData())

    def entry(self) -> MessageId:
        """The id of the whole entry this message belongs to (batch index cleared)."""
        return self._replace(batch_index=-1) if self.batch_index != -1 else self

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id == -1 and self.entry_id == -1

    @property
    def is_latest(self) -> bool:
        return self.ledger_id == _I64_MAX and self.entry_id == _I64_MAX

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}:{self.batch_index}"


#: The reader start position "from the first message" (sent by clients as uint64 max).
EARLIEST: Final = MessageId(-1, -1)
#: The reader start position "only new messages".
LATEST: Final = MessageId(_I64_MAX, _I64_MAX)
#: What a duplicate SEND's receipt carries (deduplication): ledger = entry = -1.
DUPLICATE: Final = MessageId(-1, -1)
