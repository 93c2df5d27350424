"""The subscriptions of one topic (or one partition): TopicSubscriptions for the broker core.

The core creates one :class:`TopicSubscriptionsImpl` per topic it owns, passes SUBSCRIBE
commands to :meth:`~TopicSubscriptionsImpl.subscribe`, and drives the returned consumers.
Here live what several subscriptions of a topic share: the managed ledger, the entry
metadata cache, and the position arithmetic (reader start positions, seek targets, the last
message id).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from magnetar.broker.compaction import format as compaction_format
from magnetar.broker.compaction.cursor import CompactedCursor
from magnetar.broker.compaction.view import CompactedTopic
from magnetar.broker.contracts import BrokerError, ConsumerHandle, ServerCnx
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.dispatch import SnapshotSink, TxnAckHolds, TxnReadFilter
from magnetar.broker.subscriptions.dispatchers import EXCLUSIVE
from magnetar.broker.subscriptions.entries import EntryMeta, EntryMetaCache
from magnetar.broker.subscriptions.stats import now_ms
from magnetar.broker.subscriptions.subscription import REPLICATED_PROPERTY, Subscription
from magnetar.managed_ledger.api import (
    EARLIEST,
    LATEST,
    CursorAlreadyExistsError,
    CursorNotFoundError,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.metadata import keys
from magnetar.wire import pb
from magnetar.wire.errors import WireError
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)


_SYSTEM: Final = frozenset({keys.DEDUP_CURSOR, keys.TXN_BUFFER_CURSOR, keys.COMPACTION_CURSOR})
"""Cursors of the broker's own (deduplication and transaction buffer snapshots, the
compaction horizon; and the replicators' ``pulsar.repl.*``): never subscriptions."""


_LAST_VISIBLE_STEPS: Final = 1000
"""Entries a last-message-id lookup steps back over markers and aborted entries."""

_COMPACTED_TYPES: Final = frozenset({pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover})


def _starts_earliest(cmd: pb.CommandSubscribe) -> bool:
    """The consumer asked for the earliest message (a reader's start id, else the initial
    position): a compacted read then starts at the compacted ledger's first entry."""
    if cmd.start_message_rollback_duration_sec > 0:
        return False
    if cmd.HasField("start_message_id"):
        mid = MessageId.from_proto(cmd.start_message_id)
        return mid.ledger_id < 0 or mid.is_earliest
    return cmd.initialPosition == pb.CommandSubscribe.Earliest


def _is_system(name: str) -> bool:
    return name in _SYSTEM or name.startswith(keys.REPLICATOR_CURSOR_PREFIX)


def _check_not_reserved(name: str) -> None:
    if _is_system(name):
        raise BrokerError(pb.NotAllowedError, f"Subscription name {name!r} is reserved")


