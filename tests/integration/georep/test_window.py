"""The replicator's window (docs/geo-replication.md, "Replicators"): cluster ``a`` runs with
a window of a few entries (``--replication-producer-queue-size``), so that while ``a``
publishes fast the window is full all the time: the remote cluster restarted then, ``a``
SIGKILLed then, or ``b`` SIGKILLed then and the topic moved on ``a`` while ``b`` is down
(the new owner starts from the cursor: the case that shows a cursor moved past an entry
without its receipt), must lose nothing and store nothing twice, in order per key.

What ``b`` stored is read back with a reader from the earliest message: each message exactly
once there, whatever a consumer's acknowledgements did during the restart.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.integration.georep.instance import admin, join
from tests.support.procs import started
from tests.support.standalone import StandaloneProc, admin_call, client
from tests.support.wait import wait_until

TENANT, NS = "geo", "window"
WINDOW = 8
"""``a``'s replicator window: entries in flight without their receipts."""
KEYS = 7
_names = itertools.count()


def _standalone(tmp: Path, cluster: str, *extra: str) -> StandaloneProc:
    return StandaloneProc(
        tmp / cluster,
        extra_args=["--cluster-name", cluster, "--log-level", "INFO", *extra],
    )


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StandaloneProc]]:
    tmp = tmp_path_factory.mktemp("georep-window")
    window = ("--replication-producer-queue-size", str(WINDOW))
    with started(_standalone(tmp, "a", *window)) as a, started(_standalone(tmp, "b")) as b:
        procs = {"a": a, "b": b}
        join(procs, TENANT, NS)
        yield procs


def _topic() -> str:
    return f"persistent://{TENANT}/{NS}/t{next(_names)}"


def _replication(proc: StandaloneProc, topic: str, remote: str) -> dict[str, Any] | None:
    path = topic.removeprefix("persistent://")
    answer = admin_call(proc.http_url, "GET", f"/persistent/{path}/stats")
    assert isinstance(answer, dict)
    found = answer["replication"].get(remote)
    return found if isinstance(found, dict) else None


def _drained(proc: StandaloneProc, topic: str, remote: str) -> bool:
    repl = _replication(proc, topic, remote)
    return bool(repl and repl["connected"] and repl["replicationBacklog"] == 0)


def _publish(producer: pulsar.Producer, n: int) -> list[pulsar.Result]:
    """``n`` keyed messages sent without waiting (results gathered as they come)."""
    results: list[pulsar.Result] = []
    for i in range(n):
        key = f"k{i % KEYS}"
        producer.send_async(
            f"{key}/{i:06d}".encode(), lambda res, _id: results.append(res), partition_key=key
        )
    return results


def _stored(proc: StandaloneProc, topic: str) -> list[tuple[str, bytes]]:
    """Every message of ``topic`` on ``proc``, from the earliest: (key, payload)."""
    with client(proc) as c:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=30_000)
            got.append((msg.partition_key(), msg.data()))
        return got


def _exactly_once_in_order_per_key(
    got: list[tuple[str, bytes]], n: int, *, complete: bool = True
) -> None:
    """``got`` has ``n`` distinct messages (the ``n`` published, when ``complete``), each
    key's in the order they were published."""
    payloads = [m for _, m in got]
    assert len(payloads) == len(set(payloads)) == n, f"{len(got)} stored, {n} expected"
    if complete:
        assert sorted(payloads) == sorted(f"k{i % KEYS}/{i:06d}".encode() for i in range(n))
    for key in {k for k, _ in got}:
        mine = [m for k, m in got if k == key]
        assert mine == sorted(mine), f"key {key} out of order"


def _window_full(a: StandaloneProc, topic: str) -> None:
    """More waiting than the window holds: the replicator reads whenever the window has
    room, so its window is full."""
    wait_until(
        lambda: (
            (r := _replication(a, topic, "b")) is not None
            and r["connected"]
            and r["replicationBacklog"] > 4 * WINDOW
        ),
        timeout=60,
        interval=0.05,
        what="a's replicator window full",
    )


@contextlib.contextmanager
def _filling(
    a: StandaloneProc, b: StandaloneProc, topic: str, n: int
) -> Iterator[tuple[pulsar.Producer, list[pulsar.Result]]]:
    """A subscription on ``b`` (it holds what ``b`` stores: no retention), the topic and its
    replicator on ``a``, ``n`` keyed messages being published there (the producer and its
    results so far), entered once ``a``'s replicator window is full."""
    with client(b) as cb:
        cb.subscribe(topic, "s").close()
    with client(a) as ca:
        ca.subscribe(topic, "s").close()
        wait_until(lambda: _drained(a, topic, "b"), timeout=30, what="replicator a -> b")
        producer = ca.create_producer(
            topic, batching_enabled=False, max_pending_messages=n, block_if_queue_full=True
        )
        results = _publish(producer, n)
        _window_full(a, topic)
        yield producer, results


def test_remote_restarted_with_the_window_full(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 4000
    with _filling(a, b, topic, n) as (producer, results):
        b.stop()
        b.restart()
        wait_until(lambda: len(results) == n, timeout=60, what="every message stored on a")
        assert set(results) == {pulsar.Result.Ok}
        wait_until(lambda: _drained(a, topic, "b"), timeout=120, what="a -> b drained")
        producer.close()
    _exactly_once_in_order_per_key(_stored(b, topic), n)


def test_source_sigkilled_with_the_window_full(clusters: dict[str, StandaloneProc]) -> None:
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 4000
    with _filling(a, b, topic, n):
        a.kill()  # (mid-publish: what a had not stored fails on the client)
    a.restart()
    wait_until(lambda: _drained(a, topic, "b"), timeout=120, what="a -> b drained")
    on_a = _stored(a, topic)
    assert len(on_a) > 4 * WINDOW
    on_b = _stored(b, topic)
    assert on_b == on_a  # each once, in a's order
    _exactly_once_in_order_per_key(on_b, len(on_a), complete=False)


def test_remote_killed_and_source_moved_with_the_window_full(
    clusters: dict[str, StandaloneProc],
) -> None:
    """``b`` SIGKILLed with the window full, and the topic moved on ``a`` while ``b`` is down:
    the new owner's replicator starts from the cursor, which never moved past an entry
    without its receipt; what ``b`` had not stored is sent again, what it had is dropped."""
    a, b = clusters["a"], clusters["b"]
    topic, n = _topic(), 4000
    with _filling(a, b, topic, n) as (producer, results):
        b.kill()
        admin(a, "topics", "unload", topic)  # (the producer's sends go on after it)
        wait_until(lambda: len(results) == n, timeout=60, what="every message stored on a")
        assert set(results) == {pulsar.Result.Ok}
        b.restart()
        wait_until(lambda: _drained(a, topic, "b"), timeout=120, what="a -> b drained")
        producer.close()
    _exactly_once_in_order_per_key(_stored(b, topic), n)
