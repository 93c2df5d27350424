"""Listing, creating, deleting, unloading and terminating topics.

Why this module exists: the lifecycle of one topic (or partition) as typed calls for the
admin API's routes and for the namespace deletion, which deletes every topic on its owner.
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.broker.ownership import Bundle, bundles_of, topic_hash
from magnetar.broker.service import BrokerService, managed_ledger_name
from magnetar.broker.topic_ops import errors, fanout, scope, stats
from magnetar.broker.topic_ops.scope import Scope
from magnetar.managed_ledger.api import Position
from magnetar.metadata import keys
from magnetar.wire.topics import TopicDomain, TopicName


async def bundles(svc: BrokerService, tenant: str, ns: str) -> list[Bundle]:
    """The bundles of an existing namespace."""
    found = await svc.policies.namespace(tenant, ns)
    if found is None:
        raise errors.NotFound(f"namespace {tenant}/{ns} does not exist")
    return bundles_of(tenant, ns, found.boundaries)


async def list_topics(s: Scope, *, domain: TopicDomain, tenant: str, ns: str) -> list[str]:
    """The topics of a namespace in one domain (partitions listed one by one), sorted;
    non-persistent ones as the brokers owning the namespace's bundles serve them."""
    svc = s.service
    tenant, ns = await scope.namespace(svc, tenant, ns)
    names = set(await svc.topics_of_namespace(tenant, ns, domains=(domain,)))
    if domain is TopicDomain.NON_PERSISTENT:
        for bundle in await bundles(svc, tenant, ns):
            if svc.ownership.is_owned(bundle):
                continue  # its topics are in the local list
            owner = await svc.ownership.owner_of(bundle)
            if owner is None or owner.broker.broker_id == svc.me.broker_id:
                continue
            if not owner.broker.web_service_url:
                raise errors.Unavailable(f"bundle {bundle} is owned by a broker without a web URL")
            names.update(
                await s.peers.bundle_topics(
                    owner.broker.web_url(tls=svc.config.security.broker_client_tls),
                    domain=domain,
                    tenant=tenant,
                    namespace=ns,
                    bundle=bundle.range,
                )
            )
    return sorted(names)


async def list_bundle_topics(
    s: Scope, *, domain: TopicDomain, tenant: str, ns: str, bundle_range: str
) -> list[str]:
    """The topics of one namespace bundle that this broker serves now; OwnedElsewhere when
    another broker owns the bundle (unless the call is authoritative); none when nobody
    owns it (no topic of it is loaded anywhere)."""
    svc = s.service
    tenant, ns = await scope.namespace(svc, tenant, ns)
    bundle = next((b for b in await bundles(svc, tenant, ns) if b.range == bundle_range), None)
    if bundle is None:
        raise errors.InvalidName(f"{bundle_range!r} is not a bundle of namespace {tenant}/{ns}")
    if not svc.ownership.is_owned(bundle):
        owner = await svc.ownership.owner_of(bundle)
        if owner is not None and owner.broker.broker_id != svc.me.broker_id:
            if not s.authoritative:
                raise errors.OwnedElsewhere(
                    owner.broker.web_service_url, tls_url=owner.broker.web_service_url_tls
                )
        return []
    ns_name = f"{tenant}/{ns}"
    return sorted(
        [
            t.full_name
            for t in list(svc.topics.values())
            if t.name.domain is domain
            and t.name.namespace_name == ns_name
            and await svc.bundle(t.name) == bundle
        ]
    )


async def _bundle(svc: BrokerService, tenant: str, ns: str, bundle_range: str) -> Bundle:
    bundle = next((b for b in await bundles(svc, tenant, ns) if b.range == bundle_range), None)
    if bundle is None:
        raise errors.InvalidName(f"{bundle_range!r} is not a bundle of namespace {tenant}/{ns}")
    return bundle


async def unload_bundle(s: Scope, *, tenant: str, ns: str, bundle_range: str) -> None:
    """Unload one bundle (Pulsar's ``namespaces unload --bundle``): its owner closes the
    bundle's topics and gives up the ownership, so clients reconnect through lookup and the
    bundle is placed again. OwnedElsewhere (307) when another broker owns it, unless the call
    is authoritative; nothing to do when nobody owns it."""
    svc = s.service
    tenant, ns = await scope.namespace(svc, tenant, ns)
    bundle = await _bundle(svc, tenant, ns, bundle_range)
    if svc.ownership.is_owned(bundle):
        await svc.unload_bundle(bundle)
        return
    owner = await svc.ownership.owner_of(bundle)
    if owner is not None and owner.broker.broker_id != svc.me.broker_id and not s.authoritative:
        raise errors.OwnedElsewhere(
            owner.broker.web_service_url, tls_url=owner.broker.web_service_url_tls
        )


