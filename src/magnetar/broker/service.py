"""The broker service: which topics this broker serves and how clients find them.

It never sees a socket: connections call it with parsed names and commands, and it answers
with topics, lookup answers or :class:`BrokerError`. It owns

* the topic registry (load-or-create once per name, auto topic creation per namespace
  policy, unload on ownership loss or fencing) for both domains: a persistent topic opens
  its managed ledger, a non-persistent one lives in memory only and is dropped after
  ``non_persistent_inactive_s`` without producers and consumers;
* lookup and partitioned-topic metadata: Connect when this broker owns the
  topic's bundle, Connect to the owner when another broker does, and for an unowned bundle
  either take it (this broker is the least loaded, or the lookup is authoritative) or
  Redirect, authoritatively, to the least-loaded live broker;
* the broker's registration and load report under its metadata session; when the session is
  lost, every topic is unloaded and a new session is opened;
* the defaults created at first start (cluster record, tenant ``public``, namespace
  ``public/default``) and broker-generated producer names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from magnetar.broker import access, backlog_quota, policies, replication, schemas
from magnetar.broker.compaction.service import TopicCompaction
from magnetar.broker.compaction.view import CompactedTopic
from magnetar.broker.config import BrokerConfig, group_listeners
from magnetar.broker.contracts import (
    BrokerError,
    TopicSubscriptions,
    TopicSubscriptionsFactory,
)
from magnetar.broker.dedup import Deduplication
from magnetar.broker.enforcement import PolicyEnforcer
from magnetar.broker.ownership import BrokerInfo, Bundle, Ownership, bundle_of
from magnetar.broker.replicated_subscriptions import ReplicatedSubscriptionsController
from magnetar.broker.replicated_subscriptions import Settings as ReplicatedSubscriptionSettings
from magnetar.broker.subscriptions import NonPersistentSubscriptions, TopicSubscriptionsImpl
from magnetar.broker.topic import NonPersistentTopic, PersistentTopic, Topic
from magnetar.broker.transactions.service import TransactionService
from magnetar.common import backoff
from magnetar.common.stats import LatencyWindow
from magnetar.managed_ledger.api import ManagedLedger, ManagedLedgerFactory
from magnetar.metadata import api
from magnetar.wire import pb
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicDomain, TopicName

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    service_url: str
    redirect: bool = False
    authoritative: bool = False
    service_url_tls: str = ""
    """The owner's ``pulsar+ssl://`` URL (a TLS client connects there)."""
    web_service_url: str = ""
    web_service_url_tls: str = ""


def _info(config: BrokerConfig) -> BrokerInfo:
    return BrokerInfo(
        config.broker_id,
        config.service_url,
        config.web_service_url,
        listeners=group_listeners(config.advertised_listeners),
        service_url_tls=config.service_url_tls,
        web_service_url_tls=config.web_service_url_tls,
    )


def _answer(broker: BrokerInfo, listener: str | None, *, redirect: bool = False) -> LookupAnswer:
    """A lookup answer naming ``broker``'s URL for ``listener``; a listener the broker does
    not advertise fails the lookup (as Pulsar: ServiceNotReady naming it)."""
    chosen = broker.listener(listener)
    if chosen is None:
        raise BrokerError(
            pb.ServiceNotReady, f"the broker {broker.broker_id} does not have listener {listener!r}"
        )
    return LookupAnswer(
        chosen.url,
        redirect=redirect,
        authoritative=redirect,
        service_url_tls=chosen.url_tls,
        web_service_url=broker.web_service_url,
        web_service_url_tls=broker.web_service_url_tls,
    )


_PERSISTENT = (TopicDomain.PERSISTENT,)
ALL_DOMAINS = (TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT)


