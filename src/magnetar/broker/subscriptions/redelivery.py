"""What a subscription delivers again: the replay set, the redelivery counts, the rewind.

Why this module exists: the subscription, its dispatch loop and its acknowledgements all
change this state, and each of its rules is stated once here. Shared and Key_Shared keep a
replay set of positions (nacked, left behind by a disconnected consumer, waiting for a busy
key's consumer, come due after a delay) that is served before new reads; Exclusive and
Failover rewind the cursor instead (``rewind`` asks the dispatch loop for it). Either way the
broker counts redeliveries per position and sends the count in MESSAGE.redelivery_count (the
clients' dead-letter policy relies on it). Plain state: no I/O, no timer.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.broker.subscriptions.stats import Meter
from magnetar.managed_ledger.api import Position


class Redelivery:
    """One subscription's redelivery state."""

    def __init__(self) -> None:
        self.replay: dict[Position, int] = {}
        """Positions to (re)deliver before new reads -> their sticky-key hash."""
        self.replay_hashes: dict[int, int] = {}
        """Key_Shared: how many replay positions each key hash has (newer entries wait)."""
        self.counts: dict[Position, int] = {}
        """Broker-tracked redelivery count per position."""
        self.rewind = False
        """Exclusive/Failover: the dispatch loop rewinds the cursor before its next round."""
        self.redelivered = Meter()
        """Messages given back for redelivery (the stats' ``msgRateRedeliver``)."""

    def park(self, position: Position, key_hash: int) -> None:
        """Put ``position`` in the replay set."""
        if position in self.replay:
            return
        self.replay[position] = key_hash
        hashes = self.replay_hashes
        hashes[key_hash] = hashes.get(key_hash, 0) + 1

    def drop(self, position: Position) -> None:
        """Take ``position`` out of the replay set (read again, or acknowledged)."""
        key_hash = self.replay.pop(position, None)
        if key_hash is None:
            return
        left = self.replay_hashes[key_hash] - 1
        if left:
            self.replay_hashes[key_hash] = left
        else:
            del self.replay_hashes[key_hash]

    def clear(self) -> None:
        """Empty the replay set (the counts stay)."""
        self.replay.clear()
        self.replay_hashes.clear()

    def reset(self) -> None:
        """Forget everything (a seek: the cursor starts afresh)."""
        self.rewind = False
        self.clear()
        self.counts.clear()

    def count(self, positions: Mapping[Position, tuple[int, int]]) -> None:
        """Positions given back, each with (its unacknowledged messages, its key hash):
        one more redelivery each."""
        counts = self.counts
        n = 0
        for position, (unacked, _) in positions.items():
            counts[position] = counts.get(position, 0) + 1
            n += unacked
        self.redelivered.add(n)

    def acked(self, position: Position) -> None:
        """``position`` is acknowledged: nothing of it is delivered again."""
        if self.counts:
            self.counts.pop(position, None)
        if self.replay:
            self.drop(position)

    def acked_upto(self, upto: Position) -> None:
        """Everything up to ``upto`` is acknowledged: forget its counts (the replay set is
        left as it is: a replay round drops what the cursor no longer holds)."""
        if self.counts:
            for position in [p for p in self.counts if p <= upto]:
                del self.counts[position]
