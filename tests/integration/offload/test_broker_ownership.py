"""Offloaded ledgers across an ownership change (issue 14): two ``magnetar broker`` processes
on etcd and one bookie, both offloading to the same MinIO bucket. The owner offloads a
topic (bookie copies deleted, lag 0) and is SIGKILLed; the other broker takes the bundle
over and serves everything from S3: internalStats shows the same offloaded ledgers and
objects, a consumer from earliest receives every message byte-identical."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from tests.integration.offload.conftest import new_bucket, payloads
from tests.integration.offload.test_broker import (
    MSG,
    PER_LEDGER,
    admin,
    consume_all,
    metric,
    offload_args,
    wait_offload_done,
)
from tests.support import cluster
from tests.support.etcd import EtcdServer
from tests.support.minio import MinioServer
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.etcd

TOPIC = "offload-owned"
PATH = f"/admin/v2/persistent/public/default/{TOPIC}"


@dataclass(frozen=True)
class _At:
    """Where the admin helpers send their calls."""

    http_url: str


@pytest.fixture
def brokers(
    own_etcd: EtcdServer, tmp_path: Path, minio: MinioServer
) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    bucket = new_bucket(minio)
    extra = [
        "--max-entries-per-ledger", str(PER_LEDGER),
        "--offload-deletion-lag-ms", "0",
        *offload_args(tmp_path, minio, bucket),
    ]  # fmt: skip
    with cluster.two_brokers(own_etcd.url, tmp_path, extra_args=extra) as pair:
        yield pair


def test_the_next_owner_serves_offloaded_ledgers_from_s3(
    brokers: tuple[BrokerProc, BrokerProc],
) -> None:
    a, b = brokers
    n = 3 * PER_LEDGER + 5
    data = payloads([MSG // 4] * n, seed=31)
    client = pulsar.Client(a.service_url, operation_timeout_seconds=60)
    try:
        keep = client.subscribe(TOPIC, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for payload in data:
            producer.send(payload)
        producer.close()
        found = json.loads(a.get(f"/lookup/v2/topic/persistent/public/default/{TOPIC}"))
        owner, other = (a, b) if a.serves(found["brokerUrl"]) else (b, a)
        # the owner's own HTTP URL: with workers, a PUT on its shared port could land on the
        # worker that does not own the topic (a 307, which a PUT does not follow here)
        status, answer = admin(
            _At(found["httpUrl"]), "PUT", f"{PATH}/offload", {"ledgerId": 2**63 - 1, "entryId": 0}
        )
        assert status == 204, answer
        assert wait_offload_done(owner, TOPIC)["status"] == "SUCCESS"

        def offloaded_and_deleted() -> list[dict[str, object]] | None:
            status, stats = admin(owner, "GET", f"{PATH}/internalStats")
            assert status == 200 and isinstance(stats, dict)
            closed = [lg for lg in stats["ledgers"][:-1] if lg["entries"]]
            done = closed and all(
                lg["offloaded"] and lg["offloadLocation"]["bookieDeleted"] for lg in closed
            )
            return closed if done else None

        before = wait_until(offloaded_and_deleted, timeout=60, what="offloaded, bookie copies gone")
        keep.close()
        client.close()

        owner.kill()  # the other broker takes the bundle once the owner's session expires
        client = pulsar.Client(other.service_url, operation_timeout_seconds=60)
        consumer = client.subscribe(
            TOPIC, "after", initial_position=pulsar.InitialPosition.Earliest
        )
        assert consume_all(consumer, n, timeout_ms=60_000) == data
        status, stats = admin(other, "GET", f"{PATH}/internalStats")
        assert status == 200 and isinstance(stats, dict)
        after = {
            lg["ledgerId"]: lg["offloadLocation"] for lg in stats["ledgers"] if lg["offloaded"]
        }
        assert after == {lg["ledgerId"]: lg["offloadLocation"] for lg in before}
        assert metric(other, "magnetar_offload_read_bytes_total") > 0
        consumer.close()
    finally:
        client.close()
