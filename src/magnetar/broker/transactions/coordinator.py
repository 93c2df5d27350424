"""A transaction coordinator: transaction ids, their states and timeouts, and its log.

Why this module exists: a transaction is only atomic if one party decides it and remembers
the decision across crashes. As Pulsar's ``MLTransactionMetadataStore``, each coordinator
(id *i*, served by the owner of partition *i* of the assign topic) writes every change of
its transactions -- opened (with its timeout), partitions added, subscriptions added, status
changed -- as one JSON entry of its own managed ledger before it acts on it. Loading the
coordinator replays that log: open transactions keep their deadline (wall clock), those
found COMMITTING or ABORTING are finished.

States: OPEN -> COMMITTING -> COMMITTED, OPEN -> ABORTING -> ABORTED. Ending a transaction
logs COMMITTING/ABORTING, then tells every partition (a marker in its transaction buffer)
and every subscription (its pending acknowledgements) through :class:`Participants`, then
logs COMMITTED/ABORTED and forgets the transaction; ending one that is already ending joins
that work (the client's retry). A transaction past its timeout is aborted by :meth:`expire`,
which also retries ends that failed (a participant not reachable at that moment).

The log is trimmed through the ``pulsar.txn-log`` cursor: its mark-delete position moves
up to the record before the oldest live transaction's first one, and carries the id
sequence in its properties, so a trimmed log never hands an id out twice.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from magnetar.broker.contracts import BrokerError
from magnetar.broker.transactions.ids import TxnId
from magnetar.managed_ledger.api import InitialPosition, ManagedCursor, ManagedLedger, Position
from magnetar.wire import pb

log = logging.getLogger(__name__)

LOG_CURSOR: Final = "pulsar.txn-log"
DEFAULT_TIMEOUT_MS: Final = 60_000
"""A NEW_TXN without a timeout gets this one (the Java client's default)."""
_READ_BATCH: Final = 500


class TxnStatus(enum.Enum):
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


@dataclass(slots=True)
class TxnMeta:
    txn: TxnId
    status: TxnStatus
    opened_ms: int
    timeout_ms: int
    first_position: Position
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    ending: asyncio.Task[None] | None = None

    @property
    def deadline_ms(self) -> int:
        return self.opened_ms + self.timeout_ms


class Participants(Protocol):
    """Where a decision is carried out (the broker's transaction service)."""

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None: ...
    async def end_on_subscription(
        self, topic: str, subscription: str, txn: TxnId, commit: bool
    ) -> None: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Coordinator ``tc_id`` over its log ``ml`` (open it with :meth:`load`)."""

    def __init__(self, tc_id: int, ml: ManagedLedger, participants: Participants) -> None:
        self.tc_id = tc_id
        self.ml = ml
        self._participants = participants
        self._txns: dict[TxnId, TxnMeta] = {}
        """Live transactions, in the order they were opened (their first records' order)."""
        self._sequence = -1
        self._records: deque[Position] = deque()
        """Log positions after the trim point, oldest first."""
        self._cursor: ManagedCursor | None = None
        self._lock = asyncio.Lock()
        self.closed = False

    # --- loading ------------------------------------------------------------------------------

    async def load(self) -> None:
        """Replay the log, then finish what was being committed or aborted."""
        cursor = await self.ml.open_cursor(LOG_CURSOR, initial_position=InitialPosition.EARLIEST)
        self._cursor = cursor
        self._sequence = int(cursor.properties.get("sequence", -1))
        lce = self.ml.last_confirmed_entry
        position = self.ml.next_position(cursor.mark_delete_position)
        while lce.entry_id >= 0 and position <= lce:
            entries = await self.ml.read_entries(position, max_entries=_READ_BATCH)
            if not entries:
                break
            for entry in entries:
                self._replay(entry.position, json.loads(bytes(entry.data)))
            position = self.ml.next_position(entries[-1].position)
        log.info(
            "transaction coordinator %d: loaded, %d live transaction(s), next id %d",
            self.tc_id,
            len(self._txns),
            self._sequence + 1,
        )
        for meta in self._txns.values():
            if meta.status in (TxnStatus.COMMITTING, TxnStatus.ABORTING):
                self._start_end(meta)

    def _replay(self, position: Position, record: dict[str, Any]) -> None:
        self._records.append(position)
        txn = TxnId(*record["t"])
        op = record["op"]
        if op == "open":
            self._sequence = max(self._sequence, txn.least)
            self._txns[txn] = TxnMeta(
                txn, TxnStatus.OPEN, int(record["ts"]), int(record["timeout"]), position
            )
            return
        meta = self._txns.get(txn)
        if meta is None:
            return  # a transaction that ended before the trim point
        if op == "partitions":
            _extend(meta.partitions, record["p"])
        elif op == "subscriptions":
            _extend(meta.subscriptions, [(t, s) for t, s in record["s"]])
        elif op == "status":
            meta.status = TxnStatus(record["s"])
            if meta.status in (TxnStatus.COMMITTED, TxnStatus.ABORTED):
                del self._txns[txn]

    # --- the log ------------------------------------------------------------------------------

    async def _log(self, txn: TxnId, op: str, **fields: Any) -> Position:
        if self.closed:
            raise BrokerError(pb.TransactionCoordinatorNotFound, f"coordinator {self.tc_id} closed")
        data = json.dumps({"t": list(txn), "op": op, **fields}).encode()
        try:
            position = await self.ml.add_entry(data)
        except Exception as exc:
            raise BrokerError(pb.PersistenceError, f"transaction log {self.tc_id}: {exc}") from exc
        self._records.append(position)
        return position

    async def _trim(self) -> None:
        """Move the log cursor up to the record before the oldest live transaction."""
        cursor = self._cursor
        if cursor is None:
            return
        low = next(iter(self._txns.values())).first_position if self._txns else None
        target: Position | None = None
        records = self._records
        while records and (low is None or records[0] < low):
            target = records.popleft()
        if target is not None and target > cursor.mark_delete_position:
            try:
                await cursor.mark_delete(target, properties={"sequence": self._sequence})
            except Exception as exc:
                log.warning("transaction log %d: trimming failed: %s", self.tc_id, exc)

    # --- commands -----------------------------------------------------------------------------

    def get(self, txn: TxnId) -> TxnMeta:
        meta = self._txns.get(txn)
        if meta is None or txn.most != self.tc_id:
            raise BrokerError(pb.TransactionNotFound, f"transaction {txn} not found")
        return meta

    def transactions(self) -> list[TxnMeta]:
        """The live transactions (open or ending), oldest first (for the admin API)."""
        return list(self._txns.values())

    def check_open(self, txn: TxnId) -> TxnMeta:
        meta = self.get(txn)
        if meta.status is not TxnStatus.OPEN:
            raise BrokerError(
                pb.InvalidTxnStatus,
                f"transaction {txn} is {meta.status.value}, expected OPEN",
            )
        return meta

    async def new_txn(self, timeout_ms: int) -> TxnId:
        timeout = timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS
        async with self._lock:
            self._sequence += 1
            txn = TxnId(self.tc_id, self._sequence)
            now = _now_ms()
            position = await self._log(txn, "open", ts=now, timeout=timeout)
            self._txns[txn] = TxnMeta(txn, TxnStatus.OPEN, now, timeout, position)
        return txn

    async def add_partitions(self, txn: TxnId, partitions: Iterable[str]) -> None:
        meta = self.check_open(txn)
        new = [p for p in dict.fromkeys(partitions) if p not in meta.partitions]
        if new:
            await self._log(txn, "partitions", p=new)
            _extend(meta.partitions, new)

    async def add_subscriptions(self, txn: TxnId, subscriptions: Iterable[tuple[str, str]]) -> None:
        meta = self.check_open(txn)
        new = [s for s in dict.fromkeys(subscriptions) if s not in meta.subscriptions]
        if new:
            await self._log(txn, "subscriptions", s=[list(s) for s in new])
            _extend(meta.subscriptions, new)

    async def end(self, txn: TxnId, commit: bool) -> None:
        """Commit or abort ``txn``; returns once every participant has carried it out."""
        meta = self.get(txn)
        target = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
        if meta.status is TxnStatus.OPEN:
            meta.status = target  # at once: a concurrent END or timeout sees it ending
            try:
                await self._log(txn, "status", s=target.value)
            except BaseException:
                meta.status = TxnStatus.OPEN
                raise
        elif meta.status is not target:
            raise BrokerError(
                pb.InvalidTxnStatus,
                f"transaction {txn} is {meta.status.value}; cannot "
                f"{'commit' if commit else 'abort'} it",
            )
        task = self._start_end(meta)
        await asyncio.shield(task)

    def _start_end(self, meta: TxnMeta) -> asyncio.Task[None]:
        if meta.ending is None or meta.ending.done():
            meta.ending = asyncio.get_running_loop().create_task(
                self._finish(meta), name=f"end txn {meta.txn}"
            )
            meta.ending.add_done_callback(_retrieve)
        return meta.ending

    async def _finish(self, meta: TxnMeta) -> None:
        commit = meta.status is TxnStatus.COMMITTING
        txn = meta.txn
        p = self._participants
        await asyncio.gather(*(p.end_on_partition(t, txn, commit) for t in meta.partitions))
        await asyncio.gather(
            *(p.end_on_subscription(t, s, txn, commit) for t, s in meta.subscriptions)
        )
        final = TxnStatus.COMMITTED if commit else TxnStatus.ABORTED
        await self._log(txn, "status", s=final.value)
        meta.status = final
        self._txns.pop(txn, None)
        log.debug("transaction %s %s", txn, final.value)
        await self._trim()

    async def expire(self) -> None:
        """Abort open transactions past their timeout; retry ends that failed."""
        now = _now_ms()
        for meta in list(self._txns.values()):
            if self.closed:
                return
            if meta.status is TxnStatus.OPEN and meta.deadline_ms <= now:
                log.info(
                    "transaction %s timed out after %d ms: aborting", meta.txn, meta.timeout_ms
                )
                try:
                    await self.end(meta.txn, commit=False)
                except Exception as exc:
                    log.warning("aborting timed-out transaction %s failed: %s", meta.txn, exc)
            elif meta.status in (TxnStatus.COMMITTING, TxnStatus.ABORTING) and (
                meta.ending is None or meta.ending.done()
            ):
                self._start_end(meta)

    def stats(self) -> dict[str, Any]:
        return {
            "coordinatorId": self.tc_id,
            "state": "Ready" if not self.closed else "Closed",
            "leastSigBits": self._sequence,
            "ongoingTxnSize": len(self._txns),
        }

    async def close(self) -> None:
        self.closed = True
        for meta in self._txns.values():
            if meta.ending is not None:
                meta.ending.cancel()
        await self.ml.close()


def _extend(target: list[Any], items: Iterable[Any]) -> None:
    for item in items:
        if item not in target:
            target.append(item)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("ending a transaction failed (retried): %s", task.exception())