def managed_ledger_name(topic: TopicName) -> str:
    """``tenant/namespace/persistent/local-name``: the topic's managed ledger."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain.value}/{topic.local_name}"


class BrokerCounters:
    """What the broker counts for /metrics beyond its topics (Pulsar's connection, lookup
    and topic-load metrics); updated where the work happens, once per connection, lookup
    or topic load."""

    def __init__(self) -> None:
        self.connections_created = 0
        self.connections_closed = 0
        self.active_connections = 0
        self.connections_established = 0
        """Connections whose CONNECT was answered CONNECTED."""
        self.connections_failed = 0
        """Connections closed before CONNECTED (refused credentials or roles, a command
        before CONNECT, a client that went away first)."""
        self.lookup_answers = 0
        self.lookup_redirects = 0
        self.lookup_failures = 0
        self.lookup_pending = 0
        self.lookup_latency_ms = LatencyWindow()
        self.topic_load_ms = LatencyWindow(keep=True)
        self.topic_load_failed = 0
        self.topic_load_failed_in_period = 0
        self._topic_load_failed_before = 0
        self.topic_load_pending = 0
        self.publish_latency_ms = LatencyWindow()
        """From a SEND taken to its receipt, every topic of this broker."""

    def connection_opened(self) -> None:
        self.connections_created += 1
        self.active_connections += 1

    def connection_closed(self, *, established: bool) -> None:
        self.connections_closed += 1
        self.active_connections -= 1
        if not established:
            self.connections_failed += 1

    def refresh(self) -> None:
        """End of a statistics period: the summaries' quantiles move on."""
        self.lookup_latency_ms.refresh()
        self.topic_load_ms.refresh()
        self.topic_load_failed_in_period = self.topic_load_failed - self._topic_load_failed_before
        self._topic_load_failed_before = self.topic_load_failed
        self.publish_latency_ms.refresh()


