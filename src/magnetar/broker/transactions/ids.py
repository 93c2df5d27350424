"""Transaction ids and the few constants every transaction module shares.

Why this module exists: a transaction id is two 64-bit halves on the wire (most bits: the
coordinator id; least bits: a sequence of that coordinator), and the coordinator, the
buffer, the pending acks and the connection all pass them around and print them alike.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Protocol

from magnetar.wire import pb

ASSIGN_TOPIC: Final = "persistent://pulsar/system/transaction_coordinator_assign"
"""The partitioned topic whose partition *i* names coordinator *i* (clients look its
partitions up, then connect to each partition's owner)."""
SYSTEM_TENANT: Final = "pulsar"
SYSTEM_NAMESPACE: Final = "system"

TXN_COMMIT_MARKER: Final = 21
"""MessageMetadata.marker_type of a commit marker (Pulsar's MarkerType.TXN_COMMIT)."""
TXN_ABORT_MARKER: Final = 22
"""MessageMetadata.marker_type of an abort marker (Pulsar's MarkerType.TXN_ABORT)."""

NOT_ENABLED: Final = "Transactions are not enabled."


class HasTxnId(Protocol):
    """A command or metadata with ``txnid_most_bits`` / ``txnid_least_bits``."""

    @property
    def txnid_most_bits(self) -> int: ...
    @property
    def txnid_least_bits(self) -> int: ...


class TxnId(NamedTuple):
    most: int
    """The coordinator id."""
    least: int
    """The coordinator's sequence."""

    def __str__(self) -> str:
        return f"({self.most},{self.least})"

    @classmethod
    def of(cls, cmd: HasTxnId) -> TxnId:
        """The id a command or a message metadata carries."""
        return cls(int(cmd.txnid_most_bits), int(cmd.txnid_least_bits))


def assign_partition(tc_id: int) -> str:
    """The topic name of coordinator ``tc_id``."""
    return f"{ASSIGN_TOPIC}-partition-{tc_id}"


def is_commit(action: int) -> bool:
    return action == pb.COMMIT
