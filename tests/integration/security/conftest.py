"""The secured standalone of the security suites (tests/support/secured.py), one per module,
set up as the official Python client's tests set up Apache Pulsar."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.procs import started
from tests.support.secured import Secured


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with started(Secured(tmp_path_factory.mktemp("secured"))) as proc:
        proc.set_up_like_the_client_tests()
        yield proc
