"""Test doubles for the broker's seams: the in-memory managed ledger with injected faults,
and a recording ServerCnx."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from magnetar.managed_ledger.api import Position, StorageUnavailableError
from magnetar.managed_ledger.memory import MemoryManagedLedger
from magnetar.wire import pb
from magnetar.wire.ids import MessageId


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


class RecordingCnx:
    """A ServerCnx that keeps what was sent."""

    def __init__(self) -> None:
        self.commands: list[pb.BaseCommand] = []
        self.messages: list[dict[str, Any]] = []
        self.closed = False

    @property
    def remote_address(self) -> str:
        return "test:1"

    @property
    def client_version(self) -> str:
        return "test"

    @property
    def protocol_version(self) -> int:
        return 21

    def send_command(self, cmd: pb.BaseCommand) -> None:
        self.commands.append(cmd)

    def send_message(
        self,
        *,
        consumer_id: int,
        message_id: MessageId,
        redelivery_count: int,
        headers_and_payload: bytes | memoryview,
        ack_set: Sequence[int] | None = None,
        consumer_epoch: int | None = None,
    ) -> None:
        self.messages.append({"consumer_id": consumer_id, "message_id": message_id})

    def is_writable(self) -> bool:
        return True

    async def wait_writable(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True
