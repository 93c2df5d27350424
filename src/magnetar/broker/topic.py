"""A topic (or one partition of a partitioned topic) served by this broker.

:class:`Topic` holds what every topic has: the producers with their access modes, the
subscriptions (:class:`contracts.TopicSubscriptions`, built by the subscriptions package),
the counters for /metrics and the admin stats, and unloading (ownership moves, the broker
stops). :class:`PersistentTopic` stores entries in a managed ledger and can be terminated
(no more messages, ever); :class:`NonPersistentTopic` stores nothing and hands each entry to
the consumers connected at that moment (``subscriptions.nonpersistent``).

Producer access modes follow Pulsar's ``AbstractTopic.incrementTopicEpochIfNeeded``:
Shared producers coexist unless an exclusive one holds the topic (ProducerBusy); an Exclusive
producer needs the topic to itself (ProducerFenced otherwise); WaitForExclusive queues until
the topic is free; ExclusiveWithFencing closes every other producer and takes over. Each
grant of exclusivity bumps the topic epoch, and a producer that comes back with an older
epoch is fenced. (The epoch lives in memory: it restarts when the topic is reloaded.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from magnetar.broker import backlog_quota
from magnetar.broker.compaction.service import TopicCompaction
from magnetar.broker.contracts import BroadcastSubscriptions, BrokerError, TopicSubscriptions
from magnetar.broker.dedup import Deduplication
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.replicated_subscriptions import ReplicatedSubscriptionsController
from magnetar.broker.replication import TopicReplication, producer_name
from magnetar.broker.transactions.buffer import TransactionBuffer
from magnetar.broker.transactions.ids import NOT_ENABLED, TxnId
from magnetar.common.buffers import Payload
from magnetar.common.stats import LatencyWindow
from magnetar.managed_ledger.api import (
    AddDone,
    ManagedLedger,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
    Position,
)
from magnetar.managed_ledger.cursor import ManagedCursorImpl
from magnetar.managed_ledger.ledger import ManagedLedgerImpl
from magnetar.managed_ledger.reader import ReadStats
from magnetar.managed_ledger.writer import AddStats
from magnetar.wire import pb
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

NON_PERSISTENT_POSITION: Final = Position(0, 0)
"""What a non-persistent publish is acknowledged with (Pulsar's ``completed(null, 0L, 0L)``)."""


class Topic:
    """Producers, subscriptions, counters and unloading: what both kinds of topic share."""

    add: Callable[[Payload, AddDone], None]
    """Take one producer entry (the publish path); the callback gets the position to
    acknowledge it with once that is safe (stored, for a persistent topic), or the error,
    never from inside the call. An instance attribute bound at construction, so a SEND
    costs no extra call."""

    def __init__(
        self,
        *,
        name: TopicName,
        subscriptions: TopicSubscriptions,
        on_fenced: Callable[[Topic], None] | None = None,
    ) -> None:
        self.name = name
        self.full_name = name.full_name
        self.subscriptions = subscriptions
        self._on_fenced = on_fenced
        self.producers: dict[str, Producer] = {}
        self._exclusive: str | None = None
        self._waiting: deque[tuple[Producer, asyncio.Future[int]]] = deque()
        self.topic_epoch: int | None = None
        self.fenced_reason: str | None = None
        self.fenced_error: pb.ServerError.ValueType = pb.ServiceNotReady
        self.closed = False
        # counters and rates (rates are recomputed by update_rates)
        self.msg_in = 0
        self.bytes_in = 0
        self.rate_in = 0.0
        self.throughput_in = 0.0
        self.publish_latency_ms = LatencyWindow()
        """From a SEND taken to its receipt (Pulsar's pulsar_broker_publish_latency)."""
        self._last_counts = (0, 0)
        self._last_rate_at = time.monotonic()
        self.created_at = time.time()

    max_producers: int = 0
    """The effective ``maxProducers`` policy (topic over namespace; 0: no limit), set when
    a persistent topic loads and by the policy enforcer (``broker/enforcement.py``)."""
    max_consumers: int = 0
    """The effective ``maxConsumers`` policy (topic over namespace; 0: no limit)."""

    def apply_limits(self, max_producers: int, max_consumers: int) -> None:
        self.max_producers, self.max_consumers = max_producers, max_consumers

    def check_consumer_limit(self) -> None:
        """ConsumerBusy (Pulsar's reason) when the topic has its ``maxConsumers`` already."""
        if self.max_consumers <= 0:
            return
        attached = sum(
            len(sub.get("consumers") or ()) for sub in self.subscriptions.stats().values()
        )
        if attached >= self.max_consumers:
            raise BrokerError(pb.ConsumerBusy, "Topic reached max consumers limit")

    dedup: Deduplication | None = None
    """Message deduplication (persistent topics only; enabled by policy)."""
    replication: TopicReplication | None = None
    """The replicators to other clusters (persistent topics only; by policy)."""
    txn_buffer: TransactionBuffer | None = None
    """The transaction buffer (persistent topics, when transactions are enabled)."""
    replicated_subscriptions: ReplicatedSubscriptionsController | None = None
    """Replicated subscriptions' snapshots and updates (persistent topics, when enabled)."""

    def replicated_marker(self, position: Position, marker_type: int, payload: bytes) -> None:
        """Another cluster's replicator stored a replicated-subscription marker here."""
        if self.replicated_subscriptions is not None:
            self.replicated_subscriptions.received(position, marker_type, payload)

    def append_txn(self, txn: TxnId, data: Payload) -> asyncio.Future[Position]:
        """A transactional SEND's entry (raises BrokerError when it cannot be taken)."""
        if self.txn_buffer is None:
            raise BrokerError(pb.NotAllowedError, f"{self.full_name}: {NOT_ENABLED}")
        return self.txn_buffer.append(txn, data)

    def last_sequence_id(self, producer: str) -> int:
        """What PRODUCER_SUCCESS announces: the producer's last stored sequence id when
        deduplication is on, else -1."""
        dedup = self.dedup
        return dedup.last_sequence_id(producer) if dedup is not None and dedup.enabled else -1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.full_name})"

    @property
    def storage_size(self) -> int:
        return 0

    @property
    def offloaded_size(self) -> int:
        """Bytes of the topic's ledgers offloaded to S3 (Pulsar's offloadedStorageSize)."""
        return 0

    # --- producers ---------------------------------------------------------------------------

    async def add_producer(
        self, producer: Producer, *, on_queued: Callable[[], None]
    ) -> int | None:
        """Attach ``producer`` per its access mode; returns the topic epoch it was granted
        (None for shared producers). ``on_queued`` is called when a WaitForExclusive
        producer has to wait. Raises BrokerError."""
        if self.fenced_reason is not None:
            raise BrokerError(self.fenced_error, f"{self.full_name}: {self.fenced_reason}")
        existing = self.producers.get(producer.name)
        if existing is not None:
            if producer.is_successor_to(existing):
                existing.disconnect(notify=False)
            else:
                raise BrokerError(
                    pb.ProducerBusy,
                    f"Producer with name '{producer.name}' is already connected to topic",
                )
        if existing is None and 0 < self.max_producers <= len(self.producers):
            raise BrokerError(pb.ProducerBusy, "Topic reached max producers limit")
        epoch = await self._grant(producer, on_queued)
        if self.closed or self.fenced_reason is not None:
            if self._exclusive == producer.name:
                self._exclusive = None
            raise BrokerError(self.fenced_error, f"{self.full_name}: topic is being unloaded")
        self.producers[producer.name] = producer
        if self.dedup is not None:
            self.dedup.producer_connected(producer.name)
        return epoch

    def _stale_epoch(self, producer: Producer) -> bool:
        return (
            producer.topic_epoch is not None
            and self.topic_epoch is not None
            and producer.topic_epoch < self.topic_epoch
        )

    def _take_exclusive(self, producer: Producer) -> int:
        self._exclusive = producer.name
        if producer.topic_epoch is not None:
            epoch = max(producer.topic_epoch, self.topic_epoch or 0)
        else:
            epoch = (self.topic_epoch if self.topic_epoch is not None else -1) + 1
        self.topic_epoch = epoch
        return epoch

    async def _grant(self, producer: Producer, on_queued: Callable[[], None]) -> int | None:
        mode = producer.access_mode
        busy = self._exclusive is not None or bool(self._waiting)
        if mode is AccessMode.SHARED:
            if busy:
                raise BrokerError(
                    pb.ProducerBusy, f"Topic has an existing exclusive producer: {self._exclusive}"
                )
            return self.topic_epoch
        if mode is AccessMode.EXCLUSIVE:
            if busy:
                raise BrokerError(
                    pb.ProducerFenced,
                    f"Topic has an existing exclusive producer: {self._exclusive}",
                )
            if self.producers:
                raise BrokerError(pb.ProducerFenced, "Topic has existing shared producers")
            self._check_epoch(producer)
            return self._take_exclusive(producer)
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            if self._exclusive is not None or self.producers:
                waiting, self._waiting = self._waiting, deque()
                for waiter, future in waiting:
                    if not future.done():
                        future.set_exception(BrokerError(pb.ProducerFenced, "Fenced out"))
                    waiter.closed = True
                self._exclusive = None
                for other in list(self.producers.values()):
                    log.info("%s: fencing out producer %s", self.full_name, other.name)
                    other.disconnect(notify=True)
            self._check_epoch(producer)
            return self._take_exclusive(producer)
        # WAIT_FOR_EXCLUSIVE
        if self._exclusive is not None or self.producers:
            queued: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._waiting.append((producer, queued))
            log.info(
                "%s: queuing producer %s until the topic is free", self.full_name, producer.name
            )
            on_queued()
            try:
                return await queued
            finally:
                if not queued.done() or queued.cancelled():
                    self._waiting = deque(w for w in self._waiting if w[0] is not producer)
        self._check_epoch(producer)
        return self._take_exclusive(producer)

    def _check_epoch(self, producer: Producer) -> None:
        if self._stale_epoch(producer):
            raise BrokerError(
                pb.ProducerFenced,
                f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, "
                f"Producer epoch: {producer.topic_epoch}",
            )

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is not producer:
            self._waiting = deque(w for w in self._waiting if w[0] is not producer)
            return
        del self.producers[producer.name]
        if self.dedup is not None:
            self.dedup.producer_disconnected(producer.name)
        if self._exclusive == producer.name:
            self._exclusive = None
            while self._waiting:
                nxt, future = self._waiting.popleft()
                if future.done() or nxt.closed:
                    continue
                if self._stale_epoch(nxt):
                    future.set_exception(BrokerError(pb.ProducerFenced, "Topic epoch has moved"))
                    continue
                future.set_result(self._take_exclusive(nxt))
                break

    # --- publish support ----------------------------------------------------------------------

    def entries_added(self) -> None:
        self.subscriptions.on_entries_added()

    def add_failed(self, exc: BaseException) -> None:
        """An add failed: a fenced or closed managed ledger means another broker took the
        topic (or it is closing): stop accepting and unload."""
        if isinstance(exc, ManagedLedgerTerminatedError):
            self._fence("topic was terminated", pb.TopicTerminatedError)
        elif isinstance(exc, ManagedLedgerFencedError):
            if self._fence("managed ledger fenced by another owner", pb.ServiceNotReady):
                log.warning("%s: managed ledger fenced; unloading", self.full_name)
                if self._on_fenced is not None:
                    self._on_fenced(self)

    def _fence(self, reason: str, code: pb.ServerError.ValueType) -> bool:
        if self.fenced_reason is not None:
            return False
        self.fenced_reason = reason
        self.fenced_error = code
        return True

    # --- lifecycle ----------------------------------------------------------------------------

    async def close(self, *, reason: str = "unload") -> None:
        """Unload: CLOSE_PRODUCER/CLOSE_CONSUMER to every client (they look the topic up
        again and reconnect), answer in-flight sends, close the managed ledger."""
        if self.closed:
            return
        self.closed = True
        if self.replication is not None:
            await self.replication.close()
        if self.replicated_subscriptions is not None:
            await self.replicated_subscriptions.close()
        self._fence(f"topic is closing ({reason})", pb.ServiceNotReady)
        producers = list(self.producers.values())
        for producer in producers:
            producer.disconnect(notify=True)
        for waiter, future in self._waiting:
            if not future.done():
                future.set_exception(BrokerError(pb.ServiceNotReady, "topic is unloading"))
            waiter.closed = True
        self._waiting.clear()
        await asyncio.gather(*(p.drain(10.0) for p in producers), return_exceptions=True)
        try:
            await self.subscriptions.close_all(reason=reason)
        except Exception:
            log.exception("%s: closing subscriptions failed", self.full_name)
        with contextlib.suppress(Exception):
            await self._close_storage()
        log.info("%s: unloaded (%s)", self.full_name, reason)

    async def _close_storage(self) -> None:
        pass

    # --- stats --------------------------------------------------------------------------------

    def update_rates(self, now: float) -> None:
        dt = now - self._last_rate_at
        if dt > 0:
            self.update_storage_rates(dt)
        self._update_rates(now, dt)

    def update_storage_rates(self, dt: float) -> None:
        """Per-second figures of the storage side over the last ``dt`` seconds."""

    def _update_rates(self, now: float, dt: float) -> None:
        if dt <= 0:
            return
        msgs, size = self._last_counts
        self.rate_in = (self.msg_in - msgs) / dt
        self.throughput_in = (self.bytes_in - size) / dt
        self._last_counts = (self.msg_in, self.bytes_in)
        self._last_rate_at = now
        for producer in self.producers.values():
            producer.update_rates(dt)
        if self.replication is not None:
            self.replication.update_rates(now)

    def replication_stats(self) -> dict[str, Any]:
        """Pulsar's ``replication`` section: ReplicatorStats by remote cluster, with the
        rate of what that cluster's replicator publishes here (``msgRateIn``)."""
        if self.replication is None:
            return {}
        out: dict[str, Any] = {}
        for remote, replicator in sorted(self.replication.replicators.items()):
            inbound = self.producers.get(producer_name(remote))
            out[remote] = replicator.stats(
                rate_in=inbound.rate_in if inbound is not None else 0.0,
                throughput_in=inbound.throughput_in if inbound is not None else 0.0,
                inbound=inbound.cnx.remote_address if inbound is not None else None,
            )
        return out

    def subscription_stats(self) -> Mapping[str, Mapping[str, Any]]:
        try:
            return self.subscriptions.stats()
        except Exception:
            log.exception("%s: subscription stats failed", self.full_name)
            return {}

    def stats(self) -> dict[str, Any]:
        """Pulsar's TopicStats shape (what ``GET .../stats`` returns)."""
        subs = self.subscription_stats()

        def total(field: str) -> float:
            return sum(float(s.get(field, 0) or 0) for s in subs.values())

        return {
            "msgRateIn": self.rate_in,
            "msgThroughputIn": self.throughput_in,
            "msgRateOut": total("msgRateOut"),
            "msgThroughputOut": total("msgThroughputOut"),
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": int(total("msgOutCounter")),
            "bytesOutCounter": int(total("bytesOutCounter")),
            "averageMsgSize": (self.throughput_in / self.rate_in) if self.rate_in else 0.0,
            "storageSize": self.storage_size,
            "offloadedStorageSize": self.offloaded_size,
            "backlogSize": int(total("backlogSize")),
            "publishers": [p.stats() for p in self.producers.values()],
            "waitingPublishers": len(self._waiting),
            "subscriptions": {k: dict(v) for k, v in subs.items()},
            "replication": self.replication_stats(),
            "deduplicationStatus": (
                self.dedup.status.value if self.dedup is not None else "Disabled"
            ),
            "topicEpoch": self.topic_epoch,
        }


