"""``OffloadReady`` on the real control plane, against a real MinIO: True only after the
operator wrote, read back and deleted a probe object in the PulsarCluster's bucket (with the
credentials of its Secret); False with S3's message for a missing bucket or wrong
credentials, and for a Secret without the AWS keys. The rendered broker.conf carries the
offload keys and the broker pods get the Secret as environment variables."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.k8s.helpers import CR, condition, eventually
from tests.k8s.test_cluster import SPEC, make_cluster
from tests.support.minio import INSTALL_SCRIPT, MinioServer, minio_available
from tests.support.procs import Proc

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    if not minio_available():
        pytest.skip(f"the MinIO binary is not built (run {INSTALL_SCRIPT}; `make test` does)")
    server = MinioServer(Path(tmp_path_factory.mktemp("minio"))).start()
    try:
        yield server
    finally:
        server.stop()


def secret(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        ),
    )


def offload_spec(minio: MinioServer, bucket: str, credentials: str) -> dict[str, Any]:
    return {
        **SPEC,
        "offload": {
            "enabled": True,
            "endpoint": minio.endpoint,
            "bucket": bucket,
            "region": minio.region,
            "credentialsSecret": credentials,
            "thresholdBytes": 1048576,
            "deletionLagSeconds": 60,
        },
    }


def offload_ready(cr: CR, name: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        obj = cr.get("pulsarclusters", name)
        c = condition(obj, "OffloadReady")
        return c if c is not None and c.get("reason") not in (None, "Disabled") else None

    got: dict[str, Any] = eventually(found, timeout=60, what=f"{name}: OffloadReady")
    return got


def test_offload_ready_only_after_a_probe_object_round_trip(
    api: client.ApiClient, operator: Proc, namespace: str, minio: MinioServer
) -> None:
    cr = CR(api, namespace)
    core = client.CoreV1Api(api)
    keys = {"AWS_ACCESS_KEY_ID": minio.access_key, "AWS_SECRET_ACCESS_KEY": minio.secret_key}
    secret(core, namespace, "s3", keys)
    secret(core, namespace, "s3-wrong", {**keys, "AWS_SECRET_ACCESS_KEY": "wrong"})
    secret(core, namespace, "s3-empty", {"unrelated": "x"})
    bucket = minio.create_bucket(f"ready-{namespace}")

    make_cluster(cr, "good", offload_spec(minio, bucket, "s3"))
    ready = offload_ready(cr, "good")
    assert (ready["status"], ready["reason"]) == ("True", "ProbeSucceeded"), ready
    assert bucket in ready["message"]
    s3 = minio.client()
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0, "the probe was deleted"

    conf = core.read_namespaced_config_map("good-broker", namespace).data["broker.conf"]
    for line in (
        "managedLedgerOffloadDriver=S3",
        f"s3ManagedLedgerOffloadBucket={bucket}",
        f"s3ManagedLedgerOffloadServiceEndpoint={minio.endpoint}",
        "managedLedgerOffloadThresholdInBytes=1048576",
        "managedLedgerOffloadDeletionLagMs=60000",
    ):
        assert line in conf.splitlines(), (line, conf)
    pod = client.AppsV1Api(api).read_namespaced_deployment("good-broker", namespace)
    container = pod.spec.template.spec.containers[0]
    assert [e.secret_ref.name for e in container.env_from] == ["s3"]

    make_cluster(cr, "no-bucket", offload_spec(minio, f"missing-{namespace}", "s3"))
    failed = offload_ready(cr, "no-bucket")
    assert (failed["status"], failed["reason"]) == ("False", "ProbeFailed"), failed
    assert "NoSuchBucket" in failed["message"], failed

    make_cluster(cr, "wrong-key", offload_spec(minio, bucket, "s3-wrong"))
    failed = offload_ready(cr, "wrong-key")
    assert (failed["status"], failed["reason"]) == ("False", "ProbeFailed"), failed
    assert "SignatureDoesNotMatch" in failed["message"], failed

    make_cluster(cr, "no-keys", offload_spec(minio, bucket, "s3-empty"))
    failed = offload_ready(cr, "no-keys")
    assert (failed["status"], failed["reason"]) == ("False", "CredentialsInvalid"), failed
    assert "AWS_ACCESS_KEY_ID" in failed["message"], failed