SPLIT_ALGORITHMS = ("range_equally_divide", "topic_count_equally_divide")
"""Pulsar's split algorithms (``splitAlgorithmName``; the first is the default)."""


async def split_bundle(
    s: Scope, *, tenant: str, ns: str, bundle_range: str, algorithm: str, unload: bool
) -> None:
    """Split one bundle in two (Pulsar's ``namespaces split-bundle``) on its owner: at the
    middle of its hash range (``range_equally_divide``) or between the middle two of its
    topics' hashes (``topic_count_equally_divide``). OwnedElsewhere (307) to the owner; a
    bundle nobody owns is taken here first."""
    svc = s.service
    if algorithm not in SPLIT_ALGORITHMS:
        raise errors.InvalidName(
            f"unknown splitAlgorithmName {algorithm!r}: use one of {', '.join(SPLIT_ALGORITHMS)}"
        )
    tenant, ns = await scope.namespace(svc, tenant, ns)
    bundle = await _bundle(svc, tenant, ns, bundle_range)
    if bundle.upper - bundle.lower < 2:
        raise errors.Conflict(f"bundle {bundle_range} cannot be split further")
    if not svc.ownership.is_owned(bundle):
        owner = await svc.ownership.try_acquire(bundle)
        if owner.broker.broker_id != svc.me.broker_id:
            if s.authoritative:
                raise errors.Conflict(f"bundle {bundle_range} is owned by {owner.broker.broker_id}")
            raise errors.OwnedElsewhere(
                owner.broker.web_service_url, tls_url=owner.broker.web_service_url_tls
            )
    if algorithm == "range_equally_divide":
        boundary = bundle.lower + (bundle.upper - bundle.lower) // 2
    else:
        boundary = await _topic_count_boundary(svc, bundle)
    try:
        await svc.split_bundle(bundle, boundary, unload=unload)
    except ValueError as err:  # the layout changed meanwhile
        raise errors.Conflict(str(err)) from None


async def _topic_count_boundary(svc: BrokerService, bundle: Bundle) -> int:
    """Between the middle two hashes of the bundle's topics (stored or loaded here)."""
    names = await svc.topics_of_namespace(
        bundle.tenant,
        bundle.namespace,
        domains=(TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT),
    )
    hashes = sorted(h for h in {topic_hash(n) for n in names} if bundle.lower <= h < bundle.upper)
    if len(hashes) < 2:
        raise errors.Conflict(
            f"bundle {bundle.range} holds fewer than two topics: topic_count_equally_divide "
            "has nothing to divide"
        )
    mid = len(hashes) // 2
    return (hashes[mid - 1] + hashes[mid]) // 2 + 1


async def unload_namespace(s: Scope, *, tenant: str, ns: str) -> int:
    """Unload every owned bundle of a namespace, each by its owner (this broker's here, the
    others' through their admin API with the broker's credentials); returns how many
    bundles were owned."""
    svc = s.service
    tenant, ns = await scope.namespace(svc, tenant, ns)
    owned = 0
    for bundle in await bundles(svc, tenant, ns):
        if svc.ownership.is_owned(bundle):
            owned += 1
            await svc.unload_bundle(bundle)
            continue
        owner = await svc.ownership.owner_of(bundle)
        if owner is not None and owner.broker.broker_id != svc.me.broker_id:
            owned += 1
            await s.peers.unload_bundle(
                owner.broker.web_url(tls=svc.config.security.broker_client_tls),
                tenant=tenant, namespace=ns, bundle=bundle.range,
            )  # fmt: skip
    return owned


async def namespace_topics(
    svc: BrokerService, *, tenant: str, ns: str, domains: Iterable[TopicDomain]
) -> list[str]:
    """The topics of a namespace in the given domains (stored or loaded here)."""
    tenant, ns = await scope.namespace(svc, tenant, ns)
    return await svc.topics_of_namespace(tenant, ns, domains=tuple(domains))


