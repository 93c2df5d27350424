"""Acknowledgement arithmetic: message ids to positions, batch-index ack sets to indexes.

An ack set (MessageIdData.ack_set, CommandMessage.ack_set) is a java.util.BitSet in 64-bit
words where a *set* bit means "not yet acknowledged". The cursor keeps the per-entry state;
these helpers only translate between the wire form and index lists.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.managed_ledger.api import Position
from magnetar.wire import batch, pb
from magnetar.wire.ids import to_signed


def position_of(mid: pb.MessageIdData) -> Position:
    """The entry position of a message id (ledger/entry read as signed)."""
    return Position(to_signed(mid.ledgerId), to_signed(mid.entryId))


def acked_indexes(ack_set: Sequence[int], batch_size: int) -> list[int]:
    """Indexes of a ``batch_size`` batch that ``ack_set`` marks acknowledged (bit clear)."""
    unacked = set(batch.unacked_from_ack_set(ack_set))
    return [i for i in range(batch_size) if i not in unacked]


def unacked_count(ack_set: Sequence[int], batch_size: int | None = None) -> int:
    """How many messages ``ack_set`` leaves unacknowledged (bits set, below batch_size)."""
    idx = batch.unacked_from_ack_set(ack_set)
    if batch_size is None:
        return len(idx)
    return sum(1 for i in idx if i < batch_size)


def previous_in_ledger(position: Position) -> Position | None:
    """The entry before ``position`` when it is in the same ledger (None for entry 0)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    return None


def messages_acked(mids: Sequence[pb.MessageIdData]) -> int:
    """How many messages an ACK covers, for Pulsar's msgAckRate: an entry acknowledged whole
    counts the batch size the client gives, a batch index acknowledgement or an entry
    without a batch size one."""
    return sum(m.batch_size if m.batch_size > 0 and not m.ack_set else 1 for m in mids)
