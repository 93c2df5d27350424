"""The typed topic operations (``broker/topic_ops/``) in-process, without HTTP: a real
BrokerService on the embedded store and the in-memory managed ledger, clients driven through
the recording transport of ``tests/support/inprocess.py``. With one broker no call reaches a
peer (:class:`NoPeers` fails the test if one does); two brokers sharing the store and the
storage ask each other through :class:`InProcessPeers`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.admin import common
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_ops import (
    errors,
    messages,
    partitioned,
    policies,
    scope,
    stats,
    subscriptions,
    topics,
)
from magnetar.broker.topic_ops.scope import Scope
from magnetar.wire import commands, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicDomain, TopicName
from tests.support.inprocess import Client, brokers
from tests.support.wait import eventually

NAME = "persistent://public/default/admin-typed"


class NoPeers:
    """Peers of a one-broker cluster: none; being asked is a bug."""

    async def bundle_topics(self, web_url: str, **kw: Any) -> list[str]:
        raise AssertionError(f"asked peer {web_url} for bundle topics")

    async def stats(self, web_url: str, topic: TopicName) -> dict[str, Any]:
        raise AssertionError(f"asked peer {web_url} for stats of {topic}")

    async def delete(self, web_url: str, topic: TopicName, *, force: bool) -> None:
        raise AssertionError(f"asked peer {web_url} to delete {topic}")

    async def unload(self, web_url: str, topic: TopicName) -> None:
        raise AssertionError(f"asked peer {web_url} to unload {topic}")


@pytest.fixture
def s(service: BrokerService) -> Scope:
    return Scope(service, NoPeers())


async def _publish(service: BrokerService, topic: str, texts: list[str]) -> list[MessageId]:
    c = Client(service)
    await c.connect()
    await c.producer(1, topic=topic)
    ids = [await c.publish(1, seq, text) for seq, text in enumerate(texts)]
    c.send(commands.close_producer(producer_id=1, request_id=c.rid()))
    await c.expect(pb.BaseCommand.SUCCESS)
    return ids


async def test_names_are_resolved_with_typed_errors(service: BrokerService) -> None:
    parts = {"tenant": "public", "namespace_name": "default", "local": "t"}
    found = await scope.topic_name(service, domain_name="persistent", **parts)
    assert found.full_name == "persistent://public/default/t"
    with pytest.raises(errors.NotFound, match="unknown topic domain"):
        await scope.topic_name(service, domain_name="durable", **parts)
    with pytest.raises(errors.NotFound, match="public/missing does not exist"):
        await scope.topic_name(
            service, domain_name="persistent", tenant="public", namespace_name="missing", local="t"
        )
    with pytest.raises(errors.InvalidName):
        await scope.topic_name(
            service, domain_name="persistent", tenant="pub lic", namespace_name="default", local="t"
        )


async def test_create_list_delete_a_topic(s: Scope, service: BrokerService) -> None:
    topic = TopicName.parse(NAME)
    await topics.create(s, topic)
    with pytest.raises(errors.AlreadyExists):
        await topics.create(s, topic)
    listed = await topics.list_topics(
        s, domain=TopicDomain.PERSISTENT, tenant="public", ns="default"
    )
    assert NAME in listed
    await topics.delete(s, topic, force=False)
    assert NAME not in service.topics
    with pytest.raises(errors.NotFound):
        await stats.stats(s, topic)
    with pytest.raises(errors.NotFound):
        await topics.delete(s, topic, force=False)


async def test_a_topic_in_use_is_deleted_only_by_force(s: Scope, service: BrokerService) -> None:
    topic = TopicName.parse(NAME)
    c = Client(service)
    await c.connect()
    await c.producer(1, topic=NAME)
    with pytest.raises(errors.InUse, match="use force"):
        await topics.delete(s, topic, force=False)
    assert NAME in service.topics
    await topics.delete(s, topic, force=True)
    assert not await scope.exists(service, topic)


async def test_partitioned_topics_grow_and_are_deleted_with_their_partitions(
    s: Scope, service: BrokerService
) -> None:
    topic = TopicName.parse(NAME)
    await partitioned.create(s, topic, 2)
    with pytest.raises(errors.AlreadyExists):
        await partitioned.create(s, topic, 2)
    with pytest.raises(errors.AlreadyExists, match="partition of a partitioned topic"):
        await topics.create(s, topic.partition(0))
    with pytest.raises(errors.InvalidName):
        await partitioned.create(s, topic.partition(0), 2)
    with pytest.raises(errors.Invalid, match="can only grow"):
        await partitioned.update(s, topic, 2)
    await partitioned.update(s, topic, 3)
    assert await partitioned.partition_count(s, topic) == 3
    listed = await partitioned.list_partitioned(
        s, domain=TopicDomain.PERSISTENT, tenant="public", ns="default"
    )
    assert listed == [NAME]

    await _publish(service, topic.partition(0).full_name, ["a", "b"])
    await _publish(service, topic.partition(2).full_name, ["c"])
    summed = await stats.partitioned_stats(s, topic)
    assert summed["msgInCounter"] == 3 and summed["metadata"] == {"partitions": 3}
    assert set(summed["partitions"]) == {topic.partition(0).full_name, topic.partition(2).full_name}

    await partitioned.delete(s, topic, force=False)
    assert await partitioned.partition_count(s, topic) == 0
    assert not await scope.exists(service, topic.partition(0))
    with pytest.raises(errors.NotFound):
        await partitioned.delete(s, topic, force=False)


async def test_subscription_cursor_operations(s: Scope, service: BrokerService) -> None:
    topic = TopicName.parse(NAME)
    await topics.create(s, topic)
    await subscriptions.create(s, topic, "audit", start=MessageId(-1, -1))
    with pytest.raises(errors.AlreadyExists):
        await subscriptions.create(s, topic, "audit", start=None)
    ids = await _publish(service, NAME, [f"m{i}" for i in range(5)])
    assert await subscriptions.list_subscriptions(s, topic) == ["audit"]

    def backlog() -> int:
        return int(service.topics[NAME].stats()["subscriptions"]["audit"]["msgBacklog"])

    assert backlog() == 5
    await subscriptions.skip(s, topic, "audit", 2)
    assert backlog() == 3
    peeked = await messages.peek(s, topic, "audit", 1)
    assert peeked.payload == b"m2" and peeked.metadata.sequence_id == 2
    with pytest.raises(errors.NotFound, match="Message not found"):
        await messages.peek(s, topic, "audit", 4)

    last = await messages.last_message_id(s, topic)
    assert (last.ledger_id, last.entry_id) == (ids[-1].ledger_id, ids[-1].entry_id)
    assert (last.batch_index, last.batch_size, last.partition_index) == (-1, 0, -1)

    await subscriptions.clear_backlog(s, topic, "audit")
    assert backlog() == 0
    await subscriptions.reset_to_message_id(s, topic, "audit", message_id=ids[1])
    await eventually(lambda: backlog() == 4, what="backlog after the reset")
    await subscriptions.expire(s, topic, "audit", older_than_s=0)
    assert backlog() == 4  # 0 seconds expires nothing, as in Pulsar
    await asyncio.sleep(1.1)  # every message is over a second old now
    await subscriptions.expire(s, topic, "audit", older_than_s=1)
    await eventually(lambda: backlog() == 0, what="backlog after expiring everything")

    with pytest.raises(errors.NotFound):
        await subscriptions.skip(s, topic, "missing", 1)
    await subscriptions.delete(s, topic, "audit", force=False)
    assert await subscriptions.list_subscriptions(s, topic) == []


async def test_a_subscription_with_consumers_is_deleted_only_by_force(
    s: Scope, service: BrokerService
) -> None:
    topic = TopicName.parse(NAME)
    await topics.create(s, topic)
    c = Client(service)
    await c.connect()
    await c.subscribe(10, "busy", topic=NAME)
    with pytest.raises(errors.InUse):
        await subscriptions.delete(s, topic, "busy", force=False)
    await subscriptions.delete(s, topic, "busy", force=True)
    assert await subscriptions.list_subscriptions(s, topic) == []


async def test_stored_message_operations_are_refused_on_non_persistent_topics(
    s: Scope,
) -> None:
    topic = TopicName.parse("non-persistent://public/default/np")
    await topics.create(s, topic)
    with pytest.raises(errors.NotAllowed, match="Skip messages on a non-persistent topic"):
        await subscriptions.skip(s, topic, "sub", 1)
    with pytest.raises(errors.NotAllowed, match="Termination of"):
        await topics.terminate(s, topic)
    with pytest.raises(errors.Invalid, match="only be done through client"):
        await subscriptions.create(s, topic, "sub", start=None)
    internal = await stats.internal_stats(s, topic)
    assert internal["ledgers"] == [] and internal["numberOfEntries"] == 0


async def test_terminate_answers_the_last_position(s: Scope, service: BrokerService) -> None:
    topic = TopicName.parse(NAME)
    ids = await _publish(service, NAME, ["x", "y"])
    last = await topics.terminate(s, topic)
    assert (last.ledger_id, last.entry_id) == (ids[-1].ledger_id, ids[-1].entry_id)


async def test_topic_policies_set_read_and_remove(s: Scope) -> None:
    topic = TopicName.parse(NAME)
    with pytest.raises(errors.NotFound):
        await policies.get(s, topic, "message_ttl_in_seconds")
    await partitioned.create(s, topic, 2)
    assert await policies.get(s, topic, "message_ttl_in_seconds") is None
    await policies.set_(s, topic, "message_ttl_in_seconds", 60)
    # a partition's policies are its partitioned topic's
    assert await policies.get(s, topic.partition(1), "message_ttl_in_seconds") == 60
    with pytest.raises(ValueError, match="not a topic policy"):
        await policies.set_(s, topic, "nonsense", 1)
    refused: list[Any] = []

    def check(value: Any) -> Any:
        refused.append(value)
        raise ValueError("checked")

    with pytest.raises(ValueError, match="checked"):
        await policies.set_(s, topic, "deduplicationEnabled", "maybe", check=check)
    assert refused == ["maybe"]
    assert await policies.get(s, topic, "deduplicationEnabled") is None
    await policies.remove(s, topic, "message_ttl_in_seconds")
    assert await policies.get(s, topic, "message_ttl_in_seconds") is None


async def test_unload_and_bundle_listing(s: Scope, service: BrokerService) -> None:
    topic = TopicName.parse(NAME)
    await topics.create(s, topic)
    assert NAME in service.topics
    bundle = await service.bundle(topic)
    listed = await topics.list_bundle_topics(
        s, domain=TopicDomain.PERSISTENT, tenant="public", ns="default", bundle_range=bundle.range
    )
    assert listed == [NAME]
    with pytest.raises(errors.InvalidName, match="not a bundle"):
        await topics.list_bundle_topics(
            s, domain=TopicDomain.PERSISTENT, tenant="public", ns="default", bundle_range="0x0_0x1"
        )
    await topics.unload(s, topic)
    assert NAME not in service.topics
    assert await scope.exists(service, topic)  # stored, only unloaded


class InProcessPeers:
    """Peers that are other in-process brokers, asked through their own typed calls (the
    admin API's ``remote.HttpPeers`` asks them over HTTP); a refusal comes back as the
    status the admin API would answer."""

    def __init__(self, *services: BrokerService) -> None:
        self.services = {svc.me.web_service_url.rstrip("/"): svc for svc in services}

    async def _ask(self, web_url: str, call: Any, *, ok_missing: bool = False) -> Any:
        peer = Scope(self.services[web_url], self, authoritative=True)
        try:
            return await call(peer)
        except errors.NotFound:
            if ok_missing:
                return None
            raise errors.PeerRefused(404, "not found on the owner") from None
        except errors.TopicAdminError as err:
            raise errors.PeerRefused(common.status_of(err), err.reason) from None

    async def bundle_topics(
        self, web_url: str, *, domain: TopicDomain, tenant: str, namespace: str, bundle: str
    ) -> list[str]:
        found: list[str] = await self._ask(
            web_url,
            lambda p: topics.list_bundle_topics(
                p, domain=domain, tenant=tenant, ns=namespace, bundle_range=bundle
            ),
        )
        return found

    async def stats(self, web_url: str, topic: TopicName) -> dict[str, Any]:
        found: dict[str, Any] = await self._ask(web_url, lambda p: stats.stats(p, topic))
        return found

    async def delete(self, web_url: str, topic: TopicName, *, force: bool) -> None:
        await self._ask(web_url, lambda p: topics.delete(p, topic, force=force), ok_missing=True)

    async def unload(self, web_url: str, topic: TopicName) -> None:
        await self._ask(web_url, lambda p: topics.unload(p, topic), ok_missing=True)


async def test_partitions_owned_by_two_brokers(tmp_path: Path) -> None:
    """Single-topic calls name the owner (OwnedElsewhere); partitioned stats, unload and
    delete reach every owner through the peers."""
    configs: list[dict[str, Any]] = [{"port": 1, "http_port": 2}, {"port": 3, "http_port": 4}]
    async with brokers(tmp_path, configs) as (a, b):
        peers = InProcessPeers(a, b)
        on_a = Scope(a, peers)
        topic = TopicName.parse(NAME)
        await partitioned.create(on_a, topic, 8)
        owner: dict[int, BrokerService] = {}
        for i in range(8):  # each broker takes the bundles it is asked about first
            asked = (a, b)[i % 2]
            answer = await asked.lookup(topic.partition(i), authoritative=True)
            owner[i] = a if answer.service_url == a.me.service_url else b
        assert {id(svc) for svc in owner.values()} == {id(a), id(b)}, "both own partitions"
        for i, svc in owner.items():
            await _publish(svc, topic.partition(i).full_name, [f"p{i}"])

        summed = await stats.partitioned_stats(on_a, topic)
        assert summed["msgInCounter"] == 8 and len(summed["partitions"]) == 8
        on_b = next(i for i, svc in owner.items() if svc is b)
        with pytest.raises(errors.OwnedElsewhere) as elsewhere:
            await stats.stats(on_a, topic.partition(on_b))
        assert elsewhere.value.web_service_url == b.me.web_service_url

        await topics.unload(on_a, topic)
        assert not [t for t in (*a.topics, *b.topics) if t.startswith(NAME)]
        await partitioned.delete(on_a, topic, force=True)
        assert await partitioned.partition_count(on_a, topic) == 0
        for i in range(8):
            assert not await scope.exists(a, topic.partition(i))
