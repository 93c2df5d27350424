"""Topic compaction with the official Python client against a real standalone (broker and
bookie, ledgers on disk): 100,000 messages over 1,000 keys with tombstones, compacted through
the admin API; a ``read_compacted`` reader sees exactly the latest live value of each key,
then the tail published after the compaction; the same after a SIGKILL and restart (the view
is found again from the ``__compaction`` cursor); the client's TableView; the
``compactionThreshold`` policy compacting on its own; Pulsar's refusals of read_compacted on
a Shared subscription and on a non-persistent topic."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client import admin
from tests.support.roundtrip import send_all
from tests.support.standalone import StandaloneProc
from tests.support.standalone import admin_call as _call
from tests.support.wait import wait_until

NS = "public/compaction"
KEYS = 1000
ROUNDS = 100


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProc]:
    proc = StandaloneProc(tmp_path / "data").start()
    try:
        _call(proc.http_url, "PUT", f"/namespaces/{NS}", {})
        yield proc
    finally:
        proc.stop()


def _send_all(producer: pulsar.Producer, messages: list[tuple[str, bytes]]) -> None:
    send_all(producer, [v for _, v in messages], keys=[k for k, _ in messages], timeout=180)


def _read_compacted(client: pulsar.Client, topic: str) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    out = []
    try:
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=20_000)
            out.append((msg.partition_key(), msg.data()))
    finally:
        reader.close()
    return out


def _compact(http_url: str, local: str) -> None:
    _call(http_url, "PUT", f"/persistent/{NS}/{local}/compaction")

    def done() -> bool:
        status = _call(http_url, "GET", f"/persistent/{NS}/{local}/compaction")
        assert status["status"] != "ERROR", status
        return bool(status["status"] == "SUCCESS")

    wait_until(done, timeout=300, what="compaction to succeed")


def _workload() -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    """100 rounds over 1,000 keys; round 50 deletes every 7th key (written again later),
    the last round deletes every 10th key for good."""
    messages = []
    latest: dict[str, bytes] = {}
    for r in range(ROUNDS):
        for k in range(KEYS):
            key = f"key-{k}"
            if (r == 50 and k % 7 == 0) or (r == ROUNDS - 1 and k % 10 == 0):
                value = b""
                latest.pop(key, None)
            else:
                value = f"{r}:{k}".encode()
                latest[key] = value
            messages.append((key, value))
    return messages, latest


def test_read_compacted_sees_latest_live_values_then_the_tail_across_a_restart(
    standalone: StandaloneProc,
) -> None:
    proc = standalone
    topic = f"persistent://{NS}/table"
    messages, latest = _workload()
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=100, block_if_queue_full=True
        )
        _send_all(producer, messages)
        _compact(proc.http_url, "table")
        tail = [("key-1", b"tail-1"), ("key-10", b"tail-10"), ("new-key", b"tail-new")]
        _send_all(producer, tail)
        producer.close()
        # the compacted view in the topic's order (each key's last value), then the tail
        expected = [(k, v) for k, v in latest.items()]
        expected.sort(key=lambda kv: int(kv[0].split("-")[1]))
        assert len(expected) == 900
        got = _read_compacted(client, topic)
        assert got == expected + tail
    finally:
        client.close()

    topic_stats = _call(proc.http_url, "GET", f"/persistent/{NS}/table/stats")
    assert topic_stats["compaction"]["lastCompactionRemovedEventCount"] == len(messages) - 900
    assert "__compaction" not in topic_stats["subscriptions"]
    stats = _call(proc.http_url, "GET", f"/persistent/{NS}/table/internalStats")
    compacted = stats["compactedLedger"]
    assert compacted["ledgerId"] >= 0 and compacted["entries"] > 0
    cursor = stats["cursors"]["__compaction"]
    assert cursor["properties"]["CompactedTopicLedger"] == compacted["ledgerId"]

    proc.restart()  # SIGKILL, then the same data directory
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        assert _read_compacted(client, topic) == expected + tail
    finally:
        client.close()
    again = _call(proc.http_url, "GET", f"/persistent/{NS}/table/internalStats")
    assert again["compactedLedger"]["ledgerId"] == compacted["ledgerId"]


def test_table_view_of_a_compacted_topic(standalone: StandaloneProc) -> None:
    proc = standalone
    topic = f"persistent://{NS}/tv"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
        producer.send(b"", partition_key="k0")  # tombstone
        _compact(proc.http_url, "tv")
        producer.send(b"after", partition_key="k1")
        view = client.create_table_view(topic)
        try:
            wait_until(lambda: view.get("k1") == b"after", timeout=30, what="table view")
            seen: dict[str, bytes] = {}
            view.for_each(lambda k, v: seen.__setitem__(k, v))
            assert seen == {"k1": b"after", "k2": b"v47", "k3": b"v48", "k4": b"v49"}
            producer.send(b"live", partition_key="k9")
            wait_until(lambda: view.get("k9") == b"live", timeout=30, what="table view update")
        finally:
            view.close()
        producer.close()
    finally:
        client.close()


def test_compaction_threshold_policy_compacts_on_its_own(standalone: StandaloneProc) -> None:
    proc = standalone
    topic = f"persistent://{NS}/auto"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"first", partition_key="k")
        _call(proc.http_url, "POST", f"/persistent/{NS}/auto/compactionThreshold", 1000)
        assert _call(proc.http_url, "GET", f"/persistent/{NS}/auto/compactionThreshold") == 1000
        status = _call(proc.http_url, "GET", f"/persistent/{NS}/auto/compaction")
        assert status == {"status": "NOT_RUN", "lastError": ""}
        for i in range(40):
            producer.send(b"x" * 100 + str(i).encode(), partition_key="k")

        def compacted() -> bool:
            stats = _call(proc.http_url, "GET", f"/persistent/{NS}/auto/internalStats")
            return bool(stats["compactedLedger"]["ledgerId"] >= 0)

        wait_until(compacted, timeout=60, what="compaction from the threshold")
        # the compacted view holds one value of "k" (the last when it ran), the tail the rest
        got = _read_compacted(client, topic)
        assert got[-1] == ("k", b"x" * 100 + b"39")
        assert len(got) < 41
        producer.close()
    finally:
        client.close()


def test_read_compacted_refusals(standalone: StandaloneProc) -> None:
    proc = standalone
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(
                f"persistent://{NS}/refused",
                "shared-sub",
                consumer_type=pulsar.ConsumerType.Shared,
                is_read_compacted=True,
            )
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(f"non-persistent://{NS}/refused", "sub", is_read_compacted=True)
        # a compaction of a non-persistent topic: 405
        with pytest.raises(admin.AdminError) as refused:
            _call(proc.http_url, "PUT", f"/non-persistent/{NS}/refused/compaction")
        assert refused.value.status == 405
    finally:
        client.close()


def _admin(proc: StandaloneProc, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", proc.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_admin_cli_compact_status_and_thresholds(standalone: StandaloneProc) -> None:
    proc = standalone
    topic = f"persistent://{NS}/cli"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}")
        producer.close()
    finally:
        client.close()
    status = json.loads(_admin(proc, "--output", "json", "topics", "compaction-status", topic))
    assert status == {"status": "NOT_RUN", "lastError": ""}
    _admin(proc, "topics", "compact", topic)

    def succeeded() -> bool:
        out = _admin(proc, "--output", "json", "topics", "compaction-status", topic)
        return bool(json.loads(out)["status"] == "SUCCESS")

    wait_until(succeeded, timeout=60, what="compaction through the CLI")
    _admin(proc, "namespaces", "set-compaction-threshold", NS, "--threshold", "10M")
    got = _admin(proc, "--output", "json", "namespaces", "get-compaction-threshold", NS)
    assert json.loads(got) == 10 * 1024 * 1024
    _admin(proc, "namespaces", "remove-compaction-threshold", NS)
    assert (
        json.loads(_admin(proc, "--output", "json", "namespaces", "get-compaction-threshold", NS))
        is None
    )
    _admin(proc, "topics", "set-compaction-threshold", topic, "-t", "1M")
    got = _admin(proc, "--output", "json", "topics", "get-compaction-threshold", topic)
    assert json.loads(got) == 1024 * 1024
    _admin(proc, "topics", "remove-compaction-threshold", topic)
    with pytest.raises(admin.AdminError) as bad:
        _call(proc.http_url, "POST", f"/namespaces/{NS}/compactionThreshold", -5)
    assert bad.value.status == 400


def test_the_broker_default_threshold_applies_when_no_policy_sets_one(tmp_path: Path) -> None:
    proc = StandaloneProc(tmp_path / "data", extra_args=["--compaction-threshold", "2000"]).start()
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer("persistent://public/default/dflt")
            for i in range(40):
                producer.send(b"y" * 100, partition_key=f"k{i % 3}")

            def compacted() -> bool:
                stats = _call(proc.http_url, "GET", "/persistent/public/default/dflt/internalStats")
                return bool(stats["compactedLedger"]["ledgerId"] >= 0)

            wait_until(compacted, timeout=60, what="compaction from the broker's default")
            producer.close()
        finally:
            client.close()
    finally:
        proc.stop()


def test_last_message_a_tombstone_and_seeks_of_a_compacted_reader(
    standalone: StandaloneProc,
) -> None:
    """GET_LAST_MESSAGE_ID answers the compacted ledger's last entry when the topic's last
    message is a tombstone compaction folded in (the has-message-available loop ends); a
    seek goes back into the compacted ledger."""
    proc = standalone
    topic = f"persistent://{NS}/seeks"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}") for i in range(9)]
        producer.send(b"", partition_key="k2")  # the last message: a tombstone
        _compact(proc.http_url, "seeks")
        assert _read_compacted(client, topic) == [("k0", b"v6"), ("k1", b"v7")]
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        try:
            assert reader.read_next(timeout_millis=20_000).data() == b"v6"
            assert reader.read_next(timeout_millis=20_000).data() == b"v7"
            assert not reader.has_message_available()
            reader.seek(pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=20_000).data() == b"v6"
            # v5's id (its key's later value replaced it): the compacted entries after it (the
            # client itself skips the seek position, as against Pulsar)
            reader.seek(ids[5])
            assert reader.read_next(timeout_millis=20_000).data() == b"v6"
            assert reader.read_next(timeout_millis=20_000).data() == b"v7"
        finally:
            reader.close()
        producer.close()
    finally:
        client.close()


def test_compaction_of_a_partitioned_topic_compacts_every_partition(
    standalone: StandaloneProc,
) -> None:
    proc = standalone
    _call(proc.http_url, "PUT", f"/persistent/{NS}/parted/partitions", 2)
    topic = f"persistent://{NS}/parted"
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 8}")
        producer.close()
        _call(proc.http_url, "PUT", f"/persistent/{NS}/parted/compaction")

        def every_partition_compacted() -> bool:
            statuses = [
                _call(proc.http_url, "GET", f"/persistent/{NS}/parted-partition-{i}/compaction")
                for i in range(2)
            ]
            return all(s["status"] == "SUCCESS" for s in statuses)

        wait_until(every_partition_compacted, timeout=60, what="both partitions compacted")
        got = sorted(_read_compacted(client, topic))
        assert got == sorted((f"k{k}", f"v{32 + k}".encode()) for k in range(8))
    finally:
        client.close()


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD", "SNAPPY", "ZLIB"])
def test_compaction_of_compressed_batches(standalone: StandaloneProc, codec: str) -> None:
    """Batches the official client compressed with each of Pulsar's codecs are compacted (the
    batches that keep only some of their messages are written back with the same codec) and
    read back by a compacted reader."""
    proc = standalone
    local = f"compressed-{codec.lower()}"
    topic = f"persistent://{NS}/{local}"
    messages = [(f"key-{k}", f"{r}:{k}:".encode() * 20) for r in range(5) for k in range(300)]
    messages += [(f"key-{k}", b"") for k in range(0, 300, 3)]  # every third key deleted
    latest: dict[str, bytes] = {}
    for key, value in messages:
        if value:
            latest[key] = value
        else:
            latest.pop(key, None)
    client = pulsar.Client(proc.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic,
            compression_type=getattr(pulsar.CompressionType, {"ZLIB": "ZLib"}.get(codec, codec)),
            batching_enabled=True,
            batching_max_messages=50,
            block_if_queue_full=True,
        )
        _send_all(producer, messages)
        # a batch holding a key's last value beside values overwritten later: kept in part
        _send_all(producer, [("key-1", b"last-1"), ("key-2", b"last-2")])
        latest["key-1"], latest["key-2"] = b"last-1", b"last-2"
        producer.close()
        _compact(proc.http_url, local)
        got = dict(_read_compacted(client, topic))
        assert got == latest
    finally:
        client.close()
