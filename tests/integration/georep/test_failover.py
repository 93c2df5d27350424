"""A consumer moving from one Magnetar cluster to the other: replicated subscriptions (its
position follows it) and the official client's automatic cluster failover
(docs/geo-replication.md, "Replicated subscriptions" and "Client failover").

Two standalones (clusters ``a`` and ``b``) with a namespace replicated to both, each started
from a standalone.conf that sets ``replicatedSubscriptionsSnapshotFrequencyMillis``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.integration.georep.instance import admin, join
from tests.support.procs import started
from tests.support.standalone import StandaloneProc, admin_call, client
from tests.support.wait import wait_until

TENANT, NS = "geo", "failover"
SNAPSHOT_MS = 200
"""The snapshot interval both clusters run with."""
_names = itertools.count()


def _standalone(tmp: Path, cluster: str) -> StandaloneProc:
    conf = tmp / f"{cluster}.conf"
    conf.write_text(
        f"clusterName={cluster}\n"
        "enableReplicatedSubscriptions=true\n"
        f"replicatedSubscriptionsSnapshotFrequencyMillis={SNAPSHOT_MS}\n"
        "replicatedSubscriptionsSnapshotTimeoutSeconds=10\n"
    )
    return StandaloneProc(tmp / cluster, extra_args=["--config", str(conf), "--log-level", "INFO"])


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StandaloneProc]]:
    tmp = tmp_path_factory.mktemp("georep-failover")
    with started(_standalone(tmp, "a")) as a, started(_standalone(tmp, "b")) as b:
        procs = {"a": a, "b": b}
        join(procs, TENANT, NS)
        yield procs


def _topic() -> str:
    return f"persistent://{TENANT}/{NS}/t{next(_names)}"


def _stats(proc: StandaloneProc, topic: str) -> dict[str, Any]:
    answer = admin_call(
        proc.http_url, "GET", f"/persistent/{topic.removeprefix('persistent://')}/stats"
    )
    assert isinstance(answer, dict)
    return answer


def _connected(proc: StandaloneProc, topic: str, remote: str) -> bool:
    repl = _stats(proc, topic)["replication"].get(remote)
    return bool(repl and repl["connected"])


def _index(msg: pulsar.Message) -> int:
    return int(msg.data().decode().removeprefix("m"))


def _drain(consumer: pulsar.Consumer, last: int) -> list[int]:
    """The indexes received until message ``last`` (each acknowledged), then nothing more."""
    got: list[int] = []
    while not got or got[-1] != last:
        msg = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(msg)
        got.append(_index(msg))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)
    return got


def _b_follows(b: StandaloneProc, topic: str, what: str) -> None:
    """b's copy of the subscription follows a's acknowledgements, snapshot by snapshot, up to
    the end of what was published (a snapshot is taken after the last message; markers after
    it, no message: at most the snapshot bound behind)."""
    wait_until(
        lambda: (
            (sub := _stats(b, topic)["subscriptions"].get("rs")) is not None
            and sub["isReplicated"]
            and sub["msgBacklog"] <= 10
        ),
        timeout=60,
        what=what,
    )


def _publish_rest_and_fail_over(
    a: StandaloneProc,
    b: StandaloneProc,
    topic: str,
    producer: pulsar.Producer,
    half: int,
) -> list[int]:
    """The second half published on a, drained to b, then the consumer failed over to b:
    what it receives there, in order."""
    for i in range(half, 2 * half):
        producer.send(b"m%03d" % i)
    producer.close()
    wait_until(
        lambda: _stats(a, topic)["replication"]["b"]["replicationBacklog"] == 0,
        timeout=60,
        what="a -> b drained",
    )
    with client(b) as cb:
        on_b = cb.subscribe(topic, "rs", replicate_subscription_state_enabled=True)
        got = _drain(on_b, 2 * half - 1)
    assert got == list(range(got[0], 2 * half)), "in order, nothing lost"
    assert got[0] <= half, "never past what a's consumer acknowledged"
    return got


def test_replicated_subscription_resumes_on_the_other_cluster(
    clusters: dict[str, StandaloneProc],
) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, half = _topic(), 100
    with client(a) as ca:
        on_a = ca.subscribe(topic, "rs", replicate_subscription_state_enabled=True)
        assert _stats(a, topic)["subscriptions"]["rs"]["isReplicated"] is True
        wait_until(lambda: _connected(a, topic, "b"), timeout=30, what="replicator a -> b")
        wait_until(lambda: _connected(b, topic, "a"), timeout=30, what="replicator b -> a")
        producer = ca.create_producer(topic, batching_enabled=False)
        for i in range(half):  # a steady rate: snapshots are taken while it publishes
            producer.send(b"m%03d" % i)
            time.sleep(0.01)
        for _ in range(half):
            msg = on_a.receive(timeout_millis=30_000)
            on_a.acknowledge(msg)
        _b_follows(b, topic, "b's subscription moved past what a acknowledged")
        on_a.close()
        got = _publish_rest_and_fail_over(a, b, topic, producer, half)
    first = got[0]
    assert first > 0, "not from the beginning"
    # within the snapshot interval's bound: at 100 messages/s at most, a snapshot every
    # 200 ms after the last message published, and b's subscription at its position
    assert half - first <= 10


@pytest.mark.parametrize(
    ("moved", "acked_before"),
    [("topic", 50), ("topic", 0), ("bundle", 50)],
    ids=["topic-unloaded-mid-acks", "topic-unloaded-before-acks", "bundle-unloaded-mid-acks"],
)
def test_replicated_subscription_across_a_topic_move(
    clusters: dict[str, StandaloneProc], moved: str, acked_before: int
) -> None:
    """The topic moves on ``a`` (unloaded, or its namespace's bundles unloaded: a new owner
    with none of the snapshots in memory) after ``acked_before`` of the first messages were
    acknowledged and before the rest were: the consumer failing over to ``b`` then resumes
    within the snapshot bound, not from the beginning."""
    a, b = clusters["a"], clusters["b"]
    topic, half = _topic(), 100
    with client(a) as ca:
        on_a = ca.subscribe(topic, "rs", replicate_subscription_state_enabled=True)
        wait_until(lambda: _connected(a, topic, "b"), timeout=30, what="replicator a -> b")
        wait_until(lambda: _connected(b, topic, "a"), timeout=30, what="replicator b -> a")
        producer = ca.create_producer(topic, batching_enabled=False)
        for i in range(half):  # snapshots taken by the first owner while it publishes
            producer.send(b"m%03d" % i)
            time.sleep(0.01)
        received = []
        for _ in range(acked_before):
            msg = on_a.receive(timeout_millis=30_000)
            on_a.acknowledge(msg)
            received.append(_index(msg))
        if moved == "topic":
            admin(a, "topics", "unload", topic)
        else:
            admin(a, "namespaces", "unload", f"{TENANT}/{NS}")

        def all_acknowledged() -> bool:
            """The rest received and acknowledged, from the new owner; acknowledgements the
            client sent while the topic moved are lost (as in Pulsar): those come again."""
            with contextlib.suppress(pulsar.Timeout):
                while True:
                    msg = on_a.receive(timeout_millis=200)
                    on_a.acknowledge(msg)
                    received.append(_index(msg))
            return bool(_stats(a, topic)["subscriptions"]["rs"]["msgBacklog"] == 0)

        wait_until(all_acknowledged, timeout=60, what="everything acknowledged on a")
        assert sorted(set(received)) == list(range(half))
        _b_follows(b, topic, "b's subscription moved past what a acknowledged after the move")
        on_a.close()
        got = _publish_rest_and_fail_over(a, b, topic, producer, half)
    first = got[0]
    assert half - first <= 10, "within the snapshot bound, not from the beginning"


def test_subscription_without_the_flag_is_not_carried_over(
    clusters: dict[str, StandaloneProc],
) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 50
    with client(a) as ca:
        flagged = ca.subscribe(topic, "flagged", replicate_subscription_state_enabled=True)
        plain = ca.subscribe(topic, "plain")
        wait_until(lambda: _connected(a, topic, "b"), timeout=30, what="replicator a -> b")
        wait_until(lambda: _connected(b, topic, "a"), timeout=30, what="replicator b -> a")
        producer = ca.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(b"m%03d" % i)
        for consumer in (flagged, plain):
            for _ in range(n):
                consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        wait_until(
            lambda: "flagged" in _stats(b, topic)["subscriptions"],
            timeout=60,
            what="the flagged subscription on b",
        )
        assert "plain" not in _stats(b, topic)["subscriptions"]
        assert _stats(a, topic)["subscriptions"]["plain"]["isReplicated"] is False
        # the administrator flags it (as docs/geo-replication.md shows): carried over from then on
        admin(a, "topics", "set-replicated-subscription-status", topic, "-s", "plain", "--enable")
        out = admin(a, "-o", "json", "topics", "get-replicated-subscription-status", topic,
                     "-s", "plain")  # fmt: skip
        assert json.loads(out) == {topic: True}
        producer.send(b"m%03d" % n)
        plain.acknowledge(plain.receive(timeout_millis=30_000))
        wait_until(
            lambda: "plain" in _stats(b, topic)["subscriptions"],
            timeout=60,
            what="the subscription flagged by the administrator on b",
        )
        producer.close()


def test_auto_cluster_failover_client(clusters: dict[str, StandaloneProc]) -> None:
    """The official client's AutoClusterFailover: a down, it goes on with b; a back, it
    returns to a. With a replicated namespace nothing published is lost either way."""
    a, b = clusters["a"], clusters["b"]
    topic = _topic()
    failover = pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(a.service_url),
        [pulsar.ServiceInfo(b.service_url)],
        check_interval_ms=200,
        failover_threshold=2,
        switch_back_threshold=2,
    )
    c = pulsar.Client(failover, operation_timeout_seconds=10)
    try:
        consumer = c.subscribe(topic, "s", replicate_subscription_state_enabled=True)
        producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        wait_until(lambda: _connected(a, topic, "b"), timeout=30, what="replicator a -> b")
        for i in range(10):
            producer.send(b"m%03d" % i)
        first = [consumer.receive(timeout_millis=30_000) for _ in range(10)]
        assert [_index(m) for m in first] == list(range(10))
        for msg in first:
            consumer.acknowledge(msg)
        wait_until(  # the subscription is on b too, past what was acknowledged
            lambda: (
                (sub := _stats(b, topic)["subscriptions"].get("s")) is not None
                and sub["msgBacklog"] <= 10
            ),
            timeout=60,
            what="the subscription carried over to b",
        )
        a.stop()
        for i in range(10, 20):  # the producer reconnects to b
            producer.send(b"m%03d" % i)
        stats_b = _stats(b, topic)
        assert [p for p in stats_b["publishers"] if not p["producerName"].startswith("pulsar.repl")]
        got: list[int] = []
        while not got or got[-1] != 19:  # the consumer goes on on b, where it left off
            msg = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(msg)
            got.append(_index(msg))
        assert got == list(range(10, 20))
        a.restart()
        wait_until(  # back on a: its own producer there again (not b's replicator)
            lambda: any(
                not p["producerName"].startswith("pulsar.repl")
                for p in _stats(a, topic)["publishers"]
            ),
            timeout=60,
            what="the client back on a",
        )
        for i in range(20, 30):
            producer.send(b"m%03d" % i)
        assert _stats(a, topic)["msgInCounter"] >= 10
    finally:
        c.close()
    wait_until(
        lambda: (
            (r := _stats(b, topic)["replication"].get("a")) is not None
            and r["connected"]
            and r["replicationBacklog"] == 0
        ),
        timeout=60,
        what="b -> a drained",
    )
    with client(a) as ca:  # what b took during a's outage came back to a by replication
        reader = ca.create_reader(topic, pulsar.MessageId.earliest)
        seen = set()
        while reader.has_message_available():
            seen.add(_index(reader.read_next(timeout_millis=10_000)))
        assert seen == set(range(30))
