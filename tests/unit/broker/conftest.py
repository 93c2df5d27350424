"""Fixtures of the broker unit tests: the broker core in-process
(``tests/support/inprocess.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.service import BrokerService
from tests.support.inprocess import broker_service


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[BrokerService]:
    async with broker_service(tmp_path) as svc:
        yield svc
