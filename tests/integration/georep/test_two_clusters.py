"""Geo-replication between two Magnetar clusters on this machine: two standalones (clusters
``a`` and ``b``, each with its own embedded metadata store and bookie), each knowing the
other through a cluster record, and a namespace replicated to both (docs/geo-replication.md).

What must hold: each message published on either side reaches the consumers of both sides
exactly once and in order; nothing comes back to where it came from (no loop); a cluster
down for a while gets everything once it is back (the backlog drains); a broker SIGKILLed
while replicating loses nothing and duplicates nothing on the other side.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.georep.instance import admin, join
from tests.support.procs import started
from tests.support.standalone import StandaloneProc, admin_call, client
from tests.support.wait import wait_until

TENANT, NS = "geo", "repl"
_names = itertools.count()


def _standalone(tmp: Path, cluster: str) -> StandaloneProc:
    return StandaloneProc(
        tmp / cluster,
        extra_args=["--cluster-name", cluster, "--log-level", "INFO"],
    )


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StandaloneProc]]:
    tmp = tmp_path_factory.mktemp("georep")
    with started(_standalone(tmp, "a")) as a, started(_standalone(tmp, "b")) as b:
        procs = {"a": a, "b": b}
        join(procs, TENANT, NS)
        for proc in procs.values():
            assert admin(proc, "namespaces", "get-clusters", f"{TENANT}/{NS}").split() == [
                "a",
                "b",
            ]
        yield procs


def test_each_cluster_answers_for_its_brokers(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    # another cluster's brokers: a redirects to b's serviceUrl (the admin client follows)
    assert admin_call(a.http_url, "GET", "/brokers/b") == admin_call(
        b.http_url, "GET", "/brokers/b"
    )
    assert admin_call(a.http_url, "GET", "/brokers/a") != admin_call(
        a.http_url, "GET", "/brokers/b"
    )


def _topic() -> str:
    return f"persistent://{TENANT}/{NS}/t{next(_names)}"


def _stats(proc: StandaloneProc, topic: str) -> dict[str, Any]:
    path = topic.removeprefix("persistent://")
    answer = admin_call(proc.http_url, "GET", f"/persistent/{path}/stats")
    assert isinstance(answer, dict)
    return answer


def _drained(proc: StandaloneProc, topic: str, remote: str) -> bool:
    repl = _stats(proc, topic)["replication"].get(remote)
    return bool(repl and repl["connected"] and repl["replicationBacklog"] == 0)


def _receive_all(consumer: pulsar.Consumer, n: int, timeout_ms: int = 60_000) -> list[bytes]:
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=timeout_ms)
        consumer.acknowledge(msg)
        got.append(msg.data())
    return got


def _nothing_more(consumer: pulsar.Consumer) -> bool:
    try:
        consumer.receive(timeout_millis=500)
    except pulsar.Timeout:
        return True
    return False


def test_one_producer_both_sides_receive_each_once_in_order(
    clusters: dict[str, StandaloneProc],
) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 2000
    with client(a) as ca, client(b) as cb:
        on_a = ca.subscribe(topic, "s")
        on_b = cb.subscribe(topic, "s")
        wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
        plain = ca.create_producer(topic, batching_enabled=False)
        for i in range(n // 2):
            plain.send(b"m%06d" % i)
        plain.close()
        batched = ca.create_producer(topic, batching_enabled=True, batching_max_messages=50)
        for i in range(n // 2, n):
            batched.send_async(b"m%06d" % i, None)
        batched.flush()
        batched.close()
        expected = [b"m%06d" % i for i in range(n)]
        assert _receive_all(on_a, n) == expected
        assert _receive_all(on_b, n) == expected
        wait_until(lambda: _drained(a, topic, "b"), timeout=60, what="a -> b drained")
        assert _nothing_more(on_b)
        stats_a, stats_b = _stats(a, topic), _stats(b, topic)
        repl = stats_a["replication"]["b"]
        assert repl["replicationBacklog"] == 0 and repl["connected"] is True
        assert set(repl) >= {
            "msgRateIn",
            "msgRateOut",
            "msgThroughputOut",
            "replicationDelayInSeconds",
        }
        assert stats_b["msgInCounter"] == n
        # the replicator's cursor is not a subscription
        assert set(stats_a["subscriptions"]) == {"s"}
        labels = {"cluster": "a", "namespace": "geo/repl", "topic": topic, "remote_cluster": "b"}
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(a.metrics())
            for s in family.samples
        }
        key = tuple(sorted(labels.items()))
        assert samples[("pulsar_replication_backlog", key)] == 0
        assert samples[("pulsar_replication_connected_count", key)] == 1


def test_producers_on_both_sides_no_loop_no_duplicate(
    clusters: dict[str, StandaloneProc],
) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 300
    with client(a) as ca, client(b) as cb:
        on_a, on_b = ca.subscribe(topic, "s"), cb.subscribe(topic, "s")
        wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
        wait_until(lambda: "a" in _stats(b, topic)["replication"], what="replicator b -> a")
        pa, pb = ca.create_producer(topic), cb.create_producer(topic)
        for i in range(n):
            pa.send(b"a%05d" % i)
            pb.send(b"b%05d" % i)
        expected = sorted([b"a%05d" % i for i in range(n)] + [b"b%05d" % i for i in range(n)])
        for consumer in (on_a, on_b):
            got = _receive_all(consumer, 2 * n)
            assert sorted(got) == expected  # each once
            for origin in (b"a", b"b"):  # in order per origin
                mine = [m for m in got if m.startswith(origin)]
                assert mine == sorted(mine)
        wait_until(lambda: _drained(a, topic, "b") and _drained(b, topic, "a"), timeout=60)
        # nothing came back: each side stored its own messages and the other's, once
        assert _stats(a, topic)["msgInCounter"] == 2 * n
        assert _stats(b, topic)["msgInCounter"] == 2 * n
        assert _nothing_more(on_a) and _nothing_more(on_b)


def test_remote_down_backlog_builds_then_drains(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 500
    with client(a) as ca:
        with client(b) as cb:
            cb.subscribe(topic, "s").close()  # the subscription on b, before b goes down
        producer = ca.create_producer(topic)  # (the topic loads on a: its replicator starts)
        wait_until(lambda: _drained(a, topic, "b"), timeout=30, what="replicator a -> b")
        b.stop()
        for i in range(n):
            producer.send(b"d%05d" % i)
        repl = wait_until(
            lambda: (r := _stats(a, topic)["replication"]["b"])["connected"] is False and r,
            timeout=60,
            what="a sees b down",
        )
        assert repl["replicationBacklog"] > 0
        backlog = json.loads(admin(a, "--output", "json", "topics", "backlog", topic))
        assert backlog["cursorDetails"]["pulsar.repl.b"]["cursorBacklog"] > 0
        b.restart()
        wait_until(lambda: _drained(a, topic, "b"), timeout=120, what="backlog drained")
        producer.close()
    with client(b) as cb:
        on_b = cb.subscribe(topic, "s")
        assert _receive_all(on_b, n) == [b"d%05d" % i for i in range(n)]
        assert _nothing_more(on_b)


def test_source_broker_sigkilled_mid_replication(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 3000
    with client(b) as cb:
        on_b = cb.subscribe(topic, "s")
        with client(a) as ca:
            ca.subscribe(topic, "s").close()
            wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
            producer = ca.create_producer(
                topic, batching_enabled=False, max_pending_messages=n, block_if_queue_full=True
            )
            results: list[pulsar.Result] = []
            for i in range(n):
                producer.send_async(b"k%05d" % i, lambda res, _id: results.append(res))
            wait_until(lambda: len(results) == n, timeout=60, what="every message stored on a")
            assert set(results) == {pulsar.Result.Ok}
            received = [on_b.receive(timeout_millis=60_000)]  # replication is under way
            a.kill()
        a.restart()
        received += [on_b.receive(timeout_millis=60_000) for _ in range(n - 1)]
        assert [m.data() for m in received] == [b"k%05d" % i for i in range(n)]
        for msg in received:
            on_b.acknowledge(msg)
        wait_until(lambda: _drained(a, topic, "b"), timeout=120, what="a -> b drained")
        assert _nothing_more(on_b)
        assert _stats(b, topic)["msgInCounter"] == n


def test_partitioned_topic_each_partition_replicated(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 400
    for proc in (a, b):  # partitioned metadata is per cluster (docs/geo-replication.md)
        admin(proc, "topics", "create-partitioned-topic", topic, "-p", "2")
    with client(a) as ca, client(b) as cb:
        on_a, on_b = ca.subscribe(topic, "s"), cb.subscribe(topic, "s")
        for i in range(2):
            wait_until(
                lambda i=i: "b" in _stats(a, f"{topic}-partition-{i}")["replication"],
                what=f"replicator of partition {i}",
            )
        producer = ca.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(b"p%05d" % i, partition_key=f"k{i % 7}")
        for consumer in (on_a, on_b):
            got = []
            for _ in range(n):
                msg = consumer.receive(timeout_millis=60_000)
                consumer.acknowledge(msg)
                got.append((msg.partition_key(), msg.data()))
            assert sorted(m for _, m in got) == [b"p%05d" % i for i in range(n)]
            for key in {k for k, _ in got}:  # in order per key
                mine = [m for k, m in got if k == key]
                assert mine == sorted(mine)
        for i in range(2):
            wait_until(lambda i=i: _drained(a, f"{topic}-partition-{i}", "b"), timeout=60)
        assert _nothing_more(on_b)


def test_topic_level_replication_clusters(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic = f"persistent://{TENANT}/local/t{next(_names)}"
    path = f"/persistent/{topic.removeprefix('persistent://')}/replication"
    for proc in (a, b):  # a namespace each cluster keeps to itself; one topic replicated
        admin(proc, "namespaces", "create", f"{TENANT}/local")
        admin(proc, "topics", "create", topic)
    for proc in (a, b):
        admin_call(proc.http_url, "POST", path, ["a", "b"])
    with client(a) as ca, client(b) as cb:
        on_b = cb.subscribe(topic, "s")
        wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
        producer = ca.create_producer(topic)
        for i in range(50):
            producer.send(b"t%03d" % i)
        assert _receive_all(on_b, 50) == [b"t%03d" % i for i in range(50)]
        for proc in (a, b):
            admin_call(proc.http_url, "DELETE", path)
        wait_until(lambda: "b" not in _stats(a, topic)["replication"], what="replicator stopped")
        backlog = json.loads(admin(a, "--output", "json", "topics", "backlog", topic))
        assert "pulsar.repl.b" not in backlog["cursorDetails"]  # its cursor deleted


def test_per_message_replication_clusters(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic = _topic()
    with client(a) as ca, client(b) as cb:
        on_a, on_b = ca.subscribe(topic, "s"), cb.subscribe(topic, "s")
        wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
        producer = ca.create_producer(topic)
        producer.send(b"local only", disable_replication=True)
        producer.send(b"to a only", replication_clusters=["a"])
        producer.send(b"to both", replication_clusters=["a", "b"])
        producer.send(b"plain")
        assert _receive_all(on_a, 4) == [b"local only", b"to a only", b"to both", b"plain"]
        assert _receive_all(on_b, 2) == [b"to both", b"plain"]
        wait_until(lambda: _drained(a, topic, "b"), timeout=60, what="a -> b drained")
        assert _nothing_more(on_b)


def test_unloads_on_both_sides_mid_replication(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 2000
    with client(a) as ca, client(b) as cb:
        # b's subscription is made first and read after the unloads: a consumer connected
        # while its topic moves may see messages twice (it acknowledged them on the old
        # topic just before the close; Pulsar's at-least-once), and what is checked here is
        # what b stored: each message once, in order
        cb.subscribe(topic, "s").close()
        live = cb.subscribe(topic, "live")  # connected through both unloads
        producer = ca.create_producer(
            topic, batching_enabled=False, max_pending_messages=n, block_if_queue_full=True
        )
        wait_until(lambda: "b" in _stats(a, topic)["replication"], what="replicator a -> b")
        results: list[pulsar.Result] = []
        for i in range(n):
            producer.send_async(b"u%05d" % i, lambda res, _id: results.append(res))
            if i == n // 3:
                admin(a, "topics", "unload", topic)  # the source topic moves (reloads)
            if i == 2 * n // 3:
                admin(b, "topics", "unload", topic)  # so does the destination
        wait_until(lambda: len(results) == n, timeout=60, what="every message stored on a")
        assert set(results) == {pulsar.Result.Ok}
        on_b = cb.subscribe(topic, "s")
        assert _receive_all(on_b, n) == [b"u%05d" % i for i in range(n)]
        # the connected consumer gets every message at least once, first times in order
        first_seen: dict[bytes, None] = {}
        while len(first_seen) < n:
            msg = live.receive(timeout_millis=60_000)
            live.acknowledge(msg)
            first_seen.setdefault(msg.data(), None)
        assert list(first_seen) == [b"u%05d" % i for i in range(n)]
        wait_until(lambda: _drained(a, topic, "b"), timeout=60, what="a -> b drained")
        assert _nothing_more(on_b)


def test_acceptance_100k_messages_each_once_in_order_per_key(
    clusters: dict[str, StandaloneProc],
) -> None:
    """Issue 25, acceptance 1 at full size: a producer on a, consumers on a and b, 100,000
    keyed messages on a partitioned topic, not batched (100,000 entries through the
    replicators): each consumer receives each message exactly once, each key's in the order
    published (checked by content)."""
    a, b = clusters["a"], clusters["b"]
    topic, n, keys = _topic(), 100_000, 16
    for proc in (a, b):
        admin(proc, "topics", "create-partitioned-topic", topic, "-p", "2")
    with client(a) as ca, client(b) as cb:
        consumers = {"a": ca.subscribe(topic, "s"), "b": cb.subscribe(topic, "s")}
        for i in range(2):
            wait_until(
                lambda i=i: "b" in _stats(a, f"{topic}-partition-{i}")["replication"],
                what=f"replicator of partition {i}",
            )
        producer = ca.create_producer(
            topic,
            batching_enabled=False,
            max_pending_messages=10_000,
            block_if_queue_full=True,
        )
        results: list[pulsar.Result] = []
        for i in range(n):
            key = f"k{i % keys}"
            producer.send_async(
                f"{key}/{i:06d}".encode(),
                lambda res, _id: results.append(res),
                partition_key=key,
            )
        producer.flush()
        wait_until(lambda: len(results) == n, timeout=120, what="every message stored on a")
        assert set(results) == {pulsar.Result.Ok}
        producer.close()
        for side, consumer in consumers.items():
            per_key: dict[str, list[int]] = {}
            for _ in range(n):
                msg = consumer.receive(timeout_millis=60_000)
                consumer.acknowledge(msg)
                key, index = msg.data().decode().split("/")
                assert key == msg.partition_key()
                per_key.setdefault(key, []).append(int(index))
            for key, got in per_key.items():
                k = int(key[1:])
                assert got == list(range(k, n, keys)), f"{side}: key {key}"
            assert len(per_key) == keys
            assert _nothing_more(consumer), f"{side}: more than {n}"
        for i in range(2):
            wait_until(lambda i=i: _drained(a, f"{topic}-partition-{i}", "b"), timeout=60)
