"""S3 failures through a real broker (``magnetar standalone``) and a real MinIO (issue 14,
acceptance 3): wrong credentials, a missing bucket, S3 down and S3 stalled (a SIGSTOPped
MinIO) each leave the offload status at ERROR with S3's message, the topic serving every
message from its bookies, nothing offloaded or deleted -- and the next attempt succeeds once
S3 is right again. Reading an offloaded ledger while S3 is down delivers nothing (the
broker retries the read; peek answers 503 naming S3), never wrong data, and every message
arrives once S3 is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar

from tests.integration.offload.conftest import new_bucket, payloads
from tests.integration.offload.test_broker import (
    MSG,
    PER_LEDGER,
    admin,
    consume_all,
    internal_stats,
    offload_status,
    produce,
    start_standalone,
    topic_path,
    wait_offload_done,
)
from tests.support.minio import MinioServer
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

LATEST = {"ledgerId": 2**63 - 1, "entryId": 0}


def trigger(proc: StandaloneProc, topic: str) -> dict[str, Any]:
    status, answer = admin(proc, "PUT", f"{topic_path(topic)}/offload", LATEST)
    assert status == 204, answer
    return wait_offload_done(proc, topic)


def nothing_offloaded(proc: StandaloneProc, topic: str) -> None:
    ledgers = internal_stats(proc, topic)["ledgers"]
    assert not any(lg["offloaded"] for lg in ledgers), ledgers


def failed_and_serving(
    proc: StandaloneProc,
    client: pulsar.Client,
    topic: str,
    data: list[bytes],
    final: dict[str, Any],
    why: str,
    subscription: str,
) -> None:
    """The offload ended in ERROR naming ``why``, nothing is offloaded, and a new
    ``subscription`` receives every message (from the bookies)."""
    assert final["status"] == "ERROR"
    assert why in final["lastError"], final
    nothing_offloaded(proc, topic)
    serves_everything(client, topic, data, subscription)


def serves_everything(client: pulsar.Client, topic: str, data: list[bytes], name: str) -> None:
    consumer = client.subscribe(topic, name, initial_position=pulsar.InitialPosition.Earliest)
    try:
        assert consume_all(consumer, len(data)) == data
    finally:
        consumer.close()


def test_wrong_credentials_then_right_ones(minio: MinioServer, tmp_path: Path) -> None:
    bucket = new_bucket(minio)
    topic = "wrong-credentials"
    data = payloads([MSG] * (2 * PER_LEDGER + 5), seed=3)
    proc = start_standalone(tmp_path / "data", minio, bucket, secret="not-the-secret")
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        keep = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        produce(client, topic, data)
        final = trigger(proc, topic)
        failed_and_serving(proc, client, topic, data, final, "SignatureDoesNotMatch", "r1")
        keep.close()
        client.close()
    finally:
        proc.stop()
    # the right credentials: the next attempt succeeds (and cleans up the failed one)
    proc = start_standalone(tmp_path / "data", minio, bucket)
    try:
        final = trigger(proc, topic)
        assert final["status"] == "SUCCESS", final
        closed = internal_stats(proc, topic)["ledgers"][:-1]
        assert closed and all(lg["offloaded"] for lg in closed if lg["entries"] > 0)
    finally:
        proc.stop()


def test_missing_bucket_then_created(minio: MinioServer, tmp_path: Path) -> None:
    bucket = f"missing-{tmp_path.name[-20:].lower().replace('_', '-')}"
    proc = start_standalone(tmp_path / "data", minio, bucket)
    topic = "missing-bucket"
    data = payloads([4096] * (2 * PER_LEDGER + 5), seed=4)
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        keep = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        produce(client, topic, data)
        final = trigger(proc, topic)
        assert bucket in final["lastError"], final
        failed_and_serving(proc, client, topic, data, final, "NoSuchBucket", "r1")
        minio.create_bucket(bucket)
        final = trigger(proc, topic)
        assert final["status"] == "SUCCESS", final
        assert offload_status(proc, topic)["lastError"] == ""
        serves_everything(client, topic, data, "reader-2")
        keep.close()
        client.close()
    finally:
        proc.stop()


def test_s3_down_and_stalled_then_back(own_minio: MinioServer, tmp_path: Path) -> None:
    minio = own_minio
    bucket = new_bucket(minio)
    quick = ("--offload-read-timeout-ms", "2000", "--offload-max-attempts", "1")
    lag0 = ("--offload-deletion-lag-ms", "0")
    data_dir = tmp_path / "data"
    proc = start_standalone(data_dir, minio, bucket, *quick, *lag0)
    topic = "s3-down"
    data = payloads([MSG] * (2 * PER_LEDGER + 5), seed=5)
    try:
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        keep = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        produce(client, topic, data)

        # S3 down: connection refused
        minio.stop()
        final = trigger(proc, topic)
        failed_and_serving(proc, client, topic, data, final, "S3UnavailableError", "down")

        # S3 stalled: it accepts connections and answers nothing
        minio.start()
        minio.pause()
        try:
            final = trigger(proc, topic)
        finally:
            minio.resume()
        failed_and_serving(proc, client, topic, data, final, "S3UnavailableError", "stalled")

        # S3 back: the next attempt succeeds, the bookie copies go (lag 0)
        final = trigger(proc, topic)
        assert final["status"] == "SUCCESS", final

        def bookie_copies_deleted() -> bool:
            closed = [lg for lg in internal_stats(proc, topic)["ledgers"][:-1] if lg["entries"]]
            return bool(closed) and all(
                lg["offloaded"] and lg["offloadLocation"]["bookieDeleted"] for lg in closed
            )

        wait_until(bookie_copies_deleted, timeout=60, what="the bookie copies deleted")
        keep.close()
        client.close()
    finally:
        minio.resume()
        proc.stop()

    # reading offloaded ledgers while S3 is down (a restart: nothing cached)
    proc.restart()
    try:
        minio.stop()
        client = pulsar.Client(proc.service_url, operation_timeout_seconds=60)
        consumer = client.subscribe(
            topic, "from-s3", initial_position=pulsar.InitialPosition.Earliest
        )
        got = []
        try:
            got.append(consumer.receive(3000).data())
        except pulsar.Timeout:
            pass
        assert got == [], "a message was delivered from an offloaded ledger while S3 was down"
        status, answer = admin(proc, "GET", f"{topic_path(topic)}/subscription/keep/position/1")
        assert status == 503, (status, answer)
        assert "S3UnavailableError" in answer["reason"], answer
        minio.start()
        assert consume_all(consumer, len(data), timeout_ms=60_000) == data
        consumer.close()
        client.close()
    finally:
        proc.stop()
