"""The admin API on a two-broker cluster (etcd, one bookie): any broker answers for any topic.
Single-topic operations redirect (307) to the owner -- followed by urllib for GET and by
``magnetar admin`` for every method; partitioned stats, partitioned deletes and unloads ask
each partition's owner."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pulsar
import pytest

from tests.integration.admin.conftest import Admin
from tests.support.standalone import BrokerProc, holders
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd


NS = "public/spread-ns"


def owner(
    proc: BrokerProc, topic: str, *, take: bool = False, domain: str = "persistent", ns: str = NS
) -> str:
    """The owner's broker URL (``take``: an authoritative lookup, so ``proc`` takes the bundle
    when nobody owns it)."""
    url = f"{proc.http_url}/lookup/v2/topic/{domain}/{ns}/{topic}"
    if take:
        url += "?authoritative=true"
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(json.loads(r.read())["brokerUrl"])


def bundle_of(proc: BrokerProc, topic: str, *, domain: str = "persistent", ns: str = NS) -> str:
    """The bundle range ``topic``'s name hashes into (``topics bundle-range``)."""
    url = f"{proc.http_url}/lookup/v2/topic/{domain}/{ns}/{topic}/bundle"
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_any_broker_answers_for_any_topic(two_brokers: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = two_brokers
    admin_a = Admin(a.http_url)
    assert admin_a.put(f"/namespaces/{NS}", {"bundles": {"numBundles": 16}})[0] == 204
    assert admin_a.put(f"/persistent/{NS}/spread/partitions", 6)[0] == 204
    for i in range(6):  # place the partitions' bundles on both brokers, alternately
        owner((a, b)[i % 2], f"spread-partition-{i}", take=True)
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
    try:
        topic = f"persistent://{NS}/spread"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(12):
            producer.send(f"m{i}".encode())
        owners = {owner(a, f"spread-partition-{i}") for i in range(6)}
        assert holders((a, b), owners) == {a, b}, "partitions on both brokers"

        # partitioned stats from either broker gather every partition
        for proc in (a, b):
            pstats = Admin(proc.http_url).get(f"/persistent/{NS}/spread/partitioned-stats")
            assert pstats[0] == 200 and pstats[1]["msgInCounter"] == 12
            assert pstats[1]["subscriptions"]["s"]["msgBacklog"] == 12
        # single-topic reads redirect to the owner (urllib follows GET redirects)
        on_b = next(i for i in range(6) if b.serves(owner(a, f"spread-partition-{i}")))
        stats = admin_a.get(f"/persistent/{NS}/spread-partition-{on_b}/stats")
        assert stats[0] == 200 and stats[1]["msgInCounter"] == 2
        # ... and changes too: magnetar admin follows a POST redirect
        part = f"persistent://{NS}/spread-partition-{on_b}"
        result = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", a.http_url,
             "topics", "skip", part, "-s", "s", "-n", "1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        part_stats = Admin(b.http_url).get(f"/persistent/{NS}/spread-partition-{on_b}/stats")
        assert part_stats[1]["subscriptions"]["s"]["msgBacklog"] == 1

        status, body = admin_a.delete(f"/persistent/{NS}/spread/partitions")
        assert status == 412 and "force" in body["reason"]
        assert admin_a.put(f"/persistent/{NS}/spread/unload")[0] == 204

        def reconnected() -> bool:
            # the clients' reconnections to the unloaded partitions are done: none of them can
            # reach a broker after the forced delete below and create a partition again
            body = admin_a.get(f"/persistent/{NS}/spread/partitioned-stats")[1]
            return (
                len(body["publishers"]) == 6 and len(body["subscriptions"]["s"]["consumers"]) == 6
            )

        wait_until(reconnected, timeout=60, what="producer and consumer back on every partition")
        producer.close()
        consumer.close()
        assert admin_a.delete(f"/persistent/{NS}/spread/partitions?force=true")[0] == 204
        for proc in (a, b):
            listed = Admin(proc.http_url).get(f"/persistent/{NS}")[1]
            assert not any("spread" in t for t in listed), listed
    finally:
        client.close()


def test_non_persistent_topics_across_brokers(two_brokers: tuple[BrokerProc, BrokerProc]) -> None:
    """A non-persistent topic exists only on the broker serving it: the other broker lists it
    (asking each bundle's owner), redirects to it, and gathers its partitions' stats."""
    a, b = two_brokers
    admin_a, admin_b = Admin(a.http_url), Admin(b.http_url)
    np_ns = f"/non-persistent/{NS}"
    assert admin_a.put(f"/namespaces/{NS}", {"bundles": {"numBundles": 16}})[0] == 204
    assert admin_a.put(f"{np_ns}/fan/partitions", 4)[0] == 204
    for i in range(4):  # the partitions' bundles on both brokers, alternately
        owner((a, b)[i % 2], f"fan-partition-{i}", take=True, domain="non-persistent")
    # a topic in a bundle none of the partitions is in, taken by b
    used = {bundle_of(a, f"fan-partition-{i}", domain="non-persistent") for i in range(4)}
    local = next(
        n for n in (f"solo-{k}" for k in range(64))
        if bundle_of(a, n, domain="non-persistent") not in used
    )  # fmt: skip
    assert b.serves(owner(b, local, take=True, domain="non-persistent"))
    solo = f"non-persistent://{NS}/{local}"
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
    try:
        fan = f"non-persistent://{NS}/fan"
        consumers = [client.subscribe(t, "s") for t in (fan, solo)]
        producers = [
            client.create_producer(
                t,
                batching_enabled=False,
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            )
            for t in (fan, solo)
        ]
        for producer in producers:
            for i in range(8):
                producer.send(f"m{i}".encode())
        for consumer in consumers:
            assert len([consumer.receive(timeout_millis=10_000) for _ in range(8)]) == 8
        owners = {owner(a, f"fan-partition-{i}", domain="non-persistent") for i in range(4)}
        assert holders((a, b), owners) == {a, b}, "partitions on both brokers"

        for proc_admin in (admin_a, admin_b):
            listed = proc_admin.get(np_ns)[1]
            assert solo in listed and {f"{fan}-partition-{i}" for i in range(4)} <= set(listed)
            pstats = proc_admin.get(f"{np_ns}/fan/partitioned-stats")
            assert pstats[0] == 200 and pstats[1]["msgInCounter"] == 8
            assert pstats[1]["subscriptions"]["s"]["msgOutCounter"] == 8
            stats = proc_admin.get(f"{np_ns}/{local}/stats")  # 307 to b, followed by urllib
            assert stats[0] == 200 and stats[1]["msgInCounter"] == 8
        # refused where asked, naming the operation (no need to ask the owner)
        status, body = admin_a.call("POST", f"{np_ns}/{local}/terminate")
        assert status == 405 and "Termination of" in body["reason"]

        assert admin_a.put(f"{np_ns}/fan/unload")[0] == 204
        for producer in producers:
            producer.close()
        for consumer in consumers:
            consumer.close()
        assert admin_a.delete(f"{np_ns}/fan/partitions?force=true")[0] == 204
        result = subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", a.http_url,
             "topics", "delete", solo, "--force"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        for proc_admin in (admin_a, admin_b):
            listed = proc_admin.get(np_ns)[1]
            assert not any("fan" in t or "solo" in t for t in listed), listed
    finally:
        client.close()
