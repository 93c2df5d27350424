"""One ``magnetar standalone`` and one local-mode SparkSession per module for the Spark data
source suites (a session takes ~10-20 s to start on 2 cores), and helpers to produce, read
back and call the admin API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.client import admin
from tests.support import standalone as standalone_procs
from tests.support.spark import local_session
from tests.support.standalone import StandaloneProc, admin_call

LEDGER_ENTRIES = 5
"""Small ledgers, so a few messages roll over and retention can trim whole ledgers."""


def make_namespace(
    standalone: StandaloneProc, namespace: str, *, retain: bool = True, dedup: bool = False
) -> None:
    try:
        admin_call(standalone.http_url, "PUT", f"/namespaces/{namespace}", {})
    except admin.AdminError as err:
        if err.status != 409:
            raise
    if retain:  # the tests read back everything they wrote, subscribed or not
        infinite = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        admin_call(standalone.http_url, "POST", f"/namespaces/{namespace}/retention", infinite)
    if dedup:
        admin_call(standalone.http_url, "POST", f"/namespaces/{namespace}/deduplication", True)


def create_topic(standalone: StandaloneProc, topic: str, partitions: int = 0) -> None:
    """Create ``tenant/ns/name`` (partitioned when ``partitions``); already there is fine."""
    path = f"/persistent/{topic}" + ("/partitions" if partitions else "")
    try:
        admin_call(standalone.http_url, "PUT", path, partitions or None)
    except admin.AdminError as err:
        if err.status != 409:
            raise


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    proc = StandaloneProc(
        tmp_path_factory.mktemp("spark") / "data",
        extra_args=["--max-entries-per-ledger", str(LEDGER_ENTRIES)],
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = local_session("magnetar-spark-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def client(standalone: StandaloneProc) -> Iterator[pulsar.Client]:
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    with standalone_procs.client(standalone, logger=logger) as c:
        yield c


def source_options(standalone: StandaloneProc, **extra: str) -> dict[str, str]:
    return {"serviceUrl": standalone.service_url, "adminUrl": standalone.http_url, **extra}


def read_all(client: pulsar.Client, topic: str) -> list[pulsar.Message]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10_000))
    reader.close()
    return out
