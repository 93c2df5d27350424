"""Geo-replication: a persistent topic's messages copied to the other clusters its namespace
lists in ``replication_clusters`` (Pulsar's ``PersistentReplicator``; docs/geo-replication.md).

Why this module exists: a replicated topic must reach every other cluster of its namespace
exactly once, in order, through brokers on either side going away and a remote cluster being
down for hours. One :class:`Replicator` per remote cluster and topic does it:

* it reads the topic's managed ledger from a durable cursor ``pulsar.repl.<remote>``, so what
  is still to copy survives restarts and ownership moves, and holds the ledgers back until
  copied (the backlog builds while the remote is down, then drains);
* it is a *client of the remote cluster* through the client layer (``client.handles.Producer``
  over a ``client.pool.ConnectionPool`` for the remote's ``brokerServiceUrl``, with the
  broker's client TLS and credentials): the producer ``pulsar.repl.<local cluster>`` looks the
  topic up there, follows ownership moves and resends what had no receipt;
* each entry goes as stored (a batch stays one entry), with ``replicated_from`` set to the
  local cluster and the source position in the ``__MSG_PROP_REPL_SOURCE_POSITION`` property;
  its SEND's sequence id is derived from that position (:func:`sequence_id`), so it only
  grows, and the receiving broker's deduplication (on for every replicated topic) drops a
  resend after a crash of either side;
* an entry that carries ``replicated_from`` (it came from another cluster) and the broker's
  transaction markers are never copied: no loops; nor one whose ``replicate_to`` (the
  producer's per-message replication clusters, ``__local__`` to disable replication; a
  replicated-subscription marker's own cluster list) leaves this remote out;
* as dispatch, it reads no further than an open transaction's first entry, skips aborted
  transactions' entries and sends committed ones as plain messages;
* it keeps reading and sending while earlier sends wait for their receipts, up to a window
  of entries in flight (Pulsar's ``replicationProducerQueueSize``), and the cursor moves only
  over the contiguous prefix of entries whose receipts came back (receipts come in order).

:class:`TopicReplication` holds a topic's replicators, started and stopped as the namespace's
(or the topic's) ``replication_clusters`` change; :class:`RemoteClusters` the connection
pools to the other clusters, from their records in the metadata store (``/admin/clusters``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from magnetar import __version__
from magnetar.broker.subscriptions.entries import EntryMeta, read_meta, split_entry
from magnetar.client import connection, handles, pool
from magnetar.common.backoff import Backoff
from magnetar.managed_ledger.api import (
    Entry,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)
from magnetar.metadata import api, keys
from magnetar.security import tls
from magnetar.security.config import SecurityConfig
from magnetar.wire import frames, markers, pb
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

PREFIX: Final = keys.REPLICATOR_CURSOR_PREFIX
"""``pulsar.repl.``: replicators' cursors and producers are named with it (as in Pulsar)."""
SOURCE_POSITION: Final = "__MSG_PROP_REPL_SOURCE_POSITION"
"""The message property carrying ``<ledger>:<entry>`` of the entry in the source cluster."""
READ_BATCH: Final = 100
"""Entries read at a time (fewer when the window has less room)."""
WINDOW: Final = 1000
"""Entries in flight by default: read, and not yet receipted or skipped in order (Pulsar's
``replicationProducerQueueSize``; the broker's ``replication_producer_queue_size``)."""
CLOSE_TIMEOUT_S: Final = 5.0
"""How long stopping a replicator waits for the remote to close its producer."""
TXN_POLL_S: Final = 0.2
"""How often a replicator held by an open transaction looks again."""
_ENTRY_BITS: Final = 32


def cursor_name(remote: str) -> str:
    return f"{PREFIX}{remote}"


def producer_name(source: str) -> str:
    """The name of the producer replicating from cluster ``source`` (one per source cluster
    and topic, whichever broker of the source serves the topic)."""
    return f"{PREFIX}{source}"


def is_replicator(name: str) -> bool:
    return name.startswith(PREFIX)


