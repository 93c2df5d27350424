"""Fixtures of the broker suites: a ``magnetar standalone`` subprocess per module (free
loopback ports, tmp data dir, stopped by pid) and official ``pulsar-client`` clients."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pulsar
import pytest

from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc

_names = itertools.count()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("standalone") / "data") as proc:
        yield proc


@pytest.fixture
def client(standalone: StandaloneProc) -> Iterator[pulsar.Client]:
    with standalone_procs.client(standalone) as c:
        yield c


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh short topic name per test."""
    return f"{request.node.name.replace('[', '-').replace(']', '')}-{next(_names)}"
