"""Who answers a topic administration call: names resolved, existence, ownership.

Why this module exists: every topic operation starts the same way -- resolve the topic's name
(its namespace must exist), check it exists, and make sure this broker is the one that must
answer (its owner; another broker's owner is answered with :class:`~.errors.OwnedElsewhere`).
Operations spanning topics several brokers own (partitioned stats, deleting a partitioned
topic) ask the other owners through :class:`Peers`, which the caller provides (the admin API
passes its HTTP client, ``broker/admin/remote.py``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService, managed_ledger_name
from magnetar.broker.topic import PersistentTopic, Topic
from magnetar.broker.topic_ops import errors
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire import topics as topic_names
from magnetar.wire.errors import InvalidTopicNameError
from magnetar.wire.topics import TopicDomain, TopicName


class Peers(Protocol):
    """What topic administration asks of the broker owning a topic when that is another
    broker. Each call raises :class:`~.errors.PeerRefused` with the peer's status and
    reason when it refuses, :class:`~.errors.Unavailable` when it cannot be reached."""

    async def bundle_topics(
        self, web_url: str, *, domain: TopicDomain, tenant: str, namespace: str, bundle: str
    ) -> list[str]:
        """The topics the peer serves in one bundle of a namespace."""
        ...

    async def stats(self, web_url: str, topic: TopicName) -> dict[str, Any]:
        """The topic's stats, as the peer serving it reports them."""
        ...

    async def delete(self, web_url: str, topic: TopicName, *, force: bool) -> None:
        """Delete the topic on the peer (done when it does not exist there)."""
        ...

    async def unload(self, web_url: str, topic: TopicName) -> None:
        """Unload the topic on the peer (done when it is not loaded there)."""
        ...

    async def compact(self, web_url: str, topic: TopicName) -> None:
        """Start a compaction of the topic on the peer (done when one is running there)."""
        ...

    async def unload_bundle(
        self, web_url: str, *, tenant: str, namespace: str, bundle: str
    ) -> None:
        """Unload one bundle the peer owns (done when it no longer does)."""
        ...

    async def topic_call(
        self, web_url: str, method: str, topic: TopicName, suffix: str, *, body: Any = None
    ) -> Any:
        """``method`` on the topic's admin path followed by ``suffix`` (``/subscriptions``,
        ``/subscription/s/skip_all``, ...) with an optional JSON ``body``, on the peer owning
        the topic: its decoded JSON answer (None when empty)."""
        ...


@dataclasses.dataclass(frozen=True)
class Scope:
    """One administration call's context: the broker answering it, the way to its peers,
    and whether the caller was sent here as the owner (``authoritative``: no lookup
    redirect back)."""

    service: BrokerService
    peers: Peers
    authoritative: bool = False


def check_name(value: str, what: str) -> str:
    """``value`` as a tenant or namespace name; InvalidName when it is not one."""
    try:
        return topic_names.check_name_part(value, what)
    except InvalidTopicNameError as err:
        raise errors.InvalidName(str(err)) from None


def domain(value: str) -> TopicDomain:
    """The topic domain named ``value`` (``persistent`` or ``non-persistent``)."""
    if value not in ("persistent", "non-persistent"):
        raise errors.NotFound(f"unknown topic domain {value!r}")
    return TopicDomain(value)


async def namespace(svc: BrokerService, tenant: str, ns: str) -> tuple[str, str]:
    """The checked names of an existing namespace (NotFound when it does not exist)."""
    tenant = check_name(tenant, "tenant")
    ns = check_name(ns, "namespace")
    if await svc.store.get(keys.namespace(tenant, ns)) is None:
        raise errors.NotFound(f"namespace {tenant}/{ns} does not exist")
    return tenant, ns


async def topic_name(
    svc: BrokerService, *, domain_name: str, tenant: str, namespace_name: str, local: str
) -> TopicName:
    """The topic named by its parts (NotFound: unknown domain or namespace; InvalidName)."""
    kind = domain(domain_name)
    tenant, ns = await namespace(svc, tenant, namespace_name)
    try:
        return TopicName.parse(f"{kind.value}://{tenant}/{ns}/{local}")
    except InvalidTopicNameError as err:
        raise errors.InvalidName(f"invalid topic name {local!r}: {err}") from None


def partitioned_key(topic: TopicName) -> str:
    return keys.partitioned_topic(
        topic.tenant, topic.namespace, topic.domain.value, topic.local_name
    )


