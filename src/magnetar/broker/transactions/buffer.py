"""A topic's transaction buffer: transactional messages stored at once, delivered only
after their commit marker; aborted ones never.

Why this module exists: as Pulsar's ``TopicTransactionBuffer``, a transactional SEND is
appended to the topic's managed ledger like any other entry (its metadata carries the
transaction id), and consumers must not see it before the coordinator's decision. Two
things make that so:

* the **max read position**: while a transaction is ongoing on this topic, dispatch reads
  no further than the last entry confirmed before that transaction's first append (the
  smallest such bound over ongoing transactions); ending the transaction lifts it;
* the **markers**: END_TXN_ON_PARTITION appends a commit or abort marker (an entry with
  ``marker_type`` and the transaction id, never delivered) and, on abort, remembers the id
  so dispatch skips that transaction's entries (:meth:`hides`).

State survives a restart through the ``pulsar.txn-buffer`` cursor, opened when the topic is
first added to a transaction: after each end its mark-delete position moves to the max read
position (or the last entry when nothing is ongoing) with the aborted ids still stored in
its properties; loading replays the entries after it (transactional entries make their
transaction ongoing again, markers end them).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions.entries import EntryMeta, read_meta
from magnetar.broker.transactions.ids import TXN_ABORT_MARKER, TXN_COMMIT_MARKER, TxnId
from magnetar.common.buffers import Payload
from magnetar.managed_ledger.api import InitialPosition, ManagedCursor, ManagedLedger, Position
from magnetar.metadata import keys
from magnetar.wire import frames, pb

log = logging.getLogger(__name__)

CURSOR: Final = keys.TXN_BUFFER_CURSOR
_ABORTED: Final = "aborted:"
_RECENT: Final = 10_000
"""Ended transactions remembered to refuse their late SENDs."""
_READ_BATCH: Final = 500

Validator = Callable[[TxnId, str], bool]
"""Raises BrokerError when ``txn`` may not publish to the topic (not open, not added);
True when it checked (a coordinator of this broker), False when it cannot (another's)."""


class TransactionBuffer:
    def __init__(
        self,
        ml: ManagedLedger,
        topic: str,
        *,
        on_change: Callable[[], None],
        validate: Validator | None = None,
    ) -> None:
        self.ml = ml
        self.topic = topic
        self._on_change = on_change
        self._validate = validate
        self._ongoing: dict[TxnId, Position] = {}
        """Ongoing transaction -> the last position readable before its first entry."""
        self._aborted: dict[TxnId, int] = {}
        self.committed_count = 0
        """Transactions committed on this topic since it was loaded here (its marker written)."""
        self.aborted_count = 0
        """Aborted transaction -> the ledger of its abort marker."""
        self._ended: OrderedDict[TxnId, bool] = OrderedDict()
        self._cursor: ManagedCursor | None = ml.cursors.get(CURSOR)
        self._lock = asyncio.Lock()
        self._preparing: asyncio.Task[None] | None = None

    @property
    def ongoing_count(self) -> int:
        """Transactions with entries on this topic, not yet committed or aborted."""
        return len(self._ongoing)

    @property
    def active(self) -> bool:
        """The topic has taken part in a transaction (dispatch checks entries from then on)."""
        return self._cursor is not None or bool(self._ongoing)

    @property
    def max_read_position(self) -> Position | None:
        """The last position dispatch may read; None: no limit."""
        return min(self._ongoing.values()) if self._ongoing else None

    def ongoing(self) -> list[TxnId]:
        return list(self._ongoing)

    def is_aborted(self, txn: TxnId) -> bool:
        return txn in self._aborted

    # --- taking part ----------------------------------------------------------------------

    async def prepare(self) -> None:
        """The topic is added to a transaction: open the snapshot cursor if it is not yet
        (before any transactional entry, so a restart always replays them)."""
        if self._cursor is None:
            async with self._lock:
                if self._cursor is None:
                    cursor = await self.ml.open_cursor(
                        CURSOR, initial_position=InitialPosition.LATEST
                    )
                    bound = self.max_read_position
                    if bound is not None and bound < cursor.mark_delete_position:
                        # entries were taken before it opened (a remote coordinator's
                        # transaction): a restart must replay them
                        await cursor.reset(self.ml.next_position(bound))
                    self._cursor = cursor

    def append(self, txn: TxnId, data: Payload) -> asyncio.Future[Position]:
        """Store a transactional entry (the publish path; synchronous up to the add)."""
        if txn in self._ended:
            raise BrokerError(
                pb.TransactionConflict, f"transaction {txn} has already ended on {self.topic}"
            )
        checked = self._validate is not None and self._validate(txn, self.topic)
        if self._cursor is None:
            if checked:
                raise BrokerError(
                    pb.NotAllowedError, f"{self.topic} was not added to transaction {txn}"
                )
            # the coordinator is another broker's: it could not prepare this buffer
            self._prepare_soon()
        if txn not in self._ongoing:
            self._ongoing[txn] = self.ml.last_confirmed_entry
        return self.ml.append(data)

    def _prepare_soon(self) -> None:
        if self._preparing is None or self._preparing.done():
            self._preparing = asyncio.get_running_loop().create_task(self.prepare())
            self._preparing.add_done_callback(_log_failure)

    async def end(self, txn: TxnId, commit: bool) -> None:
        """END_TXN_ON_PARTITION: write the marker, then lift the transaction's hold."""
        await self.prepare()
        async with self._lock:
            if txn in self._ended and self._ended[txn] == commit:
                return  # a retry of an end carried out already
            meta = pb.MessageMetadata(
                producer_name="__transaction_marker",
                sequence_id=0,
                publish_time=0,
                marker_type=TXN_COMMIT_MARKER if commit else TXN_ABORT_MARKER,
                txnid_most_bits=txn.most,
                txnid_least_bits=txn.least,
            )
            marker = await self.ml.add_entry(frames.encode_headers_and_payload(meta, b""))
            self._ongoing.pop(txn, None)
            if commit:
                self.committed_count += 1
            else:
                self.aborted_count += 1
                self._aborted[txn] = marker.ledger_id
            self._remember(txn, commit)
            await self._snapshot()
        self._on_change()

    def _remember(self, txn: TxnId, commit: bool) -> None:
        self._ended[txn] = commit
        while len(self._ended) > _RECENT:
            self._ended.popitem(last=False)

    async def _snapshot(self) -> None:
        cursor = self._cursor
        if cursor is None:
            return
        first_ledger = self.ml.first_position.ledger_id
        for txn in [t for t, ledger in self._aborted.items() if ledger < first_ledger]:
            del self._aborted[txn]
        target = self.max_read_position or self.ml.last_confirmed_entry
        if target <= cursor.mark_delete_position:
            return
        props = {f"{_ABORTED}{t.most}:{t.least}": ledger for t, ledger in self._aborted.items()}
        try:
            await cursor.mark_delete(target, properties=props)
        except Exception as exc:
            log.warning("%s: transaction buffer snapshot failed: %s", self.topic, exc)

    # --- dispatch -------------------------------------------------------------------------

    def hides(self, meta: EntryMeta) -> bool:
        """A marker or an aborted transaction's entry: acknowledged, never delivered."""
        if meta.marker:
            return True
        return meta.txn is not None and TxnId(*meta.txn) in self._aborted

    # --- recovery -------------------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild the state from the snapshot cursor and the entries after it."""
        cursor = self._cursor
        if cursor is None:
            return
        for key, ledger in cursor.properties.items():
            if key.startswith(_ABORTED):
                most, _, least = key[len(_ABORTED) :].partition(":")
                self._aborted[TxnId(int(most), int(least))] = int(ledger)
        previous = cursor.mark_delete_position
        lce = self.ml.last_confirmed_entry
        position = self.ml.next_position(previous)
        while lce.entry_id >= 0 and position <= lce:
            entries = await self.ml.read_entries(position, max_entries=_READ_BATCH)
            if not entries:
                break
            for entry in entries:
                meta = read_meta(entry.data)
                if meta.txn is not None:
                    txn = TxnId(*meta.txn)
                    if meta.marker in (TXN_COMMIT_MARKER, TXN_ABORT_MARKER):
                        self._ongoing.pop(txn, None)
                        if meta.marker == TXN_ABORT_MARKER:
                            self._aborted[txn] = entry.position.ledger_id
                        self._remember(txn, meta.marker == TXN_COMMIT_MARKER)
                    elif txn not in self._ongoing and txn not in self._ended:
                        self._ongoing[txn] = previous
                previous = entry.position
            position = self.ml.next_position(entries[-1].position)
        if self._ongoing or self._aborted:
            log.info(
                "%s: transaction buffer recovered: %d ongoing, %d aborted",
                self.topic,
                len(self._ongoing),
                len(self._aborted),
            )

    def in_buffer(self, txn: TxnId) -> dict[str, object]:
        """One transaction here (Pulsar's TransactionInBufferStats): the position of its first
        message while it is open, and whether it was aborted."""
        out: dict[str, object] = {"aborted": self.is_aborted(txn)}
        start = self._ongoing.get(txn)
        if start is not None:
            out["startPosition"] = str(start)
        return out

    def stats(self) -> dict[str, object]:
        limit = self.max_read_position
        return {
            "state": "Ready" if self.active else "NoSnapshot",
            "maxReadPosition": str(limit or self.ml.last_confirmed_entry),
            "ongoingTxnSize": len(self._ongoing),
            "abortedTxnCount": len(self._aborted),
        }


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("opening a transaction buffer snapshot cursor failed: %s", task.exception())