def sequence_id(position: Position) -> int:
    """A SEND sequence id that grows with the source position (entry ids stay below 2**32:
    a ledger rolls over long before)."""
    return (position.ledger_id << _ENTRY_BITS) | position.entry_id


def replayed_sequence_id(meta: pb.MessageMetadata) -> tuple[str, int] | None:
    """For the receiving side's deduplication replay: (producer name, sequence id) under
    which a replicated entry was stored, or None for an entry not replicated."""
    if not meta.HasField("replicated_from"):
        return None
    for prop in meta.properties:
        if prop.key == SOURCE_POSITION:
            try:
                return producer_name(meta.replicated_from), sequence_id(Position.parse(prop.value))
            except ValueError:
                return None
    return None


def remote_clusters(effective: Mapping[str, Any], local: str) -> list[str]:
    """The clusters other than ``local`` that a topic's effective policies replicate to."""
    clusters = effective.get("replication_clusters")
    if not isinstance(clusters, list):
        return []
    return sorted({c for c in clusters if isinstance(c, str) and c and c != local})


class Transactions(Protocol):
    """What a replicator asks the topic's transaction buffer (``broker.transactions.buffer``),
    as dispatch does: how far it may read, and which entries are never delivered (markers,
    aborted transactions' entries)."""

    @property
    def active(self) -> bool: ...
    @property
    def max_read_position(self) -> Position | None: ...
    def hides(self, meta: EntryMeta) -> bool: ...


def _no_transactions() -> Transactions | None:
    return None


# --- the remote clusters -------------------------------------------------------------------------


class RemoteClusters:
    """Connection pools to the other clusters of the instance, one per cluster, opened from
    the cluster's record in this cluster's metadata store (a pulsar+ssl:// URL when the
    broker's client TLS is on and the record has one) with the broker's client credentials."""

    def __init__(self, store: api.MetadataStore, security: SecurityConfig) -> None:
        self.store = store
        self.security = security
        self._pools: dict[str, tuple[str, pool.ConnectionPool]] = {}
        self._ids = itertools.count(1)

    def next_producer_id(self) -> int:
        """Producer ids are per connection, and replicators of many topics share one."""
        return next(self._ids)

    async def url_of(self, cluster: str) -> str | None:
        record = await self.store.get(keys.cluster(cluster))
        if record is None:
            return None
        data = json.loads(record.value) if record.value else {}
        if self.security.broker_client_tls and data.get("brokerServiceUrlTls"):
            return str(data["brokerServiceUrlTls"])
        url = data.get("brokerServiceUrl")
        return str(url) if url else None

    async def pool(self, cluster: str) -> pool.ConnectionPool | None:
        """The pool for ``cluster`` (None while its record has no broker service URL); a
        new one when the URL changed."""
        url = await self.url_of(cluster)
        found = self._pools.get(cluster)
        if url is None:
            return None
        if found is not None and found[0] == url:
            return found[1]
        if found is not None:
            found[1].close()
        ssl = None
        if url.startswith("pulsar+ssl://"):
            ssl = tls.client_context(self.security.broker_client_tls_settings())
        options = connection.Options(
            client_version=f"magnetar-replicator-{__version__}",
            ssl=ssl,
            auth=self.security.broker_client_credentials(),
        )
        made = pool.ConnectionPool(options=options, service_url=url)
        self._pools[cluster] = (url, made)
        return made

    def close(self) -> None:
        for _, made in self._pools.values():
            made.close()
        self._pools.clear()


# --- one replicator ------------------------------------------------------------------------------


@dataclass(slots=True)
class _InFlight:
    """An entry read from the cursor and not yet acknowledged on it."""

    position: Position
    receipt: asyncio.Future[Any] | None
    """The remote's receipt; None for an entry not sent (not replicated to this remote)."""
    count: int = 0
    size: int = 0
    publish_ms: int = 0