@dataclass(frozen=True, slots=True)
class StoragePeriod:
    """A persistent topic's managed-ledger figures over one statistics period (Pulsar's
    ManagedLedgerMBean: counts of the period, and per-second rates)."""

    adds: int = 0
    add_errors: int = 0
    write_rate: float = 0.0
    write_bytes_rate: float = 0.0
    reads: int = 0
    read_errors: int = 0
    read_rate: float = 0.0
    read_miss_rate: float = 0.0
    read_bytes_rate: float = 0.0
    hit_bytes_rate: float = 0.0
    miss_bytes_rate: float = 0.0
    mark_delete_rate: float = 0.0
    """Moves of the cursors' mark-delete positions per second."""


class PersistentTopic(Topic):
    """A topic whose entries are stored in a managed ledger."""

    def __init__(
        self,
        *,
        name: TopicName,
        managed_ledger: ManagedLedger,
        subscriptions: TopicSubscriptions,
        on_fenced: Callable[[Topic], None] | None = None,
        dedup: Deduplication | None = None,
        compaction: TopicCompaction | None = None,
        replication: TopicReplication | None = None,
    ) -> None:
        super().__init__(name=name, subscriptions=subscriptions, on_fenced=on_fenced)
        self.managed_ledger = managed_ledger
        self.dedup = dedup
        self.replication = replication
        self.compaction = compaction
        """Its compacted view and compactions (Pulsar's topic compaction)."""
        self.quota_evictions = {"size": 0, "time": 0}
        self.add = managed_ledger.add
        if managed_ledger.terminated:
            self._fence("topic was terminated", pb.TopicTerminatedError)

    backlog_quotas: backlog_quota.Quotas = backlog_quota.Quotas()
    """The effective backlog quotas (topic over namespace over the broker's defaults), set
    when the topic loads and by the policy enforcer (:mod:`magnetar.broker.backlog_quota`)."""
    quota_evictions: dict[str, int]
    """Evictions by ``consumer_backlog_eviction``, by quota type (``size`` / ``time``)."""
    oldest_backlog: tuple[int | None, str | None] | None = None
    """Publish time (ms) of the oldest message the slowest subscription has not acknowledged
    and that subscription's name ((None, None): no backlog), as of the last backlog quota
    check (None: not checked yet)."""

    async def add_producer(
        self, producer: Producer, *, on_queued: Callable[[], None]
    ) -> int | None:
        """As :meth:`Topic.add_producer`, refused first when a backlog quota with a producer
        policy is exceeded (ProducerBlockedQuotaExceededError / Exception, as Pulsar)."""
        await backlog_quota.check_producer(self, self.backlog_quotas)
        return await super().add_producer(producer, on_queued=on_queued)

    @property
    def storage_size(self) -> int:
        return self.managed_ledger.total_size

    storage_period: StoragePeriod = StoragePeriod()
    """The managed ledger's figures over the last statistics period."""
    _storage_counts: tuple[int, ...] = (0,) * 9

    @property
    def storage_write_rate(self) -> float:
        """Entries stored per second (Pulsar's pulsar_storage_write_rate)."""
        return self.storage_period.write_rate

    @property
    def storage_read_rate(self) -> float:
        """Entries read per second, from the cache or not (pulsar_storage_read_rate)."""
        return self.storage_period.read_rate

    @property
    def storage_read_cache_misses_rate(self) -> float:
        """Entries read per second that were not in the cache (from bookies or S3)."""
        return self.storage_period.read_miss_rate

    @property
    def storage_stats(self) -> tuple[AddStats, ReadStats] | None:
        """The managed ledger's add and read figures (None when it measures none)."""
        ml = self.managed_ledger
        if isinstance(ml, ManagedLedgerImpl):
            return ml.add_stats, ml.read_stats
        return None

    @property
    def write_quorum(self) -> int:
        """Copies of each entry (1 when the managed ledger does not say)."""
        ml = self.managed_ledger
        return ml.config.write_quorum if isinstance(ml, ManagedLedgerImpl) else 1

    def update_storage_rates(self, dt: float) -> None:
        stats = self.storage_stats
        if stats is None:
            return
        add, read = stats
        add.refresh()
        misses = read.bookie_entries + read.offloaded_entries
        counts = (
            add.succeeded, add.add_errors, add.added_bytes,
            read.cache_hits + misses, misses, read.cache_hit_bytes + read.miss_bytes,
            read.errors, read.cache_hit_bytes, self._mark_delete_moves(),
        )  # fmt: skip
        d = [now - was for now, was in zip(counts, self._storage_counts, strict=True)]
        self._storage_counts = counts
        self.storage_period = StoragePeriod(
            adds=d[0], add_errors=d[1], write_rate=d[0] / dt, write_bytes_rate=d[2] / dt,
            reads=d[3], read_rate=d[3] / dt, read_miss_rate=d[4] / dt,
            read_bytes_rate=d[5] / dt, read_errors=d[6], hit_bytes_rate=d[7] / dt,
            miss_bytes_rate=(d[5] - d[7]) / dt, mark_delete_rate=d[8] / dt,
        )  # fmt: skip

    def backlog_size(self) -> int:
        """Bytes not yet acknowledged by the slowest durable subscription, estimated as Pulsar
        estimates it (whole ledgers after its mark-delete position, plus the rest of that
        position's ledger at its average entry size); 0 without a durable subscription."""
        ml = self.managed_ledger
        marks = [
            c.mark_delete_position
            for name, c in ml.cursors.items()
            if c.durable and not name.startswith("__")
        ]
        if not marks:
            return 0
        mark = min(marks)
        total = 0.0
        for info in ml.ledgers():
            if info.ledger_id > mark.ledger_id:
                total += info.size
            elif info.ledger_id == mark.ledger_id and info.entries > 0:
                left = max(0, info.entries - (mark.entry_id + 1))
                total += info.size * left / info.entries
        return int(total)

    def _mark_delete_moves(self) -> int:
        return sum(
            c.mark_delete_moves
            for c in self.managed_ledger.cursors.values()
            if isinstance(c, ManagedCursorImpl)
        )

    @property
    def offloaded_size(self) -> int:
        return sum(i.size for i in self.managed_ledger.ledgers() if i.offloaded)

    def stats(self) -> dict[str, Any]:
        """TopicStats with Pulsar's ``compaction`` (CompactionStats)."""
        out = super().stats()
        out["backlogSize"] = self.backlog_size()
        quotas = self.backlog_quotas
        out["backlogQuotaLimitSize"] = quotas.size.limit if quotas.size is not None else -1
        out["backlogQuotaLimitTime"] = quotas.time.limit if quotas.time is not None else -1
        oldest = self.oldest_backlog
        if oldest is not None:
            publish_ms, sub = oldest
            age = -1 if publish_ms is None else max(0, int(time.time() - publish_ms / 1000))
            out["oldestBacklogMessageAgeSeconds"] = age
            out["oldestBacklogMessageSubscriptionName"] = sub
        if self.compaction is not None:
            out["compaction"] = self.compaction.stats()
        return out

    async def terminate(self) -> Position:
        """No more messages: producers are refused from now on (TopicTerminatedError)."""
        last = await self.managed_ledger.terminate()
        self._fence("topic was terminated", pb.TopicTerminatedError)
        for producer in list(self.producers.values()):
            producer.disconnect(notify=True)
        self.entries_added()  # wakes dispatchers so consumers learn the end of the topic
        return last

    async def _close_storage(self) -> None:
        if self.compaction is not None:
            await self.compaction.close()
        await self.managed_ledger.close()


