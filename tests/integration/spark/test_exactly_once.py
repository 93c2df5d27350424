"""The exactly-once streaming sink: the driver of a topic -> topic query is SIGKILLed while
a micro-batch is being written (its offsets logged, its commit not, part of its rows already
in the sink); restarted from the checkpoint it replays that batch, the broker's deduplication
drops what was already stored, and the sink holds every source row exactly once."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pulsar
import pytest

from magnetar.client.admin import AdminError
from tests.integration.spark.conftest import (
    admin_call,
    create_topic,
    make_namespace,
    read_all,
)
from tests.support.procs import Proc
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

NS = "public/spark-eo"
ROWS = 4000
PER_BATCH = 1000
JOB = Path(__file__).with_name("stream_job.py")


def _in_flight(checkpoint: Path) -> int | None:
    """A batch whose offsets are logged and whose commit is not (the last one), if any."""
    offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    pending = offsets - commits
    return max(pending) if pending else None


@pytest.mark.timeout(900)  # two Spark drivers start on a loaded 2-core machine
def test_driver_killed_mid_batch_leaves_each_row_once_in_the_sink(
    standalone: StandaloneProc, client: pulsar.Client, tmp_path: Path
) -> None:
    make_namespace(standalone, NS, dedup=True)
    source, sink = f"persistent://{NS}/payments", f"persistent://{NS}/copied"
    create_topic(standalone, f"{NS}/payments", 2)
    # one message per entry, so maxRecordsPerTrigger makes several micro-batches
    producer = client.create_producer(source, batching_enabled=False, block_if_queue_full=True)
    failed: list[object] = []
    for i in range(ROWS):
        producer.send_async(
            f"row-{i:05d}".encode(),
            lambda res, _mid: failed.append(res) if res != pulsar.Result.Ok else None,
            partition_key=f"k{i % 97}",
        )
    producer.flush()
    producer.close()
    assert not failed
    produced = [
        m.data().decode() for p in range(2) for m in read_all(client, f"{source}-partition-{p}")
    ]
    assert sorted(produced) == [f"row-{i:05d}" for i in range(ROWS)]

    checkpoint = tmp_path / "checkpoint"
    argv = [
        sys.executable, str(JOB),
        "--service-url", standalone.service_url, "--admin-url", standalone.http_url,
        "--source", source, "--sink", sink, "--checkpoint", str(checkpoint),
        "--max-records", str(PER_BATCH),
    ]  # fmt: skip
    run = Proc([*argv, "--mode", "run"], log_path=tmp_path / "driver-run.log")
    run.start()
    stored_at_kill = 0

    def stored() -> int:
        try:
            stats = admin_call(standalone.http_url, "GET", f"/persistent/{NS}/copied/internalStats")
        except (OSError, AdminError):  # not there yet
            return 0
        return int(stats["numberOfEntries"])

    def mid_batch() -> bool:
        nonlocal stored_at_kill
        assert run.alive(), run.tail()
        if _in_flight(checkpoint) is None:
            return False
        stored_at_kill = stored()
        return stored_at_kill % PER_BATCH != 0 and 0 < stored_at_kill < ROWS

    try:
        wait_until(mid_batch, timeout=240, interval=0.01, what="a micro-batch half written")
        run.kill()  # SIGKILL the driver (and with it the local executors)
    finally:
        run.kill()
    interrupted = _in_flight(checkpoint)
    assert interrupted is not None  # the batch's commit never happened
    assert 0 < stored_at_kill < ROWS
    assert stored_at_kill % PER_BATCH != 0  # part of batch ``interrupted`` is in the sink

    finish = Proc([*argv, "--mode", "available-now"], log_path=tmp_path / "driver-finish.log")
    finish.start()
    assert finish.popen is not None
    code = finish.popen.wait(timeout=300)
    assert code == 0, finish.tail()

    messages = read_all(client, sink)
    copied = Counter(m.data().decode() for m in messages)
    assert set(copied) == {f"row-{i:05d}" for i in range(ROWS)}
    twice = [
        (m.data().decode(), m.producer_name(), str(m.message_id()))
        for m in messages
        if copied[m.data().decode()] > 1
    ]
    assert not twice, (stored_at_kill, interrupted, twice[:10])
    assert _in_flight(checkpoint) is None
