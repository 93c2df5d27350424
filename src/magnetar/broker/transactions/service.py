"""The broker's transaction service: its coordinators, and transactions meeting topics.

Why this module exists: the coordinator, the buffer and the pending acks know nothing of
topic loading or ownership; this service does the wiring, as Pulsar's
``TransactionMetadataStoreService`` and the transaction parts of ``BrokerService`` do:

* at start (``transactionCoordinatorEnabled``), the tenant ``pulsar``, the namespace
  ``pulsar/system`` and the partitioned topic ``transaction_coordinator_assign`` (one
  partition per coordinator) are created when absent -- clients look those partitions up
  and connect to their owners;
* a coordinator is loaded (its log replayed) on the first TC_CLIENT_CONNECT naming it, by
  the broker owning its assign partition; a background loop aborts timed-out transactions;
* each persistent topic loaded gets a transaction buffer and pending acks, recovered
  before the topic serves anyone;
* a coordinator's decisions reach partitions and subscriptions of topics this broker
  serves directly, and those of other brokers' topics as END_TXN_ON_PARTITION /
  END_TXN_ON_SUBSCRIPTION sent to their owner (:mod:`.remote`); a failed end is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Final, Protocol

from magnetar.broker.config import BrokerConfig
from magnetar.broker.contracts import BrokerError, ConsumerHandle
from magnetar.broker.policies import default_namespace_policies
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.subscriptions.topic_subscriptions import TopicSubscriptionsImpl
from magnetar.broker.topic import PersistentTopic, Topic
from magnetar.broker.transactions import remote
from magnetar.broker.transactions.buffer import TransactionBuffer
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.broker.transactions.ids import (
    ASSIGN_TOPIC,
    NOT_ENABLED,
    SYSTEM_NAMESPACE,
    SYSTEM_TENANT,
    TxnId,
    assign_partition,
)
from magnetar.broker.transactions.pending_acks import PendingAcks
from magnetar.managed_ledger.api import ManagedLedgerFactory
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

EXPIRE_INTERVAL_S: Final = 1.0


class Located(Protocol):
    """A lookup's answer (``broker.service.LookupAnswer``)."""

    @property
    def service_url(self) -> str: ...
    @property
    def redirect(self) -> bool: ...


class TopicHost(Protocol):
    """What the service needs from the broker (``broker.service.BrokerService``)."""

    config: BrokerConfig
    store: api.MetadataStore
    managed_ledgers: ManagedLedgerFactory

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> Topic: ...
    async def check_owned(self, topic: TopicName) -> None: ...
    async def lookup(
        self, topic: TopicName, *, authoritative: bool, listener: str | None = None
    ) -> Located: ...


