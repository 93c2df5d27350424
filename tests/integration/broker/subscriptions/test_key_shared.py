"""Key_Shared: every key on one consumer at a time, each key's messages in order."""

from __future__ import annotations

from collections import defaultdict

import pulsar

from tests.integration.broker.subscriptions.helpers import drain, publish, texts

KeySharedT = pulsar.ConsumerType.KeyShared
EARLIEST = pulsar.InitialPosition.Earliest
KEYS = [f"key-{k}" for k in range(12)]


def _by_key(messages: list[pulsar.Message]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for m in messages:
        out[m.partition_key()].append(int(m.data().decode()))
    return out


def test_each_key_on_one_consumer_in_order(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=KeySharedT, consumer_name=f"c{i}")
        for i in range(3)
    ]
    n = 240
    publish(client, topic, [str(i) for i in range(n)], keys=lambda i: KEYS[i % len(KEYS)])
    received = [drain(c) for c in consumers]
    assert sum(len(r) for r in received) == n
    owner: dict[str, int] = {}
    for ci, msgs in enumerate(received):
        for key, seqs in _by_key(msgs).items():
            assert key not in owner, f"{key} went to consumers {owner[key]} and {ci}"
            owner[key] = ci
            assert seqs == sorted(seqs), f"{key} out of order on c{ci}: {seqs}"
            assert len(seqs) == n // len(KEYS)
    # the hash ranges actually spread the keys (12 keys over 3 halves/quarters of the space)
    assert len(set(owner.values())) >= 2


def test_key_based_batches_keep_key_routing(client: pulsar.Client, topic: str) -> None:
    consumers = [client.subscribe(topic, "ks", consumer_type=KeySharedT) for _ in range(2)]
    n = 200
    publish(
        client,
        topic,
        [str(i) for i in range(n)],
        batch=True,
        keys=lambda i: KEYS[i % len(KEYS)],
        batching_type=pulsar.BatchingType.KeyBased,
    )
    received = [drain(c) for c in consumers]
    assert sum(len(r) for r in received) == n
    seen: set[str] = set()
    for msgs in received:
        for key, seqs in _by_key(msgs).items():
            assert key not in seen
            seen.add(key)
            assert seqs == sorted(seqs)


def test_recently_joined_consumer_keeps_per_key_order(client: pulsar.Client, topic: str) -> None:
    """c2 joins while c1 holds unacknowledged messages of keys c2 takes over; c1 then leaves
    without acknowledging. c2 must see every key's messages in publish order: the old ones
    (redelivered from c1) before any new one."""
    c1 = client.subscribe(
        topic, "ks", consumer_type=KeySharedT, consumer_name="c1", initial_position=EARLIEST
    )
    first = 60
    publish(client, topic, [str(i) for i in range(first)], keys=lambda i: KEYS[i % len(KEYS)])
    held = drain(c1)
    assert len(held) == first
    c2 = client.subscribe(topic, "ks", consumer_type=KeySharedT, consumer_name="c2")
    publish(
        client, topic, [str(i) for i in range(first, 2 * first)], keys=lambda i: KEYS[i % len(KEYS)]
    )
    early = drain(c2, ack=True)  # new messages of c2's keys wait for c1's older ones
    assert early == []
    c1.close()
    got = drain(c2, ack=True)
    assert sorted(int(m.data()) for m in got) == list(range(2 * first))
    for key, seqs in _by_key(got).items():
        assert seqs == sorted(seqs), f"{key} out of order on c2: {seqs}"


def test_keys_move_in_order_when_a_consumer_leaves(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "ks", consumer_type=KeySharedT, consumer_name="c1")
    c2 = client.subscribe(topic, "ks", consumer_type=KeySharedT, consumer_name="c2")
    n = 120
    publish(client, topic, [str(i) for i in range(n)], keys=lambda i: KEYS[i % len(KEYS)])
    kept = drain(c2, ack=True)
    held = drain(c1)  # c1 leaves without acknowledging anything
    c1.close()
    moved = drain(c2, ack=True)
    assert sorted(texts(moved)) == sorted(texts(held))
    got = kept + moved
    assert sorted(int(m.data()) for m in got) == list(range(n))
    for key, seqs in _by_key(moved).items():
        assert seqs == sorted(seqs), f"{key} out of order after the move: {seqs}"
