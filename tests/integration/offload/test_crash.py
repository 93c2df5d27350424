"""An offloading process SIGKILLed with its multipart upload half done: nothing complete is
left in the bucket, the attempt it had recorded (its UUID, written before the upload) is
enough to remove its upload and parts, and a new attempt completes."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from magnetar.offload.offloader import Offloader
from tests.integration.offload.conftest import (
    LedgerEnv,
    config_for,
    new_bucket,
    offload_and_open,
    payloads,
)
from tests.integration.offload.test_failures import BIG, GATE, parts_uploaded
from tests.support.minio import ROOT, MinioServer
from tests.support.procs import Proc
from tests.support.wait import eventually


async def test_killed_offloader_leaves_orphans_that_the_recorded_uuid_removes(
    ledgers: LedgerEnv, minio: MinioServer, tmp_path: Path
) -> None:
    bucket = new_bucket(minio)
    config = config_for(minio, bucket, upload_concurrency=1)
    settings = {
        "dir": str(tmp_path / "child"),
        "sizes": BIG,
        "gate_at": GATE,
        "s3": dataclasses.asdict(config),
    }
    log = tmp_path / "child.log"
    child = Proc(
        [sys.executable, "-m", "tests.integration.offload.crash_child", json.dumps(settings)],
        log_path=log,
        cwd=ROOT,
    ).start()
    try:
        await eventually(lambda: "GATED" in log.read_text(), timeout=60, what="the child's gate")
        attempt = json.loads(log.read_text().splitlines()[0])  # recorded before uploading
        assert attempt["complete"] is False
        await eventually(
            lambda: parts_uploaded(minio, bucket, attempt["dataKey"]) >= 1, what="a part"
        )
        child.kill()
    finally:
        child.kill()
    assert child.popen is not None and child.popen.returncode == -9
    # nothing complete: no data object, no index; the upload with its parts remains
    assert minio.keys(bucket) == []
    assert minio.uploads(bucket, attempt["dataKey"]) == [attempt["dataKey"]]
    ledger_id = int(attempt["dataKey"].split("/")[1])
    offloader = Offloader(config)
    try:
        removed = await offloader.cleanup_orphans(ledger_id, keep=(), known=[attempt["uuid"]])
        assert removed == [attempt["uuid"]]
        assert minio.uploads(bucket, attempt["dataKey"]) == []
        assert minio.keys(bucket) == []
        # a new attempt completes (here on a ledger of the same entry sizes in this process)
        data = payloads(BIG)
        handle = await ledgers.write(data)
        _, reader = await offload_and_open(offloader, handle)
        assert [p for _, p in await reader.read(0, len(data) - 1)] == data
    finally:
        await offloader.close()