async def partitions(svc: BrokerService, topic: TopicName) -> tuple[int, api.Version] | None:
    """A partitioned topic's partition count and record version; None when not partitioned."""
    record = await svc.store.get(partitioned_key(topic))
    if record is None:
        return None
    return int(json.loads(record.value).get("partitions", 0)), record.version


async def exists(svc: BrokerService, topic: TopicName) -> bool:
    """Loaded here, or stored (persistent). A non-persistent topic exists only on the broker
    serving it: for this broker, whether it is loaded here (see :func:`served_elsewhere`)."""
    if topic.full_name in svc.topics:
        return True
    if not topic.is_persistent:
        return False
    return bool(await svc.managed_ledgers.exists(managed_ledger_name(topic)))


async def owner_elsewhere(svc: BrokerService, topic: TopicName) -> str | None:
    """The web URL of the broker owning ``topic`` when that is another broker; None when this
    broker owns it or nobody does."""
    owner = await svc.ownership.owner_of(await svc.bundle(topic))
    if owner is None or owner.broker.broker_id == svc.me.broker_id:
        return None
    if not owner.broker.web_service_url:
        raise errors.Unavailable(f"topic {topic.full_name} is owned by a broker without a web URL")
    return owner.broker.web_url(tls=svc.config.security.broker_client_tls)


async def served_elsewhere(svc: BrokerService, topic: TopicName) -> str | None:
    """The web URL of the broker owning a non-persistent topic's bundle when that is another
    broker (it serves the topic if anyone does); None for persistent topics, which exist in
    storage whoever owns them."""
    if topic.is_persistent or topic.full_name in svc.topics:
        return None
    return await owner_elsewhere(svc, topic)


async def redirect_to_owner(scope: Scope, topic: TopicName) -> None:
    """OwnedElsewhere when another broker owns the topic (taking an unowned bundle, as a
    lookup would); nothing when this broker does."""
    svc = scope.service
    answer = await svc.lookup(topic, authoritative=scope.authoritative)
    if answer.service_url == svc.me.service_url:
        return
    brokers = await svc.ownership.live_brokers()
    for info in brokers.values():
        if info.service_url == answer.service_url and info.web_service_url:
            raise errors.OwnedElsewhere(info.web_service_url, tls_url=info.web_service_url_tls)
    raise errors.Unavailable(f"topic {topic.full_name} is owned by a broker not reachable now")


async def declared_partition(svc: BrokerService, topic: TopicName) -> bool:
    """Whether ``topic`` is a persistent partition its partitioned topic's metadata counts
    (it exists for the admin API, as Pulsar's partitions do from the topic's creation,
    though its managed ledger is made on first use)."""
    if not (topic.is_partition and topic.is_persistent):
        return False
    found = await partitions(svc, topic.base_name)
    return found is not None and topic.partition_index < found[0]


async def check_exists(scope: Scope, topic: TopicName) -> None:
    """NotFound unless the topic exists (or is a partition of an existing partitioned
    topic); OwnedElsewhere for a non-persistent topic another broker serves."""
    svc = scope.service
    if await exists(svc, topic) or await declared_partition(svc, topic):
        return
    owner = await served_elsewhere(svc, topic)
    if owner is not None:
        raise errors.OwnedElsewhere(owner)
    raise errors.NotFound(f"topic {topic.full_name} does not exist")


async def loaded(scope: Scope, topic: TopicName) -> Topic:
    """The topic, loaded on this broker (its owner); NotFound when it does not exist."""
    await check_exists(scope, topic)
    await redirect_to_owner(scope, topic)
    try:
        return await scope.service.get_topic(topic, create=False)
    except BrokerError as err:
        if err.code == pb.TopicNotFound:
            raise errors.NotFound(err.message) from None
        raise


def needs_storage(topic: TopicName, operation: str) -> None:
    """NotAllowed for an operation on stored messages asked of a non-persistent topic, with
    the reason Pulsar gives (``operation``: "Skip messages on", "Termination of", ...)."""
    if not topic.is_persistent:
        raise errors.NotAllowed(f"{operation} a non-persistent topic is not allowed")


async def stored(scope: Scope, topic: TopicName, operation: str) -> PersistentTopic:
    """The persistent topic, loaded here; NotAllowed for a non-persistent one."""
    needs_storage(topic, operation)
    found = await loaded(scope, topic)
    assert isinstance(found, PersistentTopic)
    return found
