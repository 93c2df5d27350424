"""Offload through a real broker (``magnetar standalone`` with its real bookie) and a real
MinIO, driven by the official Python client and the admin REST API (issue 14, acceptance 1
and 2):

* ~50 MiB over several ledgers offloaded by ``PUT .../offload``: the status goes to
  SUCCESS, internalStats shows ``offloaded: true`` and the objects (which exist in the
  bucket), the bookie copies are gone after the deletion lag (their ledger metadata is
  deleted), and a fresh consumer from earliest, a reader from a middle message id and a
  seek by publish time receive every message byte-identical -- from S3, as /metrics
  shows; peek (examinemessage) reads an offloaded message; a restart keeps everything; the
  topic's deletion deletes its objects.
* the namespace ``offloadThreshold`` offloads closed ledgers by itself after roll-overs.
* a broker SIGKILLed in the middle of an offload: after the restart no message is lost,
  nothing is marked offloaded without complete objects, the killed attempt's objects are
  removed and the retry completes.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import NoSuchLedgerError
from magnetar.metadata import open_store
from tests.integration.offload.conftest import BLOCK, new_bucket, payloads
from tests.support.minio import MinioServer
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

MSG = 100 * 1024
PER_LEDGER = 100


def offload_args(
    creds_dir: Path, minio: MinioServer, bucket: str, *, secret: str | None = None
) -> list[str]:
    """The broker flags that offload to ``bucket`` (MinIO's credentials, or ``secret``,
    written to a credentials file in ``creds_dir``)."""
    creds = creds_dir / f"aws-credentials-{bucket}-{secret or 'ok'}"
    creds.write_text(
        f"[default]\naws_access_key_id = {minio.access_key}\n"
        f"aws_secret_access_key = {secret or minio.secret_key}\n"
    )
    return [
        "--offload-driver", "S3",
        "--offload-bucket", bucket,
        "--offload-region", minio.region,
        "--offload-endpoint", minio.endpoint,
        "--offload-path-style", "true",
        "--offload-block-size", str(BLOCK),
        "--offload-read-cache-bytes", str(4 * BLOCK),
        "--offload-credentials-file", str(creds),
    ]  # fmt: skip


def start_standalone(
    data_dir: Path, minio: MinioServer, bucket: str, *extra: str, secret: str | None = None
) -> StandaloneProc:
    """A standalone offloading to ``bucket`` (with MinIO's credentials, or ``secret``)."""
    return StandaloneProc(
        data_dir,
        extra_args=[
            "--max-entries-per-ledger", str(PER_LEDGER),
            *offload_args(data_dir.parent, minio, bucket, secret=secret),
            *extra,
        ],
    ).start()  # fmt: skip


def admin(proc: StandaloneProc, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{proc.http_url}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"} if data is not None else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as err:
        raw = err.read()
        status = err.code
    if not raw:
        return status, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def topic_path(topic: str) -> str:
    return f"/admin/v2/persistent/public/default/{topic}"


def internal_stats(proc: StandaloneProc, topic: str) -> dict[str, Any]:
    status, stats = admin(proc, "GET", f"{topic_path(topic)}/internalStats")
    assert status == 200, stats
    assert isinstance(stats, dict)
    return stats


def offload_status(proc: StandaloneProc, topic: str) -> dict[str, Any]:
    status, answer = admin(proc, "GET", f"{topic_path(topic)}/offload")
    assert status == 200, answer
    assert isinstance(answer, dict)
    return answer


def wait_offload_done(proc: StandaloneProc, topic: str, timeout: float = 240) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(offload_status(proc, topic))
        return found["status"] in ("SUCCESS", "ERROR")

    wait_until(done, timeout=timeout, interval=0.2, what=f"the offload of {topic} to end")
    return found


def produce(client: pulsar.Client, topic: str, data: Sequence[bytes]) -> list[pulsar.MessageId]:
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=64, block_if_queue_full=True
    )
    ids: list[pulsar.MessageId | None] = [None] * len(data)

    def callback(i: int) -> Any:
        def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            if res == pulsar.Result.Ok:
                ids[i] = mid

        return done

    for i, payload in enumerate(data):
        producer.send_async(payload, callback(i))
    producer.flush()
    wait_until(lambda: all(i is not None for i in ids), timeout=120, what="every send receipt")
    producer.close()
    return [i for i in ids if i is not None]


def read_all(reader: Any, n: int, timeout_ms: int = 30_000) -> list[bytes]:
    return [reader.read_next(timeout_ms).data() for _ in range(n)]


def consume_all(consumer: Any, n: int, timeout_ms: int = 30_000) -> list[bytes]:
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_ms)
        consumer.acknowledge(msg)
        out.append(msg.data())
    return out


