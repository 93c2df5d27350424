"""Dispatch policies: how a subscription of each type spreads entries over its consumers.

The subscription owns the cursor, the redelivery (replay) set (``redelivery``) and the read
loop (``dispatch``); a policy answers three questions for it:

* ``budget()`` -- how many entries to read now (from the permits of the consumers that can
  take messages), or which connections to wait for when the consumers with permits are not
  writable;
* ``replay_candidates()`` -- which entries of the replay set to fetch now;
* ``route()`` -- who gets each entry read (or that it waits: back to the replay set).

Exclusive and Failover share :class:`SingleActive` (one active consumer; redelivery rewinds
the cursor, as Pulsar's single-active dispatcher does). Shared round-robins entries over the
consumers with permits; Key_Shared sends each key's entries to the consumer owning its hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, TypeAlias

from magnetar.broker.contracts import ServerCnx
from magnetar.broker.subscriptions import selectors
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.delayed import DelayedDelivery
from magnetar.broker.subscriptions.entries import EntryMeta, EntryMetaCache
from magnetar.broker.subscriptions.redelivery import Redelivery
from magnetar.broker.subscriptions.stats import now_ms
from magnetar.managed_ledger.api import Entry, ManagedCursor, Position
from magnetar.wire import pb


class Subscription(Protocol):
    """What a dispatch policy needs from its subscription
    (:class:`magnetar.broker.subscriptions.subscription.Subscription`, which imports this
    module; this module does not import it)."""

    cursor: ManagedCursor
    consumers: list[Consumer]
    redelivery: Redelivery
    delayed: DelayedDelivery
    avg_messages_per_entry: float

    @property
    def partition_index(self) -> int: ...
    @property
    def meta_cache(self) -> EntryMetaCache: ...
    def send(self, c: Consumer, entry: Entry, meta: EntryMeta) -> None: ...
    def next_unacked_position(self) -> Position: ...


MAX_READ_ENTRIES: Final = 100
"""Entries read per round (Pulsar's dispatcherMaxReadBatchSize)."""

SubType: TypeAlias = pb.CommandSubscribe.SubType.ValueType
EXCLUSIVE: Final = pb.CommandSubscribe.Exclusive
SHARED: Final = pb.CommandSubscribe.Shared
FAILOVER: Final = pb.CommandSubscribe.Failover
KEY_SHARED: Final = pb.CommandSubscribe.Key_Shared
TYPE_NAMES: Final = {EXCLUSIVE: "Exclusive", SHARED: "Shared", FAILOVER: "Failover",
                     KEY_SHARED: "Key_Shared"}  # fmt: skip


def can_take(c: Consumer) -> bool:
    return c.permits > 0 and not c.closed and c.cnx.is_writable()


def entries_for(permits: int, avg_messages: float) -> int:
    """Entries to read for ``permits`` messages at ``avg_messages`` messages per entry."""
    return max(1, min(MAX_READ_ENTRIES, int(permits / max(avg_messages, 1.0))))


class Policy:
    """Base of the dispatch policies (see the module docstring)."""

    sub_type: SubType
    uses_replay = True

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub

    def add(self, consumer: Consumer) -> None:
        """Attach (raise selectors.AssignError when the consumer cannot be placed)."""

    def remove(self, consumer: Consumer) -> None: ...

    def budget(self) -> tuple[int, list[ServerCnx]]:
        """(entries to read, connections to wait for when nothing can be read)."""
        total = 0
        blocked: list[ServerCnx] = []
        for c in self.sub.consumers:
            if c.permits > 0 and not c.closed:
                if c.cnx.is_writable():
                    total += c.permits
                else:
                    blocked.append(c.cnx)
        if total <= 0:
            return 0, blocked
        return entries_for(total, self.sub.avg_messages_per_entry), []

    def replay_candidates(self, budget: int) -> list[Position]:
        replay = self.sub.redelivery.replay
        if len(replay) <= budget:
            return sorted(replay)
        return sorted(replay)[:budget]

    def route(self, entries: Sequence[tuple[Entry, EntryMeta]], *, replay: bool) -> int:
        """Send or park each entry; returns how many were sent."""
        raise NotImplementedError

    def extra_stats(self, consumer: Consumer) -> dict[str, object]:
        return {}


class SingleActive(Policy):
    """Exclusive and Failover: every entry to the one active consumer.

    How much a round reads follows Pulsar's preciseDispatcherFlowControl. Off (``precise``
    False, Pulsar's default) a round reads one entry per permit, up to
    :data:`MAX_READ_ENTRIES`, and sends everything read: with batches, the consumer gets
    more messages than it asked for and its permits go below zero until its FLOWs catch up,
    so a consumer with a small receiver queue still gets many batches per round trip. On, a
    round reads the permits over the average messages per entry and stops at the permits.
    """

    uses_replay = False

    def __init__(self, sub: Subscription, sub_type: SubType, *, precise: bool = False) -> None:
        super().__init__(sub)
        self.sub_type = sub_type
        self.precise = precise
        self.active: Consumer | None = None

    def budget(self) -> tuple[int, list[ServerCnx]]:
        c = self.active
        if c is None or c.closed or c.permits <= 0:
            return 0, []
        if not c.cnx.is_writable():
            return 0, [c.cnx]
        if not self.precise:
            return min(MAX_READ_ENTRIES, c.permits), []
        return entries_for(c.permits, self.sub.avg_messages_per_entry), []

    def replay_candidates(self, budget: int) -> list[Position]:
        return []

    def route(self, entries: Sequence[tuple[Entry, EntryMeta]], *, replay: bool) -> int:
        c = self.active
        if c is None:
            for entry, meta in entries:
                self.sub.redelivery.park(entry.position, meta.key_hash)
            return 0
        send = self.sub.send
        sent = 0
        precise = self.precise
        for entry, meta in entries:
            if precise and c.permits <= 0:
                # read ahead of the permits (batches were bigger than the average guessed):
                # the rest is read again once the consumer asks for more
                self.sub.cursor.seek(entry.position)
                break
            send(c, entry, meta)
            sent += 1
        return sent

    def pick(self) -> Consumer | None:
        return selectors.pick_active(self.sub.consumers, partition_index=self.sub.partition_index)


class SharedPolicy(Policy):
    """Shared: round-robin per entry over the consumers with permits; delayed delivery."""

    sub_type = SHARED

    def __init__(self, sub: Subscription) -> None:
        super().__init__(sub)
        self.rr: selectors.RoundRobin[Consumer] = selectors.RoundRobin()

    def route(self, entries: Sequence[tuple[Entry, EntryMeta]], *, replay: bool) -> int:
        sub = self.sub
        consumers = sub.consumers
        sent = 0
        now = 0
        for entry, meta in entries:
            if meta.deliver_at is not None:
                now = now or now_ms()
                if meta.deliver_at > now:
                    sub.delayed.add(entry.position, meta.deliver_at)
                    continue
            c = self.rr.pick(consumers, can_take)
            if c is None:
                sub.redelivery.park(entry.position, meta.key_hash)
                continue
            sub.send(c, entry, meta)
            sent += 1
        return sent


class KeySharedPolicy(Policy):
    """Key_Shared: each entry to the consumer owning its key's hash slot, in key order.

    An entry waits (in the replay set) when its consumer has no permits or is not writable,
    and so does every later entry of the same key. A consumer that joins while messages are
    in flight (its hash range was taken from others who may still hold older messages of
    those keys) only gets entries read before it joined until everything before that point
    is acknowledged -- Pulsar's "recently joined consumers" rule; allowOutOfOrderDelivery
    consumers skip it.

    Entries are routed whole (a batch is never split over consumers): by the entry's ordering
    or partition key, else by its first message's key. Producers feeding Key_Shared
    subscriptions batch by key (BatchingType.KeyBased), as with Pulsar, whose broker routes
    batches the same way.
    """

    sub_type = KEY_SHARED

    def __init__(self, sub: Subscription, mode: int) -> None:
        super().__init__(sub)
        self.mode = mode
        self.owners: selectors.KeyHashOwners[Consumer] = selectors.KeyHashOwners(
            sticky=mode == pb.STICKY
        )

    def add(self, consumer: Consumer) -> None:
        self.owners.add(consumer, consumer.hash_ranges)
        others = [c for c in self.sub.consumers if c is not consumer]
        if others and not consumer.allow_out_of_order:
            consumer.join_read_position = self.sub.cursor.read_position

    def remove(self, consumer: Consumer) -> None:
        self.owners.remove(consumer)

    def select(self, key_hash: int) -> Consumer | None:
        return self.owners.select(key_hash)

    def lift_join_restrictions(self) -> None:
        """Free recently joined consumers once everything before their join is acked."""
        waiting = [c for c in self.sub.consumers if c.join_read_position is not None]
        if not waiting:
            return
        acked_to = self.sub.next_unacked_position()
        for c in waiting:
            if c.join_read_position is not None and acked_to >= c.join_read_position:
                c.join_read_position = None

    def budget(self) -> tuple[int, list[ServerCnx]]:
        self.lift_join_restrictions()
        return super().budget()

    def _blocked(self, c: Consumer | None, position: Position, spent: dict[int, int]) -> bool:
        if c is None or c.closed:
            return True
        if c.permits - spent.get(id(c), 0) <= 0 or not c.cnx.is_writable():
            return True
        join = c.join_read_position
        return join is not None and position >= join

    def replay_candidates(self, budget: int) -> list[Position]:
        replay = self.sub.redelivery.replay
        lookup = self.sub.meta_cache.lookup
        blocked: set[int] = set()
        spent: dict[int, int] = {}
        out: list[Position] = []
        for position in sorted(replay):
            key_hash = replay[position]
            if key_hash in blocked:
                continue
            c = self.select(key_hash)
            if self._blocked(c, position, spent):
                blocked.add(key_hash)
                continue
            assert c is not None
            meta = lookup(position)
            spent[id(c)] = spent.get(id(c), 0) + (meta.num_messages if meta else 1)
            out.append(position)
            if len(out) >= budget:
                break
        return out

    def route(self, entries: Sequence[tuple[Entry, EntryMeta]], *, replay: bool) -> int:
        sub = self.sub
        park = sub.redelivery.park
        waiting = sub.redelivery.replay_hashes
        blocked: set[int] = set()
        no_spend: dict[int, int] = {}
        sent = 0
        for entry, meta in entries:
            h = meta.key_hash
            if h in blocked or (not replay and waiting.get(h)):
                # an older entry of this key waits: this one waits behind it
                park(entry.position, h)
                continue
            c = self.select(h)
            if self._blocked(c, entry.position, no_spend):
                blocked.add(h)
                park(entry.position, h)
                continue
            assert c is not None
            sub.send(c, entry, meta)
            sent += 1
        return sent

    def extra_stats(self, consumer: Consumer) -> dict[str, object]:
        out: dict[str, object] = {"keyHashRanges": self.owners.ranges_of(consumer)}
        if consumer.join_read_position is not None:
            out["readPositionWhenJoining"] = str(consumer.join_read_position)
        return out


def make_policy(
    sub: Subscription, sub_type: SubType, *, key_shared_mode: int, precise: bool = False
) -> Policy:
    """``precise``: Pulsar's preciseDispatcherFlowControl (:class:`SingleActive`)."""
    if sub_type == SHARED:
        return SharedPolicy(sub)
    if sub_type == KEY_SHARED:
        return KeySharedPolicy(sub, key_shared_mode)
    return SingleActive(sub, sub_type, precise=precise)