async def create(s: Scope, topic: TopicName) -> None:
    """Create a non-partitioned topic (AlreadyExists when it, or a partitioned one, does)."""
    svc = s.service
    if await scope.partitions(svc, topic) is not None or await scope.exists(svc, topic):
        raise errors.AlreadyExists(f"topic {topic.full_name} already exists")
    if topic.is_partition and (await scope.partitions(svc, topic.base_name)) is not None:
        raise errors.AlreadyExists(f"{topic.full_name} is a partition of a partitioned topic")
    await scope.redirect_to_owner(s, topic)
    await svc.get_topic(topic, create=True, explicit=True)


async def delete_here(svc: BrokerService, topic: TopicName, *, force: bool) -> None:
    """Unload (InUse while producers or consumers are attached, unless ``force``) and delete
    the managed ledger."""
    loaded = svc.topics.get(topic.full_name)
    if loaded is not None:
        if stats.busy(loaded.stats()) and not force:
            raise errors.InUse(
                f"topic {topic.full_name} has active producers or consumers (use force)"
            )
        await svc.unload(topic.full_name, reason="topic deleted")
    if topic.is_persistent:
        await svc.managed_ledgers.delete(managed_ledger_name(topic))


async def delete_on_owner(s: Scope, topic: TopicName, *, force: bool) -> None:
    """Delete a topic wherever it is served: on its owner when that is another broker."""
    owner = await scope.owner_elsewhere(s.service, topic)
    if owner is None:
        await delete_here(s.service, topic, force=force)
        return
    await s.peers.delete(owner, topic, force=force)


async def delete_policies(svc: BrokerService, topic: TopicName) -> None:
    """Drop the topic-level policies of a (partitioned or non-partitioned) topic."""
    await svc.store.delete_prefix(
        keys.topic_policies(topic.tenant, topic.namespace, topic.domain.value, topic.local_name)
    )
    svc.policies_changed()


async def delete(s: Scope, topic: TopicName, *, force: bool) -> None:
    """Delete a non-partitioned topic (InUse with producers or consumers unless ``force``)
    and, unless it is a partition, its topic-level policies."""
    svc = s.service
    await scope.check_exists(s, topic)
    if topic.full_name not in svc.topics:
        await scope.redirect_to_owner(s, topic)
    await delete_here(svc, topic, force=force)
    if not topic.is_partition:
        await delete_policies(svc, topic)


async def unload(s: Scope, topic: TopicName) -> None:
    """Unload the topic (every partition of a partitioned one, on its owner): clients
    reconnect through lookup."""
    svc = s.service
    found = await scope.partitions(svc, topic)
    if found is not None:
        for i in range(found[0]):
            part = topic.partition(i)
            if await svc.unload(part.full_name, reason="admin unload"):
                continue
            maybe = await scope.exists(svc, part) or not part.is_persistent
            owner = await scope.owner_elsewhere(svc, part) if maybe else None
            if owner is not None:
                await s.peers.unload(owner, part)
        return
    await scope.check_exists(s, topic)
    if topic.full_name not in svc.topics:
        await scope.redirect_to_owner(s, topic)
    await svc.unload(topic.full_name, reason="admin unload")


async def terminate(s: Scope, topic: TopicName) -> Position:
    """Terminate the topic (no more messages); the last message's position. A partitioned
    topic is refused (405, as Pulsar): :func:`terminate_partitions` terminates its
    partitions."""
    await fanout.refuse(s, topic, "Termination of a partitioned topic is not allowed")
    loaded = await scope.stored(s, topic, "Termination of")
    last: Position = await loaded.terminate()
    return last


async def terminate_partitions(s: Scope, topic: TopicName) -> dict[int, Position]:
    """Terminate every partition of a partitioned topic, each on its owner: the last
    message's position of each, by partition index (NotFound when not partitioned)."""
    n = await fanout.partition_count(s, topic)
    if n is None:
        raise errors.NotFound(f"partitioned topic {topic.full_name} does not exist")

    async def here(part: TopicName) -> dict[str, int]:
        last = await terminate(s, part)
        return {"ledgerId": last.ledger_id, "entryId": last.entry_id}

    found = await fanout.each(s, topic, n, here, method="POST", suffix="/terminate")
    return {i: Position(int(m["ledgerId"]), int(m["entryId"])) for i, m in enumerate(found)}
