"""The in-memory managed ledger with injected faults, for the broker core's tests (a
recording ServerCnx is :class:`tests.unit.broker.subscriptions.fakes.FakeCnx`)."""

from __future__ import annotations

import asyncio

from magnetar.managed_ledger.api import Position, StorageUnavailableError
from magnetar.managed_ledger.memory import MemoryManagedLedger


class FaultyLedger(MemoryManagedLedger):
    """The in-memory managed ledger whose next adds can be made to fail (``fail_next``) or to
    complete late (``delay`` seconds after they are stored)."""

    def __init__(self, name: str = "public/default/persistent/t") -> None:
        super().__init__(name)
        self.fail_next = 0
        self.delay = 0.0

    def append(self, data: bytes) -> asyncio.Future[Position]:
        if self.fail_next:
            self.fail_next -= 1
            failed: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            failed.set_exception(StorageUnavailableError("injected"))
            return failed
        stored = super().append(data)
        if self.delay:
            return asyncio.ensure_future(self._late(stored, self.delay))
        return stored

    @staticmethod
    async def _late(stored: asyncio.Future[Position], delay: float) -> Position:
        await asyncio.sleep(delay)  # an add that takes this long to be durable
        return await stored
