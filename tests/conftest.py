"""Fixtures shared by every test suite.

Metadata store fixtures live here (not under integration/) because both unit-level
validation tests and integration suites run against the two backends:

* ``etcd_server`` — one real etcd per test session (free loopback ports, tmp data dir);
* ``own_etcd`` — a private etcd for a test that kills or restarts it;
* ``two_brokers`` — two broker processes and a bookie on ``own_etcd``
  (:mod:`tests.support.cluster`);
* ``metadata_backend`` — parametrised over ``embedded`` and ``etcd`` (marked ``etcd``);
  ``metadata_store`` — a store opened on it, closed and wiped after the test.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from magnetar.bookie.storage import disk
from magnetar.bookie.storage.config import BookieStorageConfig
from magnetar.metadata import api, open_store
from tests.support import cluster
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.procs import started
from tests.support.standalone import BrokerProc

DISK_WARN_FRACTION = 0.90
"""Above this used fraction of the disk the suites write to, the session warns (a full run
writes a few GB there, and bookies turn read-only at the threshold below)."""


def read_only_threshold() -> float:
    """The bookies' default ``diskUsageThreshold`` (the suites' bookies keep it)."""
    default = next(
        f.default for f in fields(BookieStorageConfig) if f.name == "disk_usage_threshold"
    )
    assert isinstance(default, float)
    return default


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, naming the cause, when the disk the suites write to is already past the
    bookies' read-only threshold: otherwise every suite that produces waits for writable
    bookies until its timeout (``NotEnoughBookiesError: need 1 writable bookies``), which on
    a 2-core CI machine outlasts the run's time limit."""
    threshold = read_only_threshold()
    tmp = Path(tempfile.gettempdir())
    for where in dict.fromkeys((tmp, Path(__file__).resolve().parent)):
        used = disk.used_fraction(where)
        problem = (
            f"the disk holding {where} is {used:.1%} used (1 - available/size, as the "
            f"bookies measure it); bookies are read-only above {threshold:.0%} (diskUsageThreshold)"
        )
        if used > threshold:
            pytest.exit(f"{problem}, so no suite could write: free space and run again", 2)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if used > DISK_WARN_FRACTION and reporter is not None:
            reporter.write_line(f"WARNING: {problem}: a full run may cross it", yellow=True)


ETCD_OP_TIMEOUT = 3.0
"""Operation deadline of test stores on etcd: short, so outage tests stay fast."""


def _need_etcd() -> None:
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (run `make setup`)")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A real etcd shared by the session's tests; each test wipes its keys."""
    _need_etcd()
    with started(EtcdServer(tmp_path_factory.mktemp("etcd"))) as server:
        yield server


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A private etcd, for tests that kill -9 and restart it."""
    _need_etcd()
    with started(EtcdServer(tmp_path / "own-etcd")) as server:
        yield server


@pytest.fixture
def two_brokers(own_etcd: EtcdServer, tmp_path: Path) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    with cluster.two_brokers(own_etcd.url, tmp_path) as pair:
        yield pair


@dataclass
class MetadataBackend:
    """How to open (and reopen) stores of one backend for a test."""

    name: str
    url: str
    etcd: EtcdServer | None = None

    async def open(self) -> api.MetadataStore:
        return await open_store(self.url)


def etcd_url(server: EtcdServer, *, timeout: float = ETCD_OP_TIMEOUT) -> str:
    return f"{server.url}?timeout={timeout}"


@pytest.fixture(
    params=["embedded", pytest.param("etcd", marks=pytest.mark.etcd)],
)
def metadata_backend(request: pytest.FixtureRequest, tmp_path: Path) -> MetadataBackend:
    if request.param == "embedded":
        return MetadataBackend("embedded", f"embedded://{tmp_path / 'embedded-store'}")
    server: EtcdServer = request.getfixturevalue("etcd_server")
    return MetadataBackend("etcd", etcd_url(server), server)


@pytest.fixture
async def metadata_store(metadata_backend: MetadataBackend) -> AsyncIterator[api.MetadataStore]:
    store = await metadata_backend.open()
    try:
        yield store
    finally:
        await store.close()
        if metadata_backend.etcd is not None:  # the etcd server is shared: leave it empty
            with contextlib.suppress(api.StoreUnavailableError):
                cleaner = await metadata_backend.open()
                try:
                    await cleaner.delete_prefix("/")
                finally:
                    await cleaner.close()