def metric(proc: StandaloneProc, name: str) -> float:
    total = 0.0
    for line in proc.metrics().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head == name or head.startswith(name + "{"):
                total += float(value)
    return total


def bucket_keys(minio: MinioServer, bucket: str, prefix: str = "ledgers/") -> set[str]:
    s3 = minio.client()
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.update(o["Key"] for o in page.get("Contents", []))
    return keys


def ledgers_still_on_bookies(data_dir: Path, ledger_ids: Sequence[int]) -> list[int]:
    """Of ``ledger_ids``, those whose ledger metadata still exists (the standalone must be
    stopped: its embedded store is then opened here)."""

    async def check() -> list[int]:
        store = await open_store(f"embedded://{data_dir.resolve() / 'metadata'}")
        client = LedgerClient(store)
        found = []
        try:
            for lid in ledger_ids:
                try:
                    handle = await client.open(lid)
                except NoSuchLedgerError:
                    continue
                found.append(lid)
                await handle.close()
        finally:
            await client.close()
            await store.close()
        return found

    return asyncio.run(check())


@pytest.fixture
def pulsar_client() -> Iterator[list[pulsar.Client]]:
    """Clients the test opens (closed after it)."""
    clients: list[pulsar.Client] = []
    yield clients
    for c in clients:
        c.close()