class Replicator:
    """Copies one topic's entries to one remote cluster (see the module docstring)."""

    def __init__(
        self,
        *,
        topic: str,
        managed_ledger: ManagedLedger,
        local: str,
        remote: str,
        clusters: RemoteClusters,
        transactions: Callable[[], Transactions | None] = _no_transactions,
        window: int = WINDOW,
    ) -> None:
        if window < 1:
            raise ValueError(f"replication window must be at least 1, not {window}")
        self.topic = topic
        self.ml = managed_ledger
        self.local = local
        self.remote = remote
        self.clusters = clusters
        self.transactions = transactions
        """The topic's transaction buffer once it has one."""
        self.cursor: ManagedCursor | None = None
        self.producer: handles.Producer | None = None
        self.connected_since: str | None = None
        self.msg_out = 0
        self.bytes_out = 0
        self.rate_out = 0.0
        self.throughput_out = 0.0
        self._last = (0, 0, time.monotonic())
        self._oldest_publish_ms: int | None = None
        self.window = window
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        """Read, in cursor order, not yet acknowledged on the cursor (at most ``window``)."""
        self._queued = asyncio.Event()
        """Set when an entry joins ``_in_flight`` (the acknowledging side waits for it)."""
        self._room = asyncio.Event()
        """Set when entries leave ``_in_flight`` (the reading side waits for it)."""
        self._task: asyncio.Task[None] | None = None
        self._backoff = Backoff()

    async def start(self) -> None:
        """Open (or create, at the end of the topic) the cursor, then replicate in the
        background."""
        self.cursor = await self.ml.open_cursor(
            cursor_name(self.remote), initial_position=InitialPosition.LATEST
        )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replicator {self.topic} -> {self.remote}"
        )

    async def stop(self) -> None:
        """Stop copying (the cursor stays: what is left is copied when started again)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_producer()

    async def delete(self) -> None:
        """Stop and delete the cursor: the remote is no longer replicated to."""
        await self.stop()
        with contextlib.suppress(ManagedLedgerError):
            await self.ml.delete_cursor(cursor_name(self.remote))

    async def _close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):  # (a slow remote must not hold an unload)
                await asyncio.wait_for(producer.close(), CLOSE_TIMEOUT_S)

    async def _run(self) -> None:
        cursor = self.cursor
        assert cursor is not None
        while True:
            try:
                remote_pool = await self.clusters.pool(self.remote)
                if remote_pool is None:
                    raise handles.HandleClosedError(f"cluster {self.remote} has no service URL")
                self.producer = await handles.Producer.create(
                    remote_pool,
                    self.topic,
                    producer_id=self.clusters.next_producer_id(),
                    name=producer_name(self.local),
                    backoff=Backoff(),
                )
                self.connected_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._backoff.reset()
                log.info("%s: replicating to cluster %s", self.topic, self.remote)
                await self._replicate(cursor, self.producer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._backoff.next()
                log.warning(
                    "%s: replication to %s: %s; again in %.1f s",
                    self.topic,
                    self.remote,
                    exc,
                    delay,
                )
                await self._close_producer()
                await asyncio.sleep(delay)

    async def _wait_for_transactions(self, cursor: ManagedCursor) -> None:
        """Hold while an open transaction's entries are next (as dispatch does)."""
        while True:
            txn = self.transactions()
            limit = txn.max_read_position if txn is not None and txn.active else None
            if limit is None or cursor.read_position <= limit:
                return
            await asyncio.sleep(TXN_POLL_S)

    def within_transactions(self, cursor: ManagedCursor, entries: list[Entry]) -> list[Entry]:
        """The entries before the first one an open transaction holds; the cursor reads
        that one again next."""
        txn = self.transactions()
        limit = txn.max_read_position if txn is not None and txn.active else None
        if limit is None:
            return entries
        for i, entry in enumerate(entries):
            if entry.position > limit:
                cursor.seek(entry.position)
                return entries[:i]
        return entries

    async def _replicate(self, cursor: ManagedCursor, producer: handles.Producer) -> None:
        """Replicate through ``producer`` until it fails: one task reads and sends while the
        window has room, another acknowledges on the cursor what the remote receipted. The
        window starts empty, from the cursor's mark-delete position: what had no receipt is
        sent again (same sequence ids: the remote drops what it had)."""
        self._in_flight.clear()
        cursor.rewind()
        loop = asyncio.get_running_loop()
        sending = loop.create_task(self._send(cursor, producer))
        acknowledging = loop.create_task(self._acknowledge(cursor))
        try:
            done, _ = await asyncio.wait(
                (sending, acknowledging), return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()  # (the failure)
            raise handles.HandleClosedError(f"replication to {self.remote} stopped")
        finally:
            for task in (sending, acknowledging):
                task.cancel()
            await asyncio.gather(sending, acknowledging, return_exceptions=True)
            self._in_flight.clear()

    async def _send(self, cursor: ManagedCursor, producer: handles.Producer) -> None:
        """Read and send while the window has room (it never waits for a receipt)."""
        in_flight = self._in_flight
        while True:
            room = self.window - len(in_flight)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            await self._wait_for_transactions(cursor)
            entries = await cursor.read_entries_or_wait(min(READ_BATCH, room))
            for entry in self.within_transactions(cursor, entries):
                prepared = self._prepare(entry)
                if prepared is None:
                    in_flight.append(_InFlight(entry.position, None))
                else:
                    meta, payload, count = prepared
                    receipt = await producer.send_stored(
                        meta, payload, sequence_id=sequence_id(entry.position)
                    )
                    in_flight.append(
                        _InFlight(entry.position, receipt, count, len(payload), meta.publish_time)
                    )
                    if self._oldest_publish_ms is None:
                        self._oldest_publish_ms = meta.publish_time
                self._queued.set()

    async def _acknowledge(self, cursor: ManagedCursor) -> None:
        """Move the cursor over the entries at the head of the window whose receipts came
        back (and the entries not sent between them), in order; a receipt that fails (the
        producer closed for good) ends replication through this producer."""
        in_flight = self._in_flight
        while True:
            if not in_flight:
                self._queued.clear()
                await self._queued.wait()
                continue
            head = in_flight[0].receipt
            if head is not None and not head.done():
                await asyncio.wait((head,))  # (not cancelled with this task)
            last: Position | None = None
            while in_flight:
                item = in_flight[0]
                if item.receipt is not None:
                    if not item.receipt.done():
                        break
                    item.receipt.result()  # (raises when the producer gave up)
                    self.msg_out += item.count
                    self.bytes_out += item.size
                in_flight.popleft()
                last = item.position
            self._oldest_publish_ms = next(
                (item.publish_ms for item in in_flight if item.receipt is not None), None
            )
            if last is not None:
                await cursor.mark_delete(last)
            self._room.set()

    def _prepare(self, entry: Entry) -> tuple[pb.MessageMetadata, bytes, int] | None:
        """The metadata (marked with its origin) and payload to send, or None for an entry
        that is not replicated (it came from another cluster, or is a marker other than the
        replicated subscriptions', whose ``replicate_to`` says where they go)."""
        try:
            raw_meta, payload = split_entry(entry.data)
            meta = frames.parse_message_metadata(raw_meta)
        except WireError as exc:
            log.warning("%s: entry %s not replicated: %s", self.topic, entry.position, exc)
            return None
        if meta.HasField("replicated_from"):
            return None  # it came from another cluster
        if meta.marker_type and meta.marker_type not in markers.REPLICATED_SUBSCRIPTION_MARKERS:
            return None  # the broker's own (transactions)
        if meta.replicate_to and self.remote not in meta.replicate_to:
            return None  # the producer named other clusters (or ``__local__``: none)
        txn = self.transactions()
        if meta.HasField("txnid_most_bits") or meta.HasField("txnid_least_bits"):
            if txn is not None and txn.hides(read_meta(entry.data)):
                return None  # an aborted transaction's
            # committed here (the hold is lifted): a plain message on the remote
            meta.ClearField("txnid_most_bits")
            meta.ClearField("txnid_least_bits")
        meta.replicated_from = self.local
        meta.properties.add(key=SOURCE_POSITION, value=str(entry.position))
        count = meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else 1
        return meta, bytes(payload), count

    # --- stats -------------------------------------------------------------------------------

    def update_rates(self, now: float) -> None:
        msgs, size, at = self._last
        dt = now - at
        if dt <= 0:
            return
        self.rate_out = (self.msg_out - msgs) / dt
        self.throughput_out = (self.bytes_out - size) / dt
        self._last = (self.msg_out, self.bytes_out, now)

    def backlog(self) -> int:
        return self.cursor.backlog() if self.cursor is not None else 0

    @property
    def connected(self) -> bool:
        """The producer is on a live connection to the remote (not re-creating itself)."""
        producer = self.producer
        return (
            producer is not None
            and not producer.closed
            and producer.conn is not None
            and not producer.conn.is_closed
        )

    def _outbound(self) -> str | None:
        producer = self.producer
        if producer is None or producer.conn is None:
            return None
        return producer.conn.where

    def stats(self, *, rate_in: float, throughput_in: float, inbound: str | None) -> dict[str, Any]:
        """Pulsar's ReplicatorStats."""
        backlog = self.backlog()
        delay = 0.0
        if backlog and self._oldest_publish_ms:
            delay = max(0.0, time.time() - self._oldest_publish_ms / 1000)
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": throughput_in,
            "msgRateOut": self.rate_out,
            "msgThroughputOut": self.throughput_out,
            "msgRateExpired": 0.0,
            "replicationBacklog": backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": int(delay),
            "inboundConnection": inbound,
            "inboundConnectedSince": None,
            "outboundConnection": self._outbound(),
            "outboundConnectedSince": self.connected_since if self.connected else None,
        }