class TopicSubscriptionsImpl:
    """Implements :class:`magnetar.broker.contracts.TopicSubscriptions`."""

    def __init__(
        self,
        topic: TopicName,
        managed_ledger: ManagedLedger,
        compacted: CompactedTopic | None = None,
        precise_flow_control: bool = False,
    ) -> None:
        self.topic = topic
        self.managed_ledger = managed_ledger
        self.compacted = compacted
        """The topic's compacted view (read_compacted subscriptions read through it)."""
        self.precise_flow_control = precise_flow_control
        """Pulsar's preciseDispatcherFlowControl (``dispatchers.SingleActive``)."""
        self.meta_cache = EntryMetaCache()
        self.txn_buffer: TxnReadFilter | None = None
        """The topic's transaction buffer when transactions are enabled."""
        self.txn_acks: TxnAckHolds | None = None
        """The topic's pending transactional acknowledgements when transactions are enabled."""
        self.snapshots: SnapshotSink | None = None
        """The topic's replicated-subscriptions controller, when the broker enables them
        (``broker.replicated_subscriptions``): it gets the snapshot markers dispatch reads."""
        self._subs: dict[str, Subscription] = {}
        self._lock = asyncio.Lock()

    # -- TopicSubscriptions ---------------------------------------------------------------

    async def subscribe(self, cmd: pb.CommandSubscribe, cnx: ServerCnx) -> ConsumerHandle:
        name = cmd.subscription
        if not name:
            raise BrokerError(pb.UnknownError, "a subscription name is required")
        _check_not_reserved(name)
        if cmd.read_compacted and cmd.subType not in _COMPACTED_TYPES:
            raise BrokerError(
                pb.NotAllowedError,
                "readCompacted only allowed on failover or exclusive subscriptions",
            )
        async with self._lock:
            sub = self._subs.get(name) or self._recovered(name)
            created = sub is None
            if sub is None:
                sub = await self._new_subscription(cmd)
            if not sub.consumers:
                self._read_compacted(sub, cmd, created=created)
            if cmd.replicate_subscription_state and sub.durable and self.snapshots is not None:
                await sub.set_replicated(True)  # (a consumer without the flag leaves it)
                self.snapshots.ensure_running()
            consumer = Consumer(subscription=sub, cnx=cnx, cmd=cmd)
            try:
                await sub.add_consumer(consumer, cmd.subType)
            except BrokerError:
                if created and not sub.durable:
                    await sub.close(delete_cursor=True)
                raise
        return consumer

    def names(self) -> list[str]:
        durable = (
            n for n, c in self.managed_ledger.cursors.items() if c.durable and not _is_system(n)
        )
        return sorted(set(self._subs) | set(durable))

    async def create(self, name: str, *, start: Any) -> None:
        _check_not_reserved(name)
        async with self._lock:
            if name in self._subs or name in self.managed_ledger.cursors:
                raise BrokerError(pb.NotAllowedError, f"Subscription {name} already exists")
            initial, position = _start_of(start)
            try:
                cursor = await self.managed_ledger.open_cursor(name, initial_position=initial)
                if position is not None:
                    await cursor.reset(self.position_for_message_id(position))
            except CursorAlreadyExistsError:
                raise BrokerError(
                    pb.NotAllowedError, f"Subscription {name} already exists"
                ) from None
            except ManagedLedgerError as exc:
                raise BrokerError(pb.PersistenceError, f"creating {name}: {exc}") from exc
            self._subs[name] = self._wrap(name, cursor, durable=True)

    async def delete(self, name: str, *, force: bool = False) -> None:
        sub = self._subs.get(name) or self._recovered(name)
        if sub is None:
            if name in self.managed_ledger.cursors:  # a reader's: just drop it
                await self._delete_cursor(name)
                return
            raise BrokerError(pb.SubscriptionNotFound, f"Subscription {name} not found")
        if sub.consumers and not force:
            raise BrokerError(
                pb.ConsumerBusy, f"Subscription {name} has active connected consumers"
            )
        await sub.close(delete_cursor=True, send_close=True)

    async def reset(
        self, name: str, *, message_id: MessageId | None = None, publish_time: int | None = None
    ) -> None:
        sub = self._subs.get(name) or self._recovered(name)
        if sub is None:
            raise BrokerError(pb.SubscriptionNotFound, f"Subscription {name} not found")
        cmd = pb.CommandSeek(consumer_id=0, request_id=0)
        if message_id is not None:
            message_id.fill(cmd.message_id)
        elif publish_time is not None:
            cmd.message_publish_time = publish_time
        else:
            raise BrokerError(pb.UnknownError, "reset needs a message id or a publish time")
        await sub.seek(cmd)

    def on_entries_added(self) -> None:
        for sub in self._subs.values():
            sub.wake()

    async def close_all(self, *, reason: str) -> None:
        subs = list(self._subs.values())
        if subs:
            log.info("closing %d subscription(s) of %s: %s", len(subs), self.topic, reason)
        for sub in subs:
            await sub.close(delete_cursor=not sub.durable, send_close=True)

    def stats(self) -> Mapping[str, Mapping[str, Any]]:
        for name in self.names():
            if name not in self._subs:
                self._recovered(name)
        return {name: sub.stats() for name, sub in sorted(self._subs.items())}

    def subscription(self, name: str) -> Subscription | None:
        """The subscription ``name`` (a recovered durable cursor is wrapped), or None."""
        return self._subs.get(name) or self._recovered(name)

    # -- replicated subscriptions (``broker.replicated_subscriptions``) ---------------------

    def replicated(self) -> list[tuple[str, Position]]:
        """The replicated subscriptions and their mark-delete positions."""
        out = []
        for name in self.names():
            sub = self.subscription(name)
            if sub is not None and sub.replicated:
                out.append((name, sub.cursor.mark_delete_position))
        return out

    async def move_replicated(self, name: str, position: Position) -> None:
        """Another cluster's update: move replicated subscription ``name`` to ``position``,
        creating it (replicated, as Pulsar does) when it does not exist. A subscription of
        that name that is not replicated here is left alone."""
        async with self._lock:
            sub = self.subscription(name)
            if sub is None:
                try:
                    cursor = await self.managed_ledger.open_cursor(
                        name,
                        initial_position=InitialPosition.EARLIEST,
                        properties={REPLICATED_PROPERTY: 1},
                    )
                except ManagedLedgerError as exc:
                    raise BrokerError(pb.PersistenceError, f"creating {name}: {exc}") from exc
                sub = self._subs[name] = self._wrap(name, cursor, durable=True)
                log.info("%s: replicated subscription %s created by an update", self.topic, name)
        if not sub.replicated:
            log.info("%s: subscription %s is not replicated here: update ignored", self.topic, name)
            return
        await sub.move_to(position)

    # -- for subscriptions ------------------------------------------------------------------

    def forget(self, sub: Subscription) -> None:
        if self._subs.get(sub.name) is sub:
            del self._subs[sub.name]

    def _read_compacted(
        self, sub: Subscription, cmd: pb.CommandSubscribe, *, created: bool
    ) -> None:
        """The first consumer of a subscription says whether it reads the compacted view
        (as its type: a subscription without consumers takes the next one's)."""
        cursor = sub.cursor
        base = cursor.inner if isinstance(cursor, CompactedCursor) else cursor
        if not (cmd.read_compacted and self.compacted is not None):
            sub.cursor = base
            return
        from_earliest = _starts_earliest(cmd) and (created or not sub.durable)
        start: Position | None = None
        if not sub.durable and cmd.HasField("start_message_id") and not from_earliest:
            mid = MessageId.from_proto(cmd.start_message_id)
            start = None if mid.is_latest else Position(mid.ledger_id, mid.entry_id)
        compacted = CompactedCursor(base, self.compacted, from_earliest=from_earliest)
        if start is not None and start < base.read_position:
            horizon = self.compacted.horizon
            if horizon is not None and start <= horizon:
                compacted.seek(start)
        sub.cursor = compacted

    def position_for_message_id(self, mid: MessageId, *, compacted: bool = False) -> Position:
        """Where a SEEK (or a subscription created at a message id) starts reading; for a
        compacted read, a position at or before the horizon as it is (the compacted ledger
        holds entries the topic's ledgers may no longer have)."""
        ml = self.managed_ledger
        horizon = self.compacted.horizon if compacted and self.compacted is not None else None
        if mid.ledger_id < 0 or mid.is_earliest:
            return EARLIEST if horizon is not None else ml.first_position
        if horizon is not None and not mid.is_latest:
            position = Position(mid.ledger_id, mid.entry_id)
            if position <= horizon:
                return position
        after_last = ml.next_position(ml.last_confirmed_entry)
        if mid.is_latest:
            return after_last
        position = Position(mid.ledger_id, mid.entry_id)
        if position > after_last:
            return after_last
        return max(position, ml.first_position)

    async def position_for_publish_time(
        self, publish_time: int, *, compacted: bool = False
    ) -> Position:
        """The first entry published at or after ``publish_time`` (ms), by binary search over
        the stored positions (one metadata read per probe); after the last entry if none.
        For a compacted read the compacted ledger is searched first."""
        view = self.compacted.current if compacted and self.compacted is not None else None
        if view is not None:
            try:
                found = await view.find_publish_time(publish_time)
            except (ManagedLedgerError, WireError) as exc:
                raise BrokerError(
                    pb.UnknownError, f"searching the compacted ledger: {exc}"
                ) from exc
            if found is not None:
                return found
        ml = self.managed_ledger
        lce = ml.last_confirmed_entry
        first = ml.first_position
        after_last = ml.next_position(lce)
        if lce.entry_id < 0 and not any(i.entries for i in ml.ledgers()):
            return after_last
        spans: list[tuple[int, int, int]] = []  # (ledger, first entry, last entry)
        for info in ml.ledgers():
            if info.ledger_id < first.ledger_id or info.ledger_id > lce.ledger_id:
                continue
            lo = first.entry_id if info.ledger_id == first.ledger_id else 0
            hi = lce.entry_id if info.ledger_id == lce.ledger_id else info.entries - 1
            if hi >= lo:
                spans.append((info.ledger_id, lo, hi))
        if lce.entry_id >= 0 and not any(s[0] == lce.ledger_id for s in spans):
            lo = first.entry_id if first.ledger_id == lce.ledger_id else 0
            spans.append((lce.ledger_id, lo, lce.entry_id))
        starts: list[int] = []
        total = 0
        for _, lo, hi in spans:
            starts.append(total)
            total += hi - lo + 1

        def at(index: int) -> Position:
            k = bisect.bisect_right(starts, index) - 1
            ledger, lo, _ = spans[k]
            return Position(ledger, lo + index - starts[k])

        lo_i, hi_i = 0, total
        while lo_i < hi_i:
            mid = (lo_i + hi_i) // 2
            meta = await self.entry_meta(at(mid))
            if meta.publish_time >= publish_time:
                hi_i = mid
            else:
                lo_i = mid + 1
        return at(lo_i) if lo_i < total else after_last

    async def entry_meta(self, position: Position) -> EntryMeta:
        meta = self.meta_cache.lookup(position)
        if meta is None:
            try:
                meta = self.meta_cache.get(await self.managed_ledger.read_entry(position))
            except ManagedLedgerError as exc:
                raise BrokerError(pb.UnknownError, f"reading entry {position}: {exc}") from exc
        return meta

    async def last_message_id(self, *, read_compacted: bool = False) -> MessageId:
        """The last stored message: (ledger, -1) when the topic is empty; the last batch
        index when the last entry is a batch. For a compacted read, when compaction has
        seen every entry (or none is stored), the last entry of the compacted ledger
        (-1:-1 when it has none), as Pulsar answers: the topic's last message may be a
        tombstone the compacted view does not have."""
        lce = self.managed_ledger.last_confirmed_entry
        partition = self.topic.partition_index
        if read_compacted and self.compacted is not None:
            horizon = self.compacted.horizon
            if lce.entry_id < 0 or (horizon is not None and lce <= horizon):
                return await self._last_compacted(partition)
        txn = self.txn_buffer
        if txn is not None and txn.active:
            # as Pulsar: no further than an open transaction lets readers, and never a
            # transaction marker or an aborted entry (a reader would wait for it forever)
            limit = txn.max_read_position
            if limit is not None and limit < lce:
                lce = limit
            lce = await self._last_visible(txn.hides, lce)
        elif lce.entry_id >= 0 and lce >= self.managed_ledger.first_position:
            # never a marker either (replicated subscriptions' snapshots, updates...)
            lce = await self._last_visible(_is_marker, lce)
        if lce.entry_id < 0:
            return MessageId(lce.ledger_id, -1, partition)
        meta = await self.entry_meta(lce)
        batch_index = meta.num_messages - 1 if meta.is_batch else -1
        return MessageId(lce.ledger_id, lce.entry_id, partition, batch_index)

    async def _last_visible(
        self, hides: Callable[[EntryMeta], bool], position: Position
    ) -> Position:
        """``position`` or the nearest entry before it in its ledger that dispatch would
        deliver (``(ledger, -1)`` when none is); at most ``_LAST_VISIBLE_STEPS`` back."""
        first = self.managed_ledger.first_position
        for _ in range(_LAST_VISIBLE_STEPS):
            if position.entry_id < 0 or position < first:
                break
            if not hides(await self.entry_meta(position)):
                return position
            position = Position(position.ledger_id, position.entry_id - 1)
        else:
            return position
        return Position(position.ledger_id, -1)

    async def _last_compacted(self, partition: int) -> MessageId:
        view = self.compacted.current if self.compacted is not None else None
        try:
            entry = await view.last_entry() if view is not None else None
            if entry is None:
                return MessageId(-1, -1, partition)
            batch_index = compaction_format.last_batch_index(entry.data)
        except (ManagedLedgerError, WireError) as exc:
            raise BrokerError(pb.UnknownError, f"reading the compacted ledger: {exc}") from exc
        p = entry.position
        return MessageId(p.ledger_id, p.entry_id, partition, batch_index)

    # -- internals --------------------------------------------------------------------------

    def _wrap(self, name: str, cursor: ManagedCursor, *, durable: bool) -> Subscription:
        return Subscription(
            owner=self, name=name, cursor=cursor, sub_type=EXCLUSIVE, durable=durable
        )

    def _recovered(self, name: str) -> Subscription | None:
        """A durable cursor the managed ledger recovered, wrapped on first use."""
        cursor = self.managed_ledger.cursors.get(name)
        if cursor is None or not cursor.durable or _is_system(name):
            return None
        sub = self._subs[name] = self._wrap(name, cursor, durable=True)
        return sub

    async def _new_subscription(self, cmd: pb.CommandSubscribe) -> Subscription:
        name = cmd.subscription
        ml = self.managed_ledger
        try:
            if cmd.durable:
                initial = (
                    InitialPosition.EARLIEST
                    if cmd.initialPosition == pb.CommandSubscribe.Earliest
                    else InitialPosition.LATEST
                )
                cursor = await ml.open_cursor(name, initial_position=initial)
            else:
                start = await self._reader_start(cmd)
                cursor = await ml.new_non_durable_cursor(name, start, inclusive=True)
        except ManagedLedgerError as exc:
            raise BrokerError(pb.PersistenceError, f"opening subscription {name}: {exc}") from exc
        sub = self._subs[name] = self._wrap(name, cursor, durable=cmd.durable)
        return sub

    async def _reader_start(self, cmd: pb.CommandSubscribe) -> Position:
        ml = self.managed_ledger
        fallback = EARLIEST if cmd.initialPosition == pb.CommandSubscribe.Earliest else LATEST
        if cmd.start_message_rollback_duration_sec > 0:
            since = now_ms() - cmd.start_message_rollback_duration_sec * 1000
            return await self.position_for_publish_time(since)
        if not cmd.HasField("start_message_id"):
            return fallback
        mid = MessageId.from_proto(cmd.start_message_id)
        if mid.ledger_id < 0 or mid.is_earliest:
            return EARLIEST
        if mid.is_latest:
            return LATEST
        position = Position(mid.ledger_id, mid.entry_id)
        if position > ml.last_confirmed_entry:
            return fallback  # past the end (e.g. an id from a deleted topic)
        return max(position, ml.first_position)

    async def _delete_cursor(self, name: str) -> None:
        try:
            await self.managed_ledger.delete_cursor(name)
        except CursorNotFoundError:
            pass
        except ManagedLedgerError as exc:
            raise BrokerError(pb.PersistenceError, f"deleting {name}: {exc}") from exc


def _is_marker(meta: EntryMeta) -> bool:
    return bool(meta.marker)


def _start_of(start: Any) -> tuple[InitialPosition, MessageId | None]:
    """Admin ``create`` start: InitialPosition, "earliest"/"latest", a Position or MessageId."""
    if isinstance(start, InitialPosition):
        return start, None
    if isinstance(start, str):
        return InitialPosition(start.lower()), None
    if isinstance(start, MessageId):
        return InitialPosition.LATEST, start
    if isinstance(start, Position):
        return InitialPosition.LATEST, MessageId(start.ledger_id, start.entry_id)
    return InitialPosition.LATEST, None
