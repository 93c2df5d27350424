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
* the cursor moves only over entries whose receipt came back.

:class:`TopicReplication` holds a topic's replicators, started and stopped as the namespace's
(or the topic's) ``replication_clusters`` change; :class:`RemoteClusters` the connection
pools to the other clusters, from their records in the metadata store (``/admin/clusters``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
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
"""Entries read (and sent before their receipts are awaited) at a time."""
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
    ) -> None:
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
                cursor.rewind()  # from the mark-delete position: the unreceipted, again
                log.info("%s: replicating to cluster %s", self.topic, self.remote)
                while True:
                    await self._wait_for_transactions(cursor)
                    entries = await cursor.read_entries_or_wait(READ_BATCH)
                    readable = self.within_transactions(cursor, entries)
                    await self._replicate(cursor, self.producer, readable)
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

    async def _replicate(
        self, cursor: ManagedCursor, producer: handles.Producer, entries: Iterable[Entry]
    ) -> None:
        sent: list[tuple[asyncio.Future[Any], int, int]] = []
        last: Position | None = None
        for entry in entries:
            last = entry.position
            prepared = self._prepare(entry)
            if prepared is None:
                continue
            meta, payload, count = prepared
            if self._oldest_publish_ms is None:
                self._oldest_publish_ms = meta.publish_time
            receipt = await producer.send_stored(
                meta, payload, sequence_id=sequence_id(entry.position)
            )
            sent.append((receipt, count, len(payload)))
        for receipt, count, size in sent:
            await receipt
            self.msg_out += count
            self.bytes_out += size
        if last is not None:
            await cursor.mark_delete(last)
        self._oldest_publish_ms = None

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
        self, *, topic: str, managed_ledger: ManagedLedger, local: str, clusters: RemoteClusters
    ) -> None:
        self.topic = topic
        self.ml = managed_ledger
        self.local = local
        self.clusters = clusters
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