def topic_name(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as exc:
        raise BrokerError(pb.InvalidTopicName, str(exc)) from None


class TransactionService:
    def __init__(self, host: TopicHost) -> None:
        self._host = host
        cfg = host.config
        self.enabled = cfg.transaction_coordinator_enabled
        self.coordinator_count = cfg.transaction_coordinators
        self._coordinators: dict[int, TransactionCoordinator] = {}
        self._loading: dict[int, asyncio.Task[TransactionCoordinator]] = {}
        self._pending: dict[str, PendingAcks] = {}
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if not self.enabled:
            return
        await self._ensure_system_topics()
        self._task = asyncio.get_running_loop().create_task(
            self._expire_loop(), name="transaction-timeouts"
        )

    async def _ensure_system_topics(self) -> None:
        store = self._host.store
        cfg = self._host.config
        records: list[tuple[str, dict[str, Any]]] = [
            (
                keys.tenant(SYSTEM_TENANT),
                {"format": 1, "adminRoles": [], "allowedClusters": [cfg.cluster_name]},
            ),
            (
                keys.namespace(SYSTEM_TENANT, SYSTEM_NAMESPACE),
                {
                    **default_namespace_policies(cfg.default_bundles),
                    "replication_clusters": [cfg.cluster_name],
                },
            ),
            (
                keys.partitioned_topic(
                    SYSTEM_TENANT,
                    SYSTEM_NAMESPACE,
                    "persistent",
                    topic_name(ASSIGN_TOPIC).local_name,
                ),
                {"format": 1, "partitions": self.coordinator_count},
            ),
        ]
        for key, value in records:
            with contextlib.suppress(api.BadVersionError):
                await store.put(key, json.dumps(value).encode(), expected_version=api.NOT_EXISTS)

    async def unload_coordinators(self) -> None:
        """Close every loaded coordinator (this broker lost its ownerships): clients connect
        again and the next owner of each assign partition loads it from its log."""
        coordinators, self._coordinators = list(self._coordinators.values()), {}
        for coordinator in coordinators:
            with contextlib.suppress(Exception):
                await coordinator.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for pending in self._pending.values():
            pending.close()
        await self.unload_coordinators()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_INTERVAL_S)
            for coordinator in list(self._coordinators.values()):
                try:
                    await coordinator.expire()
                except Exception:
                    log.exception("transaction coordinator %d: expiry failed", coordinator.tc_id)

    # --- coordinators -------------------------------------------------------------------------

    def require_enabled(self) -> None:
        if not self.enabled:
            raise BrokerError(pb.NotAllowedError, NOT_ENABLED)

    async def connect(self, tc_id: int) -> TransactionCoordinator:
        """TC_CLIENT_CONNECT: load coordinator ``tc_id`` if this broker owns it."""
        self.require_enabled()
        if not 0 <= tc_id < self.coordinator_count:
            raise BrokerError(
                pb.TransactionCoordinatorNotFound,
                f"transaction coordinator {tc_id} does not exist "
                f"({self.coordinator_count} coordinators)",
            )
        found = self._coordinators.get(tc_id)
        if found is not None:
            return found
        await self._host.check_owned(topic_name(assign_partition(tc_id)))
        task = self._loading.get(tc_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(tc_id))
            self._loading[tc_id] = task
            task.add_done_callback(lambda _: self._loading.pop(tc_id, None))
        return await asyncio.shield(task)

    async def _load(self, tc_id: int) -> TransactionCoordinator:
        name = f"{SYSTEM_TENANT}/{SYSTEM_NAMESPACE}/persistent/__transaction_log_{tc_id}"
        try:
            ml = await self._host.managed_ledgers.open(name, self._host.config.managed_ledger)
            coordinator = TransactionCoordinator(tc_id, ml, self)
            await coordinator.load()
        except BrokerError:
            raise
        except Exception as exc:
            raise BrokerError(
                pb.TransactionCoordinatorNotFound,
                f"transaction coordinator {tc_id} could not be loaded: {exc}",
            ) from exc
        self._coordinators[tc_id] = coordinator
        return coordinator

    def coordinator_of(self, txn: TxnId) -> TransactionCoordinator:
        self.require_enabled()
        found = self._coordinators.get(txn.most)
        if found is None:
            raise BrokerError(
                pb.TransactionCoordinatorNotFound,
                f"transaction coordinator {txn.most} is not served by this broker",
            )
        return found

    async def new_txn(self, tc_id: int, timeout_ms: int) -> TxnId:
        self.require_enabled()
        found = self._coordinators.get(tc_id)
        if found is None:
            raise BrokerError(
                pb.TransactionCoordinatorNotFound,
                f"transaction coordinator {tc_id} is not served by this broker",
            )
        return await found.new_txn(timeout_ms)

    async def add_partitions(self, txn: TxnId, partitions: list[str]) -> None:
        coordinator = self.coordinator_of(txn)
        coordinator.check_open(txn)
        names = [topic_name(p).full_name for p in partitions]
        for name in names:
            if await self._owner(name) is not None:
                continue  # another broker's topic: its buffer prepares on the first SEND
            topic = await self._host.get_topic(topic_name(name))
            if topic.txn_buffer is None:
                raise BrokerError(pb.NotAllowedError, f"{name}: {NOT_ENABLED}")
            await topic.txn_buffer.prepare()
        await coordinator.add_partitions(txn, names)

    async def add_subscriptions(self, txn: TxnId, subscriptions: list[tuple[str, str]]) -> None:
        coordinator = self.coordinator_of(txn)
        await coordinator.add_subscriptions(
            txn, [(topic_name(t).full_name, s) for t, s in subscriptions]
        )

    async def end(self, txn: TxnId, commit: bool) -> None:
        await self.coordinator_of(txn).end(txn, commit)

    # --- participants (coordinator decisions; END_TXN_ON_* from other brokers) --------------

    async def _persistent(self, name: str) -> PersistentTopic:
        topic = await self._host.get_topic(topic_name(name), create=False)
        if not isinstance(topic, PersistentTopic) or topic.txn_buffer is None:
            raise BrokerError(pb.NotAllowedError, f"{name}: {NOT_ENABLED}")
        return topic

    async def _owner(self, topic: str) -> str | None:
        """The service URL of the broker serving ``topic``; None when it is this one."""
        answer = await self._host.lookup(topic_name(topic), authoritative=False)
        if answer.service_url == self._host.config.service_url and not answer.redirect:
            return None
        return answer.service_url

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None:
        self.require_enabled()
        owner = await self._owner(topic)
        if owner is not None:
            cmd = pb.BaseCommand(type=pb.BaseCommand.END_TXN_ON_PARTITION)
            r = cmd.endTxnOnPartition
            r.request_id, r.topic = 0, topic
            r.txnid_most_bits, r.txnid_least_bits = txn
            r.txn_action = pb.COMMIT if commit else pb.ABORT
            answer = await remote.request(owner, cmd, pb.BaseCommand.END_TXN_ON_PARTITION_RESPONSE)
            _raise_error(answer.endTxnOnPartitionResponse)
            return
        loaded = await self._persistent(topic)
        assert loaded.txn_buffer is not None
        await loaded.txn_buffer.end(txn, commit)

    async def end_on_subscription(
        self, topic: str, subscription: str, txn: TxnId, commit: bool
    ) -> None:
        self.require_enabled()
        owner = await self._owner(topic)
        if owner is not None:
            cmd = pb.BaseCommand(type=pb.BaseCommand.END_TXN_ON_SUBSCRIPTION)
            r = cmd.endTxnOnSubscription
            r.request_id = 0
            r.subscription.topic, r.subscription.subscription = topic, subscription
            r.txnid_most_bits, r.txnid_least_bits = txn
            r.txn_action = pb.COMMIT if commit else pb.ABORT
            answer = await remote.request(
                owner, cmd, pb.BaseCommand.END_TXN_ON_SUBSCRIPTION_RESPONSE
            )
            _raise_error(answer.endTxnOnSubscriptionResponse)
            return
        loaded = await self._persistent(topic)
        pending = self._pending.get(loaded.full_name)
        if pending is not None:
            await pending.end(subscription, txn, commit)

    # --- topics -------------------------------------------------------------------------------

    async def attach(self, topic: PersistentTopic) -> None:
        """Give a loading topic its buffer and pending acks, recovered."""
        if not self.enabled:
            return
        subs = topic.subscriptions
        buffer = TransactionBuffer(
            topic.managed_ledger,
            topic.full_name,
            on_change=topic.entries_added,
            validate=self._validate,
        )
        await buffer.recover()
        topic.txn_buffer = buffer
        if topic.compaction is not None:  # compaction skips what the buffer hides
            topic.compaction.txn = buffer

        def subscription_of(name: str) -> Subscription | None:
            return subs.subscription(name) if isinstance(subs, TopicSubscriptionsImpl) else None

        pending = PendingAcks(self._host.store, topic.full_name, subscription_of)
        await pending.recover()
        old = self._pending.pop(topic.full_name, None)
        if old is not None:
            old.close()
        self._pending[topic.full_name] = pending
        if isinstance(subs, TopicSubscriptionsImpl):
            subs.txn_buffer = buffer
            subs.txn_acks = pending

    def _validate(self, txn: TxnId, topic: str) -> bool:
        coordinator = self._coordinators.get(txn.most)
        if coordinator is None:
            return False  # a coordinator of another broker: it ends what it added
        meta = coordinator.check_open(txn)
        if topic not in meta.partitions:
            raise BrokerError(
                pb.NotAllowedError, f"{topic} was not added to transaction {txn} (ADD_PARTITION)"
            )
        return True

    async def ack(self, handle: ConsumerHandle, cmd: pb.CommandAck) -> None:
        """A transactional ACK: held until the transaction ends."""
        self.require_enabled()
        if not isinstance(handle, Consumer):
            raise BrokerError(
                pb.NotAllowedError, "transactional acknowledgement not supported here"
            )
        sub = handle.subscription
        if not isinstance(sub, Subscription):
            raise BrokerError(
                pb.NotAllowedError, "transactional acknowledgement not supported here"
            )
        topic = sub.owner.topic.full_name
        pending = self._pending.get(topic)
        if pending is None:
            raise BrokerError(pb.NotAllowedError, f"{topic}: {NOT_ENABLED}")
        txn = TxnId.of(cmd)
        coordinator = self._coordinators.get(txn.most)
        if coordinator is not None:
            meta = coordinator.check_open(txn)
            if (topic, sub.name) not in meta.subscriptions:
                await coordinator.add_subscriptions(txn, [(topic, sub.name)])
        await pending.ack(sub.name, txn, cmd)

    def stats(self) -> list[dict[str, Any]]:
        return [c.stats() for c in self._coordinators.values()]

    def pending_acks(self, topic: str) -> PendingAcks | None:
        """The held transactional acknowledgements of a topic loaded here (by full name)."""
        return self._pending.get(topic)


def _raise_error(
    response: pb.CommandEndTxnOnPartitionResponse | pb.CommandEndTxnOnSubscriptionResponse,
) -> None:
    if response.HasField("error"):
        raise BrokerError(response.error, response.message)