# --- a topic's replicators -----------------------------------------------------------------------


class TopicReplication:
    """A persistent topic's replicators, one per remote cluster of its effective policies."""

    def __init__(
        self,
        *,
        topic: str,
        managed_ledger: ManagedLedger,
        local: str,
        clusters: RemoteClusters,
        window: int = WINDOW,
    ) -> None:
        self.topic = topic
        self.ml = managed_ledger
        self.local = local
        self.clusters = clusters
        self.window = window
        self.replicators: dict[str, Replicator] = {}
        self._lock = asyncio.Lock()
        self.closed = False
        self.transactions: Callable[[], Transactions | None] = _no_transactions
        """The topic's transaction buffer, once the topic is built (set by the service)."""

    async def update(self, remotes: Iterable[str]) -> None:
        """Start the replicators of ``remotes`` not running, delete those of clusters no
        longer listed (their cursors go: nothing is held back for them)."""
        wanted = set(remotes)
        async with self._lock:
            if self.closed:
                return
            for remote in sorted(set(self.replicators) - wanted):
                await self.replicators.pop(remote).delete()
                log.info("%s: no longer replicated to %s", self.topic, remote)
            for remote in sorted(wanted - set(self.replicators)):
                replicator = Replicator(
                    topic=self.topic,
                    managed_ledger=self.ml,
                    local=self.local,
                    remote=remote,
                    clusters=self.clusters,
                    transactions=self.transactions,
                    window=self.window,
                )
                await replicator.start()
                self.replicators[remote] = replicator
            if not wanted:  # cursors left from an earlier setting hold nothing back either
                for name in list(self.ml.cursors):
                    if name.startswith(PREFIX):
                        with contextlib.suppress(ManagedLedgerError):
                            await self.ml.delete_cursor(name)

    async def close(self) -> None:
        """Stop every replicator (topic unload): their cursors stay."""
        async with self._lock:
            self.closed = True
            replicators = list(self.replicators.values())
            self.replicators.clear()
        await asyncio.gather(*(r.stop() for r in replicators), return_exceptions=True)

    def update_rates(self, now: float) -> None:
        for replicator in self.replicators.values():
            replicator.update_rates(now)