def test_fifty_mib_offloaded_manually_read_back_byte_identical(
    minio: MinioServer, tmp_path: Path, pulsar_client: list[pulsar.Client]
) -> None:
    bucket = new_bucket(minio)
    data_dir = tmp_path / "data"
    proc = start_standalone(data_dir, minio, bucket, "--offload-deletion-lag-ms", "2000")
    topic = "offload-50mib"
    n = 5 * PER_LEDGER + 10  # 510 x 100 KiB: 50 MiB over 5 closed ledgers, 10 in the current
    data = payloads([MSG] * n, seed=14)
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        # a subscription keeps the messages (and serves peek)
        status, answer = admin(proc, "PUT", topic_path(topic))
        assert status == 204, answer
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/subscription/peek", {"ledgerId": -1, "entryId": -1}
        )
        assert status == 204, answer
        ids = produce(client, topic, data[: n // 2])
        t_mid = int(time.time() * 1000) + 1
        wait_until(lambda: int(time.time() * 1000) > t_mid, timeout=5, interval=0.001)
        ids += produce(client, topic, data[n // 2 :])

        assert offload_status(proc, topic)["status"] == "NOT_RUN"
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer
        final = wait_offload_done(proc, topic)
        assert final["status"] == "SUCCESS", final
        assert final["lastError"] == ""

        stats = internal_stats(proc, topic)
        closed = stats["ledgers"][:-1]
        assert len(closed) == 5, stats["ledgers"]
        assert sum(lg["entries"] for lg in closed) == 5 * PER_LEDGER
        assert all(lg["offloaded"] for lg in closed), stats["ledgers"]
        assert not stats["ledgers"][-1]["offloaded"]
        keys = bucket_keys(minio, bucket)
        for lg in closed:
            loc = lg["offloadLocation"]
            assert loc["complete"] is True and loc["bucket"] == bucket
            assert {loc["dataKey"], loc["indexKey"]} <= keys
        assert final["firstUnoffloadedMessage"]["ledgerId"] == stats["ledgers"][-1]["ledgerId"]
        assert metric(proc, "magnetar_offload_bytes_total") >= 5 * PER_LEDGER * MSG
        offloaded_size = sum(lg["size"] for lg in closed)
        status, topic_stats = admin(proc, "GET", f"{topic_path(topic)}/stats")
        assert topic_stats["offloadedStorageSize"] == offloaded_size
        assert metric(proc, "pulsar_storage_offloaded_size") == offloaded_size

        # the bookie copies go after the lag
        wait_until(
            lambda: all(
                lg["offloadLocation"]["bookieDeleted"]
                for lg in internal_stats(proc, topic)["ledgers"][:-1]
            ),
            timeout=60,
            what="the bookie copies deleted after the lag",
        )
        client.close()
        pulsar_client.clear()
    finally:
        proc.stop()

    offloaded_ids = [lg["ledgerId"] for lg in closed]
    assert ledgers_still_on_bookies(data_dir, offloaded_ids) == []

    # a restart keeps everything: the records, and reads from S3
    proc.restart()
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        stats = internal_stats(proc, topic)
        assert [lg["ledgerId"] for lg in stats["ledgers"] if lg["offloaded"]] == offloaded_ids
        read_before = metric(proc, "magnetar_offload_read_bytes_total")

        # a fresh consumer from earliest
        consumer = client.subscribe(
            topic, "from-earliest", initial_position=pulsar.InitialPosition.Earliest
        )
        assert consumer_all_equal(consumer, data)
        consumer.close()
        # a reader from a middle message id (inclusive); its has_message_available asks
        # the broker for the last message id
        k = n // 3
        reader = client.create_reader(topic, ids[k], start_message_id_inclusive=True)
        assert reader.has_message_available()
        assert read_all(reader, n - k) == data[k:]
        reader.close()
        # a seek by message id, back into the first offloaded ledger
        consumer = client.subscribe(topic, "by-id", initial_position=pulsar.InitialPosition.Latest)
        consumer.seek(ids[7])
        assert consume_all(consumer, n - 8) == data[8:]  # seek positions after the id
        consumer.close()
        # a seek by publish time
        consumer = client.subscribe(
            topic, "by-time", initial_position=pulsar.InitialPosition.Latest
        )
        consumer.seek(t_mid)
        assert consume_all(consumer, n - n // 2) == data[n // 2 :]
        consumer.close()
        from_s3 = metric(proc, "magnetar_offload_read_bytes_total") - read_before
        assert from_s3 >= 5 * PER_LEDGER * MSG
        # peek (examinemessage) of the first message, in an offloaded ledger
        status, body = admin(proc, "GET", f"{topic_path(topic)}/subscription/peek/position/1")
        assert status == 200 and body == data[0]
        client.close()
        pulsar_client.clear()
        # deleting the topic deletes its objects
        status, answer = admin(proc, "DELETE", f"{topic_path(topic)}?force=true")
        assert status == 204, answer
        assert bucket_keys(minio, bucket) == set()
    finally:
        proc.stop()


def consumer_all_equal(consumer: Any, data: Sequence[bytes]) -> bool:
    got = consume_all(consumer, len(data))
    if got == list(data):
        return True
    bad = next(i for i, (a, b) in enumerate(zip(got, data, strict=True)) if a != b)
    raise AssertionError(f"message {bad} differs ({len(got[bad])} vs {len(data[bad])} bytes)")


def test_namespace_threshold_offloads_after_rollovers(
    minio: MinioServer, tmp_path: Path, pulsar_client: list[pulsar.Client]
) -> None:
    bucket = new_bucket(minio)
    proc = start_standalone(tmp_path / "data", minio, bucket, "--offload-deletion-lag-ms", "0")
    topic = "offload-threshold"
    n = 3 * PER_LEDGER + 10
    data = payloads([4096] * n, seed=7)
    try:
        status, answer = admin(
            proc, "PUT", "/admin/v2/namespaces/public/default/offloadThreshold", 0
        )
        assert status == 204, answer
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
        produce(client, topic, data)

        def closed_offloaded() -> bool:
            ledgers = internal_stats(proc, topic)["ledgers"]
            closed = [lg for lg in ledgers[:-1] if lg["entries"] > 0]
            return len(closed) >= 3 and all(
                lg["offloaded"] and lg["offloadLocation"]["bookieDeleted"] for lg in closed
            )

        wait_until(closed_offloaded, timeout=120, what="the threshold's offload")
        assert offload_status(proc, topic)["status"] == "SUCCESS"
        offloaded = {
            lg["ledgerId"]: lg["offloadLocation"]
            for lg in internal_stats(proc, topic)["ledgers"]
            if lg["offloaded"]
        }
        assert consumer_all_equal(consumer, data)

        # everything acknowledged, no retention: the trimmer deletes the ledgers -- and
        # their objects in the bucket
        def trimmed() -> bool:
            left = {lg["ledgerId"] for lg in internal_stats(proc, topic)["ledgers"]}
            return not (left & set(offloaded))

        wait_until(trimmed, timeout=60, what="the acknowledged ledgers trimmed")
        wait_until(
            lambda: bucket_keys(minio, bucket) == set(),
            timeout=30,
            what="the trimmed ledgers' objects deleted",
        )

        # offloadThresholdInSeconds, in a namespace of its own: ledgers closed more than a
        # second ago go
        aged = "/admin/v2/namespaces/public/aged"
        assert admin(proc, "PUT", aged)[0] == 204
        status, answer = admin(proc, "PUT", f"{aged}/offloadThresholdInSeconds", 1)
        assert status == 204, answer
        assert admin(proc, "GET", f"{aged}/offloadThresholdInSeconds") == (200, 1)
        old_topic = "persistent://public/aged/by-age"
        aged_sub = client.subscribe(
            old_topic, "all", initial_position=pulsar.InitialPosition.Earliest
        )
        produce(client, old_topic, data[: 2 * PER_LEDGER + 1])
        aged_path = "/admin/v2/persistent/public/aged/by-age/internalStats"

        def aged_offloaded() -> bool:
            _, stats = admin(proc, "GET", aged_path)
            closed = [lg for lg in stats["ledgers"][:-1] if lg["entries"] > 0]
            return len(closed) >= 2 and all(lg["offloaded"] for lg in closed)

        wait_until(aged_offloaded, timeout=60, what="ledgers offloaded by age")
        assert consume_all(aged_sub, 2 * PER_LEDGER + 1) == data[: 2 * PER_LEDGER + 1]
    finally:
        proc.stop()


def test_broker_killed_mid_offload_loses_nothing_and_the_retry_completes(
    own_minio: MinioServer, tmp_path: Path, pulsar_client: list[pulsar.Client]
) -> None:
    minio = own_minio
    bucket = new_bucket(minio)
    proc = start_standalone(tmp_path / "data", minio, bucket)  # the default 4 h lag
    topic = "offload-killed"
    n = 4 * PER_LEDGER + 10
    data = payloads([MSG] * n, seed=21)
    killed: dict[str, Any] = {}
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        consumer = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        produce(client, topic, data)
        # closed while the broker is up (the durable subscription keeps the backlog): a close
        # sent to a broker just killed fails with NotConnected in the client
        consumer.close()
        client.close()
        pulsar_client.clear()
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer

        def attempt_under_way() -> bool:
            for lg in internal_stats(proc, topic)["ledgers"]:
                loc = lg.get("offloadLocation")
                if loc is not None and not loc["complete"]:
                    killed.update(ledger=lg["ledgerId"], **loc)
                    return True
            return False

        # the moment an attempt is recorded and uploading: S3 freezes, the broker dies
        wait_until(attempt_under_way, timeout=120, interval=0.02, what="an offload under way")
        minio.pause()
        proc.kill()
        minio.resume()
    finally:
        minio.resume()
        if proc.alive():
            proc.stop()

    proc.restart()
    try:
        # the killed attempt is removed when the topic loads: its record and its objects
        def stale_cleaned() -> bool:
            ledgers = internal_stats(proc, topic)["ledgers"]
            return not any(
                lg.get("offloadLocation") and not lg["offloadLocation"]["complete"]
                for lg in ledgers
            )

        wait_until(stale_cleaned, timeout=60, what="the killed attempt's record removed")
        stats = internal_stats(proc, topic)
        record = next(lg for lg in stats["ledgers"] if lg["ledgerId"] == killed["ledger"])
        assert not record["offloaded"] and record.get("offloadLocation") is None
        attempt_prefix = f"ledgers/{killed['ledger']}/{killed['uuid']}/"
        assert bucket_keys(minio, bucket, attempt_prefix) == set()
        uploads = minio.client().list_multipart_uploads(Bucket=bucket, Prefix=killed["dataKey"])
        assert uploads.get("Uploads", []) == []
        # whatever is marked offloaded is complete in the bucket
        keys = bucket_keys(minio, bucket)
        for lg in stats["ledgers"]:
            if lg["offloaded"]:
                loc = lg["offloadLocation"]
                assert {loc["dataKey"], loc["indexKey"]} <= keys

        # the retry completes; the bucket holds exactly the recorded objects
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer
        final = wait_offload_done(proc, topic)
        assert final["status"] == "SUCCESS", final
        stats = internal_stats(proc, topic)
        closed = [lg for lg in stats["ledgers"][:-1] if lg["entries"] > 0]
        assert closed and all(lg["offloaded"] for lg in closed), stats["ledgers"]
        recorded = set()
        for lg in closed:
            recorded |= {lg["offloadLocation"]["dataKey"], lg["offloadLocation"]["indexKey"]}
        assert bucket_keys(minio, bucket) == recorded

        # no message lost: the subscription's backlog and a fresh reader see every message
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert read_all(reader, n) == data
        reader.close()
    finally:
        proc.stop()


def test_an_offloaded_last_ledger_survives_restarts(
    minio: MinioServer, tmp_path: Path, pulsar_client: list[pulsar.Client]
) -> None:
    """A restart closes the current ledger, the next one starts empty; when every closed
    ledger is offloaded and its bookie copy deleted, a clean stop drops the empty current
    ledger and the *last* listed ledger is an offloaded one with no bookie copy: the next
    open must keep it (not try to recover it from the bookies, which would drop it)."""
    bucket = new_bucket(minio)
    proc = start_standalone(tmp_path / "data", minio, bucket, "--offload-deletion-lag-ms", "0")
    topic = "offloaded-last"
    data = payloads([2048] * 25, seed=9)
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        produce(client, topic, data)
        client.close()
        pulsar_client.clear()
        proc.stop()
        proc.restart()  # the ledger holding the 25 messages is closed, a new one is current
        status, answer = admin(
            proc, "PUT", f"{topic_path(topic)}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer
        assert wait_offload_done(proc, topic)["status"] == "SUCCESS"

        def all_offloaded_and_deleted() -> bool:
            ledgers = internal_stats(proc, topic)["ledgers"]
            closed = [lg for lg in ledgers if lg["entries"] > 0]
            return bool(closed) and all(
                lg["offloaded"] and lg["offloadLocation"]["bookieDeleted"] for lg in closed
            )

        wait_until(all_offloaded_and_deleted, timeout=60, what="offloaded, bookie copy gone")
        for _ in range(2):
            proc.stop()
            proc.restart()
            stats = internal_stats(proc, topic)
            assert sum(lg["entries"] for lg in stats["ledgers"] if lg["offloaded"]) == 25, stats
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        pulsar_client.append(client)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert read_all(reader, 25) == data
    finally:
        proc.stop()
