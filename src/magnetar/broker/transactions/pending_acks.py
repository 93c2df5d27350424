"""Transactional acknowledgements of a topic's subscriptions, held until the decision.

Why this module exists: as Pulsar's ``PendingAckHandle``, an ACK carrying a transaction id
must not move the cursor yet: on commit it is applied, on abort the messages are delivered
again. A message held by one transaction cannot be acknowledged by another
(TransactionConflict), and dispatch delivers it to no other consumer meanwhile
(:meth:`holds`; the subscription's ``_drop_held``).

Held acknowledgements are durable: each is written to the metadata store (one record per
subscription and transaction, ``/transactions/pending-acks/...``, see docs/metadata.md)
before its ACK_RESPONSE. Ending a commit first marks the record committed, then applies the
acknowledgements, and deletes the record only after the cursor has had time to persist
them, so a crash in between re-applies the commit when the topic loads again; an abort
deletes the record and redelivers. Loading a topic restores open records as held.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.transactions.ids import TxnId
from magnetar.managed_ledger.api import Position
from magnetar.metadata import api, keys
from magnetar.wire import pb

log = logging.getLogger(__name__)

FORGET_AFTER_S: Final = 10.0
"""A committed record outlives its commit this long (the cursor persists within ~1 s)."""


@dataclass(slots=True)
class _Held:
    acks: list[dict[str, Any]] = field(default_factory=list)
    """``{"l": ledger, "e": entry, "s": [ack set words], "n": batch size}`` per message id."""
    cumulative: bool = False

    def positions(self) -> list[Position]:
        return [Position(a["l"], a["e"]) for a in self.acks]

    def command(self) -> pb.CommandAck:
        cmd = pb.CommandAck(
            consumer_id=0,
            ack_type=pb.CommandAck.Cumulative if self.cumulative else pb.CommandAck.Individual,
        )
        for a in self.acks:
            mid = cmd.message_id.add(ledgerId=a["l"], entryId=a["e"])
            if a.get("s"):
                mid.ack_set.extend(a["s"])
            if a.get("n"):
                mid.batch_size = a["n"]
        return cmd

    def encode(self, state: str) -> bytes:
        return json.dumps(
            {"acks": self.acks, "cumulative": self.cumulative, "state": state}
        ).encode()


SubscriptionOf = Callable[[str], Subscription | None]


class PendingAcks:
    """The held acknowledgements of one topic's subscriptions."""

    def __init__(self, store: api.MetadataStore, topic: str, subscription_of: SubscriptionOf):
        self._store = store
        self.topic = topic
        self._subscription_of = subscription_of
        self._held: dict[str, dict[TxnId, _Held]] = {}
        self._owner: dict[str, dict[Position, TxnId]] = {}
        self._lock = asyncio.Lock()
        self._timers: set[asyncio.TimerHandle] = set()

    def _key(self, subscription: str, txn: TxnId) -> str:
        return keys.pending_ack(self.topic, subscription, f"{txn.most}:{txn.least}")

    def any_held(self, subscription: str) -> bool:
        return bool(self._owner.get(subscription))

    def holds(self, subscription: str, position: Position) -> bool:
        owner = self._owner.get(subscription)
        return owner is not None and position in owner

    def held(self, subscription: str) -> dict[TxnId, list[Position]]:
        return {t: h.positions() for t, h in self._held.get(subscription, {}).items()}

    def stats(self, subscription: str) -> dict[str, object]:
        """Pulsar's TransactionPendingAckStats of a subscription: the transactions holding
        individual acknowledgements on it (as Pulsar counts them: one holding a cumulative
        acknowledgement is not counted)."""
        held = self._held.get(subscription, {}).values()
        return {"state": "Ready", "ongoingTxnSize": sum(1 for h in held if not h.cumulative)}

    def cumulative_position(self, subscription: str, txn: TxnId) -> Position | None:
        """The position ``txn`` acknowledges cumulatively on the subscription (None when it
        holds no cumulative acknowledgement there)."""
        held = self._held.get(subscription, {}).get(txn)
        if held is None or not held.cumulative or not held.acks:
            return None
        return max(held.positions())

    async def ack(self, subscription: str, txn: TxnId, cmd: pb.CommandAck) -> None:
        """Hold ``cmd``'s message ids for ``txn`` (durably) until it ends."""
        cumulative = cmd.ack_type == pb.CommandAck.Cumulative
        owner = self._owner.setdefault(subscription, {})
        acks = []
        for mid in cmd.message_id:
            position = Position(mid.ledgerId, mid.entryId)
            other = owner.get(position)
            if other is not None and other != txn:
                raise BrokerError(
                    pb.TransactionConflict,
                    f"{position} of {self.topic}/{subscription} is already acknowledged by "
                    f"transaction {other}",
                )
            entry: dict[str, Any] = {"l": position.ledger_id, "e": position.entry_id}
            if mid.ack_set:
                entry["s"] = list(mid.ack_set)
            if mid.HasField("batch_size"):
                entry["n"] = mid.batch_size
            acks.append(entry)
        async with self._lock:
            held = self._held.setdefault(subscription, {}).get(txn) or _Held()
            if held.acks and held.cumulative != cumulative:
                raise BrokerError(
                    pb.NotAllowedError, "a transaction acknowledges one way: cumulative or not"
                )
            held.cumulative = cumulative
            held.acks = held.acks + acks
            await self._store.put(self._key(subscription, txn), held.encode("open"))
            self._held[subscription][txn] = held
            for a in acks:
                owner[Position(a["l"], a["e"])] = txn

    async def end(self, subscription: str, txn: TxnId, commit: bool) -> None:
        """END_TXN_ON_SUBSCRIPTION: apply (commit) or release (abort) what ``txn`` held."""
        async with self._lock:
            held = self._held.get(subscription, {}).pop(txn, None)
            if held is None:
                return  # nothing held (or a retry of an end carried out already)
            owner = self._owner.get(subscription, {})
            for position in held.positions():
                if owner.get(position) == txn:
                    del owner[position]
            key = self._key(subscription, txn)
            sub = self._subscription_of(subscription)
            if commit:
                await self._store.put(key, held.encode("committed"))
                if sub is not None:
                    await sub.transaction_acks(held.command())
                self._forget_later(key)
            else:
                await _delete(self._store, key)
                if sub is not None:
                    sub.transaction_released(held.positions())

    def _forget_later(self, key: str) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            task = loop.create_task(_delete(self._store, key))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

        handle = loop.call_later(FORGET_AFTER_S, fire)
        self._timers.add(handle)

    async def recover(self) -> None:
        """Restore open records as held; re-apply committed ones (a crash after a commit)."""
        prefix = keys.pending_acks(self.topic)
        async for record in self._store.scan_all(prefix):
            parts = record.key[len(prefix) + 1 :].split("/")
            if len(parts) != 2:
                continue
            subscription = keys.unsegment(parts[0])
            most, _, least = keys.unsegment(parts[1]).partition(":")
            txn = TxnId(int(most), int(least))
            value = json.loads(record.value)
            held = _Held(acks=list(value["acks"]), cumulative=bool(value["cumulative"]))
            if value.get("state") == "committed":
                sub = self._subscription_of(subscription)
                if sub is not None:
                    await sub.transaction_acks(held.command())
                await _delete(self._store, record.key)
                continue
            self._held.setdefault(subscription, {})[txn] = held
            owner = self._owner.setdefault(subscription, {})
            for position in held.positions():
                owner[position] = txn

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()


async def _delete(store: api.MetadataStore, key: str) -> None:
    try:
        await store.delete(key)
    except api.NotFoundError:
        pass
