"""One ``magnetar standalone`` for the subscription suites, driven by the official client.

Subscription tests need no isolation beyond their own topic names, so the whole package
shares one standalone process (started once, stopped by pid at the end) and each test gets
a fresh ``pulsar.Client`` and a unique topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("subs-standalone") / "data") as proc:
        yield proc


@pytest.fixture
def client(standalone: StandaloneProc) -> Iterator[pulsar.Client]:
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    with standalone_procs.client(standalone, timeout_s=10, logger=logger) as c:
        yield c


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic for the test (full name)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"