class BrokerService:
    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: api.MetadataStore,
        managed_ledgers: ManagedLedgerFactory,
        subscriptions_factory: TopicSubscriptionsFactory | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.managed_ledgers = managed_ledgers
        self.subscriptions_factory = subscriptions_factory or TopicSubscriptionsImpl
        self.policies = policies.PolicyCache(store)
        self.access = access.Access(config.security, self.policies)
        """Authentication and authorization (docs/security.md)."""
        self.policy_generation = 0
        """Policy changes made through this broker (the enforcer re-reads on a new one)."""
        self.schemas = schemas.SchemaRegistry(store)
        self.me = _info(config)
        self.ownership = Ownership(store, self.me)
        self.transactions = TransactionService(self)
        self.remote_clusters = replication.RemoteClusters(store, config.security)
        """Connections to the other clusters, for the replicators (docs/geo-replication.md)."""
        self.topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._retiring: dict[str, asyncio.Task[None]] = {}
        """Topics out of service and still closing, by name: a new load of one waits for
        the close (:meth:`_retire`)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._producer_prefix = "0"
        self._producer_counter = 0
        self._closing = False
        self._session_generation = 0
        self.started_at = time.time()
        self.counters = BrokerCounters()

    @property
    def healthy(self) -> bool:
        """Serving: the broker holds its metadata session (the health check's answer)."""
        session = self.ownership.session
        return session is not None and not session.lost

    # --- lifecycle ---------------------------------------------------------------------------

    def reconfigure(self, config: BrokerConfig) -> None:
        """Replace the configuration before :meth:`start` (e.g. the real bound ports)."""
        self.config = config
        self.me = _info(config)
        self.ownership.me = self.me

    async def start(self) -> None:
        cfg = self.config
        await policies.ensure_defaults(
            self.store,
            cluster=cfg.cluster_name,
            service_url=cfg.service_url,
            web_service_url=cfg.web_service_url,
            num_bundles=cfg.default_bundles,
        )
        self._producer_prefix = str(await self.store.next_id("producer-name"))
        self.transactions = TransactionService(self)  # the configuration is final now
        await self.transactions.start()
        await self._open_session()
        self._background = [
            asyncio.create_task(self._rates_loop(), name="broker-rates"),
            asyncio.create_task(self._load_loop(), name="broker-load-report"),
            asyncio.create_task(PolicyEnforcer(self).run(), name="broker-policies"),
        ]
        log.info("broker %s started (%s)", cfg.broker_id, cfg.service_url)

    async def _open_session(self) -> None:
        session = await self.ownership.start(
            self.config.session_ttl_s, wait=self.config.session_ttl_s * 1.5
        )
        self._session_generation += 1
        generation = self._session_generation
        session.on_lost(lambda: self._session_lost(generation))

    def _session_lost(self, generation: int) -> None:
        if self._closing or generation != self._session_generation:
            return
        log.warning("broker %s: metadata session lost; unloading every topic", self.me.broker_id)
        self.ownership.lost()
        self._spawn(self._recover_session())

    async def _recover_session(self) -> None:
        await self.unload_all(reason="metadata session lost")
        await self.transactions.unload_coordinators()  # their bundles may go elsewhere
        delays = backoff.Backoff(initial_s=0.5, max_s=5.0)
        while not self._closing:
            try:
                await self._open_session()
                log.info("broker %s: registered again under a new session", self.me.broker_id)
                return
            except Exception as err:
                log.warning("broker %s: cannot open a new session yet: %s", self.me.broker_id, err)
                await asyncio.sleep(delays.next())

    async def close(self) -> None:
        """Unload every topic (clients get CLOSE_PRODUCER/CLOSE_CONSUMER and look up
        again), then drop registration and ownerships."""
        self._closing = True
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.unload_all(reason="broker shutting down")
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)
        await self.transactions.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.remote_clusters.close()
        await self.ownership.stop()

    def policies_changed(self) -> None:
        """Namespace, topic or partitioned-topic records changed through this broker: drop
        the policy cache, and the enforcer re-reads the loaded topics' policies at once."""
        self.policies.invalidate()
        self.policy_generation += 1

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _retire(self, topic: Topic, *, reason: str) -> asyncio.Task[None]:
        """Take ``topic`` out of service and close it. Until the close is done a new load of
        its name waits (:meth:`get_topic`): a client reconnecting at once must not get a
        topic sharing the managed ledger the old one still settles its in-flight adds on,
        nor deduplication state replayed before those adds were stored."""
        name = topic.full_name
        if self.topics.get(name) is topic:
            del self.topics[name]
        closing = asyncio.get_running_loop().create_task(
            topic.close(reason=reason), name=f"close {name}"
        )
        self._retiring[name] = closing

        def retired(task: asyncio.Task[None]) -> None:
            if self._retiring.get(name) is task:
                del self._retiring[name]
            if not task.cancelled() and task.exception() is not None:
                log.warning("%s: closing failed: %r", name, task.exception())

        closing.add_done_callback(retired)
        return closing

    async def unload_all(self, *, reason: str) -> None:
        closing = [self._retire(t, reason=reason) for t in list(self.topics.values())]
        await asyncio.gather(*closing, return_exceptions=True)

    async def unload(self, name: str, *, reason: str = "unload") -> bool:
        topic = self.topics.get(name)
        if topic is None:
            return False
        await asyncio.shield(self._retire(topic, reason=reason))
        return True

    async def unload_bundle(self, bundle: Bundle) -> int:
        """Close the topics of ``bundle`` served here and give up its ownership (``namespaces
        unload``): their clients reconnect through lookup, which places the bundle again
        (possibly here). Lookups of the bundle answer ServiceNotReady meanwhile. Returns how
        many topics were closed."""
        self.ownership.releasing.add(bundle)
        try:
            names = [
                name
                for name, topic in list(self.topics.items())
                if topic.name.namespace_name == bundle.namespace_name
                and await self.bundle(topic.name) == bundle
            ]
            await asyncio.gather(*(self.unload(n, reason="bundle unloaded") for n in names))
            await self.ownership.release(bundle)
        finally:
            self.ownership.releasing.discard(bundle)
        log.info("bundle %s unloaded: %d topics closed", bundle, len(names))
        return len(names)

    async def split_bundle(self, bundle: Bundle, boundary: int, *, unload: bool) -> list[Bundle]:
        """Split the owned ``bundle`` at ``boundary`` (Pulsar's ``split-bundle``): this broker
        takes the two halves' ownership first, writes the namespace's new boundaries by
        compare-and-swap, and keeps serving the bundle's topics in their half, so clients
        see nothing (with ``unload`` the halves are then unloaded and placed again). Lookups
        of the old bundle answer ServiceNotReady until every broker's policy cache has
        expired (policies.CACHE_TTL_S), so none serves a topic by the old layout; then the
        old ownership goes. Returns the two halves."""
        halves = [
            Bundle(bundle.tenant, bundle.namespace, bundle.lower, boundary),
            Bundle(bundle.tenant, bundle.namespace, boundary, bundle.upper),
        ]
        self.ownership.releasing.add(bundle)
        taken: list[Bundle] = []
        try:
            for half in halves:
                owner = await self._acquire(half)
                if owner.broker.broker_id != self.me.broker_id:
                    raise BrokerError(pb.ServiceNotReady, f"bundle {half} is owned elsewhere")
                taken.append(half)
            await policies.replace_boundary(
                self.store, bundle.tenant, bundle.namespace, old=bundle.range, boundary=boundary
            )
            self.policies_changed()
            await asyncio.sleep(policies.CACHE_TTL_S * 1.5)
            await self.ownership.release(bundle)
        except BaseException:
            for half in taken:
                await self.ownership.release(half)
            raise
        finally:
            self.ownership.releasing.discard(bundle)
        log.info("bundle %s split at 0x%08x", bundle, boundary)
        if unload:
            for half in halves:
                await self.unload_bundle(half)
        return halves

    def _check_not_releasing(self, bundle: Bundle) -> None:
        if bundle in self.ownership.releasing:
            raise BrokerError(pb.ServiceNotReady, f"bundle {bundle} is being unloaded; retry")

    def _topic_fenced(self, topic: Topic) -> None:
        if self.topics.get(topic.full_name) is topic:
            self._retire(topic, reason="managed ledger fenced")

    # --- names and namespaces -----------------------------------------------------------------

    @staticmethod
    def parse_topic(name: str) -> TopicName:
        """Parse a client's topic name; BrokerError(InvalidTopicName) when it is bad."""
        try:
            topic = TopicName.parse(name)
        except InvalidTopicNameError as err:
            raise BrokerError(pb.InvalidTopicName, str(err)) from None
        return topic

    async def namespace_policies(self, topic: TopicName) -> policies.NamespacePolicies:
        ns = await self.policies.namespace(topic.tenant, topic.namespace)
        if ns is None:
            raise BrokerError(pb.TopicNotFound, f"namespace {topic.namespace_name} does not exist")
        return ns

    async def schema_policy(self, topic: TopicName) -> schemas.SchemaPolicy:
        """The schema policies of ``topic``'s namespace."""
        return schemas.SchemaPolicy.of((await self.namespace_policies(topic)).raw)

    async def bundle(self, topic: TopicName) -> Bundle:
        ns = await self.namespace_policies(topic)
        return bundle_of(topic, ns.boundaries)

    async def _auto_creation(self, topic: TopicName) -> policies.AutoTopicCreation:
        ns = await self.namespace_policies(topic)
        if ns.auto_topic_creation is not None:
            return ns.auto_topic_creation
        cfg = self.config
        return policies.AutoTopicCreation(
            allowed=cfg.allow_auto_topic_creation,
            partitioned=cfg.auto_topic_creation_type == "partitioned",
            default_partitions=cfg.default_num_partitions,
        )

    # --- lookup -------------------------------------------------------------------------------

    async def lookup(
        self, topic: TopicName, *, authoritative: bool, listener: str | None = None
    ) -> LookupAnswer:
        """Where ``topic`` is served; ``listener`` (the client's listenerName) picks which
        of the serving broker's advertised listeners the answer names."""
        c = self.counters
        c.lookup_pending += 1
        started = time.perf_counter()
        try:
            answer = await self._lookup(topic, authoritative=authoritative, listener=listener)
        except BaseException:
            c.lookup_failures += 1
            raise
        finally:
            c.lookup_pending -= 1
        c.lookup_latency_ms.add((time.perf_counter() - started) * 1000.0)
        if answer.redirect:
            c.lookup_redirects += 1
        else:
            c.lookup_answers += 1
        return answer

    async def _lookup(
        self, topic: TopicName, *, authoritative: bool, listener: str | None
    ) -> LookupAnswer:
        bundle = await self.bundle(topic)
        self._check_not_releasing(bundle)
        if self.ownership.is_owned(bundle):
            return _answer(self.me, listener)
        owner = await self.ownership.owner_of(bundle)
        if owner is None:
            if not authoritative:
                target = await self.ownership.least_loaded()
                if target.broker_id != self.me.broker_id:
                    return _answer(target, listener, redirect=True)
            owner = await self._acquire(bundle)
        if owner.broker.broker_id == self.me.broker_id:
            if self.ownership.is_owned(bundle):
                return _answer(self.me, listener)
            # a registration of this broker id under an old session: it expires with its lease
            raise BrokerError(pb.ServiceNotReady, f"bundle {bundle} is being released; retry")
        return _answer(owner.broker, listener)

    async def _acquire(self, bundle: Bundle) -> Any:
        try:
            return await self.ownership.try_acquire(bundle)
        except api.SessionLostError:
            raise BrokerError(pb.ServiceNotReady, "broker has no metadata session") from None

    async def check_owned(self, topic: TopicName) -> None:
        """Raise ServiceNotReady unless this broker owns the topic (taking an unowned
        bundle, as a lookup would have)."""
        bundle = await self.bundle(topic)
        self._check_not_releasing(bundle)
        if self.ownership.is_owned(bundle):
            return
        owner = await self._acquire(bundle)
        if owner.broker.broker_id != self.me.broker_id or not self.ownership.is_owned(bundle):
            raise BrokerError(
                pb.ServiceNotReady, f"topic {topic} is not served by this broker; look it up"
            )

    async def partitioned_metadata(self, topic: TopicName, *, auto_create: bool = True) -> int:
        """Partitions of ``topic`` (0: not partitioned), auto-creating partitioned-topic
        metadata when the namespace asks for partitioned auto-creation."""
        if topic.is_partition:
            return 0
        await self.namespace_policies(topic)
        stored = await self.policies.partitions(topic)
        if stored is not None:
            return stored
        if not auto_create:
            # PIP-344: the client asked not to create anything; a topic that exists neither
            # as a partitioned nor as a plain topic is TopicNotFound, as Pulsar answers.
            if topic.full_name in self.topics or await self.managed_ledgers.exists(
                managed_ledger_name(topic)
            ):
                return 0
            raise BrokerError(pb.TopicNotFound, f"topic {topic} does not exist")
        auto = await self._auto_creation(topic)
        if not (auto.allowed and auto.partitioned):
            return 0
        if topic.full_name in self.topics or await self.managed_ledgers.exists(
            managed_ledger_name(topic)
        ):
            return 0  # a non-partitioned topic of that name exists
        return await self.policies.create_partitioned(topic, max(1, auto.default_partitions))

    # --- topics -------------------------------------------------------------------------------

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> Topic:
        """The loaded topic, loading (and creating, when allowed) it on first use.
        ``explicit``: an admin creation, allowed whatever the auto-creation policy.
        Raises BrokerError: ServiceNotReady (not ours), TopicNotFound, PersistenceError."""
        name = topic.full_name
        found = self.topics.get(name)
        if found is not None:
            return found
        retiring = self._retiring.get(name)
        if retiring is not None and not retiring.done():  # a client reconnecting at once
            log.info("%s: loaded again while still closing: waits for the close", name)
            await asyncio.wait([retiring])
            return await self.get_topic(topic, create=create, explicit=explicit)
        pending = self._loading.get(name)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[name] = pending
            try:
                loaded = await self._load(topic, create=create, explicit=explicit)
            except BaseException as err:
                pending.set_exception(err)
                pending.exception()  # mark retrieved: waiters (if any) re-raise it
                raise
            finally:
                self._loading.pop(name, None)
            pending.set_result(loaded)
            return loaded
        return await asyncio.shield(pending)

    async def _load(self, topic: TopicName, *, create: bool, explicit: bool = False) -> Topic:
        c = self.counters
        c.topic_load_pending += 1
        started = time.perf_counter()
        try:
            loaded = await self._load_topic(topic, create=create, explicit=explicit)
        except BaseException:
            c.topic_load_failed += 1
            raise
        finally:
            c.topic_load_pending -= 1
        c.topic_load_ms.add((time.perf_counter() - started) * 1000.0)
        return loaded

    async def _load_topic(self, topic: TopicName, *, create: bool, explicit: bool) -> Topic:
        if self._closing:
            raise BrokerError(pb.ServiceNotReady, "broker is shutting down")
        await self.check_owned(topic)
        if topic.domain is TopicDomain.NON_PERSISTENT:
            await self._check_may_create(topic, create=create, explicit=explicit)
            return await self._register(
                topic,
                NonPersistentTopic(name=topic, subscriptions=NonPersistentSubscriptions(topic)),
            )
        ml_name = managed_ledger_name(topic)
        if not await self.managed_ledgers.exists(ml_name):
            await self._check_may_create(topic, create=create, explicit=explicit)
        effective = await policies.effective_policies(self.store, self.policies, topic)
        config = policies.retention_config(
            self.config.managed_ledger, effective.get("retention_policies")
        )
        try:
            ml = await self.managed_ledgers.open(ml_name, config)
        except Exception as err:
            log.warning("%s: cannot open managed ledger: %s", topic, err)
            raise BrokerError(pb.PersistenceError, f"cannot open topic {topic}: {err}") from None
        view = CompactedTopic(ml)
        await view.load()
        subscriptions: TopicSubscriptions = self.subscriptions_factory(
            topic=topic,
            managed_ledger=ml,
            compacted=view,
            precise_flow_control=self.config.precise_dispatcher_flow_control,
        )
        dedup = self.deduplication(ml)
        replicators = replication.TopicReplication(
            topic=topic.full_name,
            managed_ledger=ml,
            local=self.config.cluster_name,
            clusters=self.remote_clusters,
            window=self.config.replication_producer_queue_size,
        )
        loaded = PersistentTopic(
            name=topic,
            managed_ledger=ml,
            subscriptions=subscriptions,
            on_fenced=self._topic_fenced,
            dedup=dedup,
            compaction=TopicCompaction(ml, view),
            replication=replicators,
        )
        loaded.apply_limits(*policies.limits(effective))
        loaded.backlog_quotas = backlog_quota.resolve(effective, self.config)
        replicators.transactions = lambda: loaded.txn_buffer
        self._replicated_subscriptions(loaded, subscriptions, replicators)
        try:
            await policies.apply_deduplication(
                dedup,
                effective,
                default=self.config.deduplication_enabled,
                local_cluster=self.config.cluster_name,
            )
        except Exception as err:
            await loaded.close(reason="deduplication state could not be recovered")
            raise BrokerError(
                pb.PersistenceError, f"{topic}: recovering deduplication state: {err}"
            ) from None
        try:
            await self.transactions.attach(loaded)
        except Exception as err:
            await loaded.close(reason="transaction state could not be recovered")
            raise BrokerError(
                pb.PersistenceError, f"{topic}: recovering transaction state: {err}"
            ) from None
        try:  # (before any producer: the replicators' cursors see every entry from now on)
            await replicators.update(
                replication.remote_clusters(effective, self.config.cluster_name)
            )
        except Exception as err:
            await loaded.close(reason="replicators could not be started")
            raise BrokerError(
                pb.PersistenceError, f"{topic}: starting replicators: {err}"
            ) from None
        return await self._register(topic, loaded)

    def _replicated_subscriptions(
        self,
        loaded: PersistentTopic,
        subscriptions: TopicSubscriptions,
        replicators: replication.TopicReplication,
    ) -> None:
        """The topic's replicated-subscriptions controller (docs/geo-replication.md), when
        the broker enables them (``enableReplicatedSubscriptions``)."""
        c = self.config
        if not c.replicated_subscriptions_enabled or not isinstance(
            subscriptions, TopicSubscriptionsImpl
        ):
            return
        controller = ReplicatedSubscriptionsController(
            topic=loaded.full_name,
            managed_ledger=loaded.managed_ledger,
            local=c.cluster_name,
            settings=ReplicatedSubscriptionSettings(
                enabled=True,
                snapshot_frequency_s=c.replicated_subscriptions_snapshot_frequency_s,
                snapshot_timeout_s=c.replicated_subscriptions_snapshot_timeout_s,
                max_cached_snapshots=c.replicated_subscriptions_snapshot_max_cached,
            ),
            remotes=lambda: list(replicators.replicators),
            subscriptions=subscriptions,
            published=lambda: loaded.msg_in,
            entries_added=loaded.entries_added,
        )
        loaded.replicated_subscriptions = controller
        subscriptions.snapshots = controller
        if subscriptions.replicated():  # (recovered cursors flagged before a restart or move)
            controller.ensure_running()

    def deduplication(self, ml: ManagedLedger) -> Deduplication:
        """A topic's deduplication state, off until its policy turns it on."""
        c = self.config
        return Deduplication(
            ml,
            entries_interval=c.deduplication_entries_interval,
            inactivity_s=c.deduplication_producer_inactivity_s,
            max_producers=c.deduplication_max_producers,
        )

    async def _register(self, topic: TopicName, loaded: Topic) -> Topic:
        """Serve ``loaded`` unless ownership was lost while it was loading."""
        bundle = await self.bundle(topic)
        if self._closing or not self.ownership.is_owned(bundle):
            await loaded.close(reason="ownership lost while loading")
            raise BrokerError(pb.ServiceNotReady, f"topic {topic} is no longer served here")
        loaded.publish_latency_ms = self.counters.publish_latency_ms
        self.topics[topic.full_name] = loaded
        log.info("%s: loaded", topic)
        return loaded

    async def _check_may_create(
        self, topic: TopicName, *, create: bool, explicit: bool = False
    ) -> None:
        if topic.is_partition:
            partitions = await self.policies.partitions(topic)
            if partitions is not None:
                if topic.partition_index < partitions:
                    return
                raise BrokerError(
                    pb.TopicNotFound,
                    f"{topic}: partition {topic.partition_index} of a topic with "
                    f"{partitions} partitions",
                )
        elif await self.policies.partitions(topic):
            raise BrokerError(
                pb.NotAllowedError, f"{topic} is a partitioned topic: use its partitions"
            )
        if not create:
            raise BrokerError(pb.TopicNotFound, f"topic {topic} does not exist")
        if explicit:
            return
        auto = await self._auto_creation(topic)
        if not auto.allowed:
            raise BrokerError(
                pb.TopicNotFound, f"topic {topic} does not exist (auto-creation is disabled)"
            )

    def new_producer_name(self) -> str:
        """Unique across brokers and restarts: ``<cluster>-<store id>-<counter>``."""
        self._producer_counter += 1
        return f"{self.config.cluster_name}-{self._producer_prefix}-{self._producer_counter}"

    async def topics_of_namespace(
        self, tenant: str, namespace: str, *, domains: tuple[TopicDomain, ...] = _PERSISTENT
    ) -> list[str]:
        """Full names of the namespace's topics of ``domains`` (partitions listed one by
        one): persistent topics as stored, non-persistent ones as loaded here, plus every
        partition of the partitioned topics of those domains."""
        policies.check_namespace_name(tenant, namespace)
        names: set[str] = set()
        if TopicDomain.PERSISTENT in domains:
            prefix = f"{tenant}/{namespace}/persistent"
            with contextlib.suppress(Exception):
                for ml_name in await self.managed_ledgers.list(prefix):
                    local = ml_name.rsplit("/", 1)[-1]
                    names.add(f"persistent://{tenant}/{namespace}/{local}")
        for domain in domains:
            for local, partitions in (
                await policies.partitioned_topics(self.store, tenant, namespace, domain.value)
            ).items():
                for i in range(partitions):
                    names.add(f"{domain.value}://{tenant}/{namespace}/{local}-partition-{i}")
        for name in self.topics:
            t = TopicName.parse(name)
            if t.tenant == tenant and t.namespace == namespace and t.domain in domains:
                names.add(name)
        return sorted(names)

    # --- background ---------------------------------------------------------------------------

    async def _rates_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            now = time.monotonic()
            self.counters.refresh()
            self.schemas.refresh_stats()
            for topic in list(self.topics.values()):
                topic.update_rates(now)
                if isinstance(topic, NonPersistentTopic):
                    self._collect_if_inactive(topic, now)

    def _collect_if_inactive(self, topic: NonPersistentTopic, now: float) -> None:
        """Drop a non-persistent topic nobody produced to or consumed from for a while (it
        holds nothing; the next producer or consumer loads it again)."""
        limit = self.config.non_persistent_inactive_s
        if not topic.idle():
            topic.idle_since = now
            return
        if limit <= 0 or now - topic.idle_since < limit:
            return
        if self.topics.get(topic.full_name) is topic:
            log.info("%s: inactive, dropped", topic.full_name)
            self._retire(topic, reason="inactive")

    async def _load_loop(self) -> None:
        while True:
            try:
                await self.ownership.report_load(
                    {
                        "topics": len(self.topics),
                        "msgRateIn": sum(t.rate_in for t in self.topics.values()),
                        "msgThroughputIn": sum(t.throughput_in for t in self.topics.values()),
                        "timestamp": int(time.time() * 1000),
                    }
                )
            except Exception as err:
                log.debug("load report failed: %s", err)
            await asyncio.sleep(self.config.load_report_interval_s)
