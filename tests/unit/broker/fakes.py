"""Test doubles for the broker's seams: an in-memory managed ledger (no cursors) and a
recording ServerCnx. Only what the broker core's tests need; not a managed ledger."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from magnetar.managed_ledger.api import (
    Entry,
    ManagedLedgerConfig,
    ManagedLedgerTerminatedError,
    Position,
    StorageUnavailableError,
)
from magnetar.wire import pb
from magnetar.wire.ids import MessageId


class MemoryLedger:
    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: list[bytes] = []
        self.ledger_id = 1
        self.terminated = False
        self.closed = False
        self.fail_next = 0
        self.delay = 0.0
        self.cursors: Mapping[str, Any] = {}
        self.entries_added = 0

    @property
    def last_confirmed_entry(self) -> Position:
        return Position(self.ledger_id, len(self.entries) - 1)

    @property
    def first_position(self) -> Position:
        return Position(self.ledger_id, 0)

    @property
    def number_of_entries(self) -> int:
        return len(self.entries)

    @property
    def total_size(self) -> int:
        return sum(len(e) for e in self.entries)

    def append(self, data: bytes) -> asyncio.Future[Position]:
        return asyncio.ensure_future(self.add_entry(data))

    async def add_entry(self, data: bytes) -> Position:
        if self.terminated:
            raise ManagedLedgerTerminatedError(self.name)
        if self.fail_next:
            self.fail_next -= 1
            raise StorageUnavailableError("injected")
        assert type(data) is bytes
        self.entries.append(data)
        pos = Position(self.ledger_id, len(self.entries) - 1)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.entries_added += 1
        return pos

    async def read_entries(
        self, start: Position, *, max_entries: int, max_bytes: int = 0
    ) -> list[Entry]:
        return [Entry(Position(self.ledger_id, i), e) for i, e in enumerate(self.entries)][
            start.entry_id : start.entry_id + max_entries
        ]

    async def terminate(self) -> Position:
        self.terminated = True
        return self.last_confirmed_entry

    async def close(self) -> None:
        self.closed = True

    def ledgers(self) -> list[Any]:
        return []


class MemoryLedgerFactory:
    def __init__(self) -> None:
        self.ledgers: dict[str, MemoryLedger] = {}

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> MemoryLedger:
        ml = self.ledgers.get(name)
        if ml is None or ml.closed:
            old = ml
            ml = MemoryLedger(name)
            if old is not None:
                ml.entries = old.entries
                ml.terminated = old.terminated
            self.ledgers[name] = ml
        return ml

    async def exists(self, name: str) -> bool:
        return name in self.ledgers

    async def delete(self, name: str) -> None:
        self.ledgers.pop(name, None)

    async def list(self, prefix: str) -> list[str]:
        return sorted(n for n in self.ledgers if n.startswith(prefix + "/"))

    async def close(self) -> None:
        pass


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
