"""A subscription's acknowledgements: individual, cumulative and batch-index ACKs, and those a
transaction held.

Why this module exists: what an ACK changes is the cursor (mark-delete, individually deleted
entries, batch-index ack sets) and what the subscription remembers of the acknowledged
positions (which consumer holds them, their redelivery counts, the replay and delayed sets);
both are here, apart from the dispatch loop and the consumers' comings and goings. The
arithmetic of ack sets is ``acks``; a transaction's acknowledgements are held by
``broker.transactions.pending_acks`` and applied (commit) or released (abort) here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions import acks, dispatchers
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.delayed import DelayedDelivery
from magnetar.broker.subscriptions.dispatchers import KEY_SHARED, SHARED, TYPE_NAMES, SubType
from magnetar.broker.subscriptions.entries import EntryMetaCache
from magnetar.broker.subscriptions.redelivery import Redelivery
from magnetar.broker.subscriptions.stats import now_ms
from magnetar.managed_ledger.api import (
    InvalidPositionError,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.wire import pb

log = logging.getLogger(__name__)


class Acknowledged(Protocol):
    """What acknowledgements need from their subscription
    (:class:`magnetar.broker.subscriptions.subscription.Subscription`, which imports this
    module; this module does not import it)."""

    cursor: ManagedCursor
    consumers: list[Consumer]
    policy: dispatchers.Policy
    sub_type: SubType
    redelivery: Redelivery
    delayed: DelayedDelivery
    owner_of: dict[Position, Consumer]
    last_mark_delete_advanced_ms: int

    @property
    def ml(self) -> ManagedLedger: ...
    @property
    def meta_cache(self) -> EntryMetaCache: ...
    def wake(self) -> None: ...
    def maybe_reached_end(self) -> None: ...
    def redeliver(
        self, c: Consumer, mids: Sequence[pb.MessageIdData], *, consumer_epoch: int | None
    ) -> None: ...


class Acknowledgements:
    """The ACK handling of one subscription."""

    def __init__(self, sub: Acknowledged) -> None:
        self.sub = sub

    async def ack(self, c: Consumer, cmd: pb.CommandAck) -> None:
        if c.closed:
            # detached (a seek, a close): as in Pulsar, where the consumer is gone before the
            # cursor resets, its acks in flight must not acknowledge what the seek made pending
            raise BrokerError(pb.ConsumerNotFound, f"consumer {c} is no longer attached")
        if not cmd.message_id:
            return
        sub = self.sub
        c.last_acked_ms = now = now_ms()
        c.acked.add(acks.messages_acked(cmd.message_id))
        mark_delete = sub.cursor.mark_delete_position
        try:
            if cmd.ack_type == pb.CommandAck.Cumulative:
                await self._cumulative(c, cmd.message_id[-1])
            else:
                await self._individual(cmd.message_id)
        except InvalidPositionError as exc:
            log.debug("ack of an unknown position ignored: %s", exc)
        except ManagedLedgerError as exc:
            raise BrokerError(pb.PersistenceError, f"acknowledgement failed: {exc}") from exc
        if sub.cursor.mark_delete_position > mark_delete:
            sub.last_mark_delete_advanced_ms = now
        if sub.ml.terminated:
            sub.maybe_reached_end()
        if sub.sub_type == KEY_SHARED and any(
            x.join_read_position is not None for x in sub.consumers
        ):
            sub.wake()

    async def transaction_acks(self, cmd: pb.CommandAck) -> None:
        """Apply the acknowledgements a committed transaction held (``transactions.
        pending_acks``), whichever consumer sent them (it may be gone)."""
        sub = self.sub
        try:
            if cmd.ack_type == pb.CommandAck.Cumulative and cmd.message_id:
                position = acks.position_of(cmd.message_id[-1])
                for c in sub.consumers:
                    self.acked_upto(c, position)
                if position > sub.cursor.mark_delete_position:
                    await sub.cursor.mark_delete(position)
            else:
                await self._individual(cmd.message_id)
        except InvalidPositionError as exc:
            log.debug("transactional ack of an unknown position ignored: %s", exc)
        sub.wake()

    def transaction_released(self, positions: Sequence[Position]) -> None:
        """An aborted transaction's acknowledgements: deliver those messages again."""
        sub = self.sub
        by_consumer: dict[Consumer, list[pb.MessageIdData]] = {}
        unowned: list[Position] = []
        for position in positions:
            c = sub.owner_of.get(position)
            if c is not None:
                mid = pb.MessageIdData(ledgerId=position.ledger_id, entryId=position.entry_id)
                by_consumer.setdefault(c, []).append(mid)
            elif not sub.cursor.is_deleted(position):
                unowned.append(position)  # its consumer left, or dispatch held it back
        for c, mids in by_consumer.items():
            sub.redeliver(c, mids, consumer_epoch=None)
        if unowned:
            if sub.policy.uses_replay:
                for position in unowned:
                    meta = sub.meta_cache.lookup(position)
                    sub.redelivery.park(position, meta.key_hash if meta is not None else 0)
            else:
                sub.redelivery.rewind = True
            sub.wake()

    async def _batch_size(self, mid: pb.MessageIdData, position: Position) -> int:
        if mid.HasField("batch_size") and mid.batch_size > 0:
            return mid.batch_size
        sub = self.sub
        meta = sub.meta_cache.lookup(position)
        if meta is None:
            meta = sub.meta_cache.get(await sub.ml.read_entry(position))
        return meta.num_messages

    async def _individual(self, mids: Sequence[pb.MessageIdData]) -> None:
        cursor = self.sub.cursor
        whole: list[Position] = []
        for mid in mids:
            position = acks.position_of(mid)
            if not mid.ack_set:
                whole.append(position)
                continue
            size = await self._batch_size(mid, position)
            acked = acks.acked_indexes(mid.ack_set, size)
            if len(acked) >= size:
                whole.append(position)
                continue
            if not acked:
                continue
            await cursor.delete_batch_indexes(position, acked=acked, batch_size=size)
            if cursor.is_deleted(position):
                self._acked(position)
            else:
                self._partially_acked(position, cursor.batch_ack_set(position), size)
        if whole:
            for position in whole:
                self._acked(position)
            await cursor.delete(whole)

    async def _cumulative(self, c: Consumer, mid: pb.MessageIdData) -> None:
        sub = self.sub
        if sub.sub_type in (SHARED, KEY_SHARED):
            raise BrokerError(
                pb.NotAllowedError,
                f"cumulative acknowledgement is not allowed on {TYPE_NAMES[sub.sub_type]} "
                "subscriptions",
            )
        cursor = sub.cursor
        position = acks.position_of(mid)
        upto = position
        partial: list[int] | None = None
        size = 0
        if mid.ack_set:
            size = await self._batch_size(mid, position)
            if acks.unacked_count(mid.ack_set, size):
                partial = acks.acked_indexes(mid.ack_set, size)
                before = acks.previous_in_ledger(position)
                upto = before if before is not None else cursor.mark_delete_position
        self.acked_upto(c, upto)
        if upto > cursor.mark_delete_position:
            await cursor.mark_delete(upto)
        if partial:
            await cursor.delete_batch_indexes(position, acked=partial, batch_size=size)
            if cursor.is_deleted(position):
                self._acked(position)
            else:
                self._partially_acked(position, cursor.batch_ack_set(position), size)

    def _acked(self, position: Position) -> None:
        sub = self.sub
        c = sub.owner_of.pop(position, None)
        if c is not None:
            entry = c.pending.pop(position, None)
            if entry is not None:
                c.unacked_messages -= entry[0]
        sub.redelivery.acked(position)
        sub.delayed.discard(position)

    def _partially_acked(self, position: Position, ack_set: list[int] | None, size: int) -> None:
        c = self.sub.owner_of.get(position)
        if c is None or position not in c.pending:
            return
        unacked, key_hash = c.pending[position]
        left = acks.unacked_count(ack_set, size) if ack_set else unacked
        c.pending[position] = (left, key_hash)
        c.unacked_messages += left - unacked

    def acked_upto(self, c: Consumer, upto: Position) -> None:
        """What ``c`` holds up to ``upto`` is acknowledged (a cumulative ACK, or another
        cluster's replicated-subscription update)."""
        owner_of = self.sub.owner_of
        pending = c.pending
        for position in [p for p in pending if p <= upto]:
            unacked, _ = pending.pop(position)
            c.unacked_messages -= unacked
            if owner_of.get(position) is c:
                del owner_of[position]
        self.sub.redelivery.acked_upto(upto)