class NonPersistentTopic(Topic):
    """A topic that stores nothing: each entry goes to the consumers connected now (or is
    dropped, and counted, for a subscription whose consumer cannot take it) and the
    producer's receipt follows at once with message id 0:0, as Pulsar gives. Unloading it
    loses nothing but what was never kept; it lives in memory only, while this broker
    serves it (the broker drops it after a while without producers and consumers)."""

    def __init__(
        self,
        *,
        name: TopicName,
        subscriptions: BroadcastSubscriptions,
        on_fenced: Callable[[Topic], None] | None = None,
    ) -> None:
        super().__init__(name=name, subscriptions=subscriptions, on_fenced=on_fenced)
        self.broadcaster = subscriptions
        self.add = self._hand_out
        self.entries_in = 0
        """Entries published (Pulsar's ``entriesAddedCounter``)."""
        self.idle_since = time.monotonic()

    def _hand_out(self, data: Payload, done: AddDone) -> None:
        self.entries_in += 1
        self.broadcaster.broadcast(bytes(data))  # not a view into the received frame
        asyncio.get_running_loop().call_soon(done, NON_PERSISTENT_POSITION, None)

    def idle(self) -> bool:
        """No producer (nor one waiting) and no consumer connected: nothing would be lost by
        dropping the topic (subscriptions without consumers hold nothing)."""
        return not self.producers and not self._waiting and not self.broadcaster.has_consumers()

    def stats(self) -> dict[str, Any]:
        """Pulsar's NonPersistentTopicStats: TopicStats plus ``msgDropRate`` on the topic
        (the sum over its subscriptions) and on each publisher."""
        out = super().stats()
        for p in out["publishers"]:
            # Pulsar drops at publish only past maxConcurrentNonPersistentMessagePerConnection
            # SENDs waiting for its executor; here an entry is handed out before its SEND is
            # answered, so none ever waits and none is dropped at publish.
            p["msgDropRate"] = 0.0
        out["msgDropRate"] = self.broadcaster.dropped_rate()
        return out
