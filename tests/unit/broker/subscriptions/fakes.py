"""In-memory stand-ins for the managed ledger and a client connection, enough to drive
subscriptions through their contracts without I/O (one ledger, entries in a list)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from magnetar.managed_ledger.api import (
    EARLIEST,
    LATEST,
    CursorStats,
    Entry,
    InitialPosition,
    InvalidPositionError,
    LedgerInfo,
    Position,
)
from magnetar.wire import batch, frames, pb
from magnetar.wire.ids import MessageId

LEDGER = 7


def entry_data(
    payload: bytes = b"x",
    *,
    key: str | None = None,
    batch_size: int | None = None,
    publish_time: int = 1000,
    deliver_at: int | None = None,
) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_time)
    if key is not None:
        md.partition_key = key
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    if batch_size is not None:
        md.num_messages_in_batch = batch_size
        payload = batch.build_batch(
            (pb.SingleMessageMetadata(), payload + str(i).encode()) for i in range(batch_size)
        )
    return frames.encode_headers_and_payload(md, payload)


class FakeCursor:
    def __init__(self, ml: FakeLedger, name: str, mark: int, *, durable: bool = True) -> None:
        self.ml = ml
        self._name = name
        self._durable = durable
        self.mark = mark  # entry id of the mark-delete position
        self.read = mark + 1
        self.deleted: set[int] = set()
        self.batch_acked: dict[int, set[int]] = {}
        self.batch_sizes: dict[int, int] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        return self._durable

    @property
    def mark_delete_position(self) -> Position:
        return Position(LEDGER, self.mark)

    @property
    def read_position(self) -> Position:
        return Position(LEDGER, self.read)

    async def read_entries(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        out = []
        while self.read < len(self.ml.entries) and len(out) < max_entries:
            if self.read not in self.deleted:
                out.append(Entry(Position(LEDGER, self.read), self.ml.entries[self.read]))
            self.read += 1
        return out

    async def read_entries_or_wait(self, max_entries: int, *, max_bytes: int = 0) -> list[Entry]:
        raise NotImplementedError

    async def replay(self, positions: Iterable[Position]) -> list[Entry]:
        return [
            Entry(p, self.ml.entries[p.entry_id])
            for p in positions
            if not self.is_deleted(p) and p.entry_id < len(self.ml.entries)
        ]

    def has_more_entries(self) -> bool:
        return any(i not in self.deleted for i in range(self.read, len(self.ml.entries)))

    def rewind(self) -> None:
        self.read = self.mark + 1

    def seek(self, position: Position) -> None:
        self.read = position.entry_id

    async def reset(self, position: Position) -> None:
        self.deleted.clear()
        self.batch_acked.clear()
        self.mark = position.entry_id - 1
        self.read = position.entry_id

    def _advance(self) -> None:
        while self.mark + 1 in self.deleted:
            self.mark += 1
            self.deleted.discard(self.mark)
        self.read = max(self.read, self.mark + 1)

    async def mark_delete(
        self, position: Position, *, properties: Mapping[str, int] | None = None
    ) -> None:
        if position.entry_id >= len(self.ml.entries):
            raise InvalidPositionError(str(position))
        self.mark = max(self.mark, position.entry_id)
        self.deleted = {d for d in self.deleted if d > self.mark}
        self._advance()

    async def delete(self, positions: Sequence[Position]) -> None:
        for p in positions:
            if p.entry_id > self.mark:
                self.deleted.add(p.entry_id)
        self._advance()

    async def delete_batch_indexes(
        self, position: Position, *, acked: Iterable[int], batch_size: int
    ) -> None:
        got = self.batch_acked.setdefault(position.entry_id, set())
        got.update(acked)
        self.batch_sizes[position.entry_id] = batch_size
        if len(got) >= batch_size:
            del self.batch_acked[position.entry_id]
            await self.delete([position])

    def batch_ack_set(self, position: Position) -> list[int] | None:
        got = self.batch_acked.get(position.entry_id)
        if not got:
            return None
        size = self.batch_sizes[position.entry_id]
        return batch.ack_set_from_unacked(i for i in range(size) if i not in got)

    def is_deleted(self, position: Position) -> bool:
        return position.entry_id <= self.mark or position.entry_id in self.deleted

    def backlog(self) -> int:
        return len(self.ml.entries) - 1 - self.mark - len(self.deleted)

    async def skip(self, n: int) -> None:
        raise NotImplementedError

    async def clear_backlog(self) -> None:
        raise NotImplementedError

    def stats(self) -> CursorStats:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class FakeLedger:
    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self._cursors: dict[str, FakeCursor] = {}
        self._added = asyncio.Event()
        self.terminated = False

    @property
    def name(self) -> str:
        return "public/default/persistent/t"

    @property
    def last_confirmed_entry(self) -> Position:
        return Position(LEDGER, len(self.entries) - 1)

    @property
    def first_position(self) -> Position:
        return Position(LEDGER, 0)

    @property
    def cursors(self) -> Mapping[str, FakeCursor]:
        return self._cursors

    def ledgers(self) -> list[LedgerInfo]:
        return [LedgerInfo(LEDGER, len(self.entries), 0, 0)]

    def next_position(self, position: Position) -> Position:
        return Position(LEDGER, position.entry_id + 1)

    def add(self, data: bytes) -> Position:
        self.entries.append(data)
        self._added.set()
        self._added = asyncio.Event()
        return self.last_confirmed_entry

    async def read_entry(self, position: Position) -> Entry:
        return Entry(position, self.entries[position.entry_id])

    async def open_cursor(
        self,
        name: str,
        *,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> FakeCursor:
        if name not in self._cursors:
            mark = -1 if initial_position is InitialPosition.EARLIEST else len(self.entries) - 1
            self._cursors[name] = FakeCursor(self, name, mark)
        return self._cursors[name]

    async def new_non_durable_cursor(
        self, name: str, start: Position, *, inclusive: bool = True
    ) -> FakeCursor:
        if start == EARLIEST:
            mark = -1
        elif start == LATEST:
            mark = len(self.entries) - 1
        else:
            mark = start.entry_id - 1
        self._cursors[name] = FakeCursor(self, name, mark, durable=False)
        return self._cursors[name]

    async def delete_cursor(self, name: str) -> None:
        self._cursors.pop(name, None)

    async def wait_for_entries(self, after: Position) -> None:
        if after.entry_id < len(self.entries) - 1:
            return
        await self._added.wait()


@dataclass
class Sent:
    consumer_id: int
    entry_id: int
    redelivery_count: int
    ack_set: list[int] | None
    data: bytes
    message_id: MessageId


@dataclass
class FakeCnx:
    writable: bool = True
    protocol: int = 20
    messages: list[Sent] = field(default_factory=list)
    commands: list[pb.BaseCommand] = field(default_factory=list)

    @property
    def remote_address(self) -> str:
        return "127.0.0.1:1"

    @property
    def client_version(self) -> str:
        return "fake"

    @property
    def protocol_version(self) -> int:
        return self.protocol

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
        self.messages.append(
            Sent(
                consumer_id,
                message_id.entry_id,
                redelivery_count,
                list(ack_set) if ack_set else None,
                bytes(headers_and_payload),
                message_id,
            )
        )

    def is_writable(self) -> bool:
        return self.writable

    async def wait_writable(self) -> None:
        while not self.writable:
            await asyncio.sleep(0.001)

    def close(self) -> None:
        pass

    def received(self, consumer_id: int) -> list[int]:
        return [m.entry_id for m in self.messages if m.consumer_id == consumer_id]

    def active_events(self) -> list[tuple[int, bool]]:
        return [
            (c.active_consumer_change.consumer_id, c.active_consumer_change.is_active)
            for c in self.commands
            if c.type == pb.BaseCommand.ACTIVE_CONSUMER_CHANGE
        ]


def subscribe_cmd(
    consumer_id: int,
    *,
    sub: str = "s",
    sub_type: Any = pb.CommandSubscribe.Exclusive,
    name: str | None = None,
    priority: int = 0,
    earliest: bool = True,
    durable: bool = True,
    start: MessageId | None = None,
    sticky: Sequence[tuple[int, int]] = (),
) -> pb.CommandSubscribe:
    cmd = pb.CommandSubscribe(
        topic="persistent://public/default/t",
        subscription=sub,
        subType=sub_type,
        consumer_id=consumer_id,
        request_id=consumer_id,
        consumer_name=name or f"c{consumer_id}",
        priority_level=priority,
        durable=durable,
        initialPosition=pb.CommandSubscribe.Earliest if earliest else pb.CommandSubscribe.Latest,
    )
    if start is not None:
        start.fill(cmd.start_message_id)
    if sticky:
        cmd.keySharedMeta.keySharedMode = pb.STICKY
        for s, e in sticky:
            cmd.keySharedMeta.hashRanges.add(start=s, end=e)
    return cmd


def ack_cmd(
    consumer_id: int,
    *entry_ids: int,
    cumulative: bool = False,
    ack_set: Sequence[int] | None = None,
    batch_size: int | None = None,
) -> pb.CommandAck:
    cmd = pb.CommandAck(
        consumer_id=consumer_id,
        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
    )
    for e in entry_ids:
        mid = MessageId(LEDGER, e).fill(cmd.message_id.add())
        if ack_set is not None:
            mid.ack_set.extend(ack_set)
        if batch_size is not None:
            mid.batch_size = batch_size
    return cmd


def ids(*entry_ids: int) -> list[pb.MessageIdData]:
    return [MessageId(LEDGER, e).to_proto() for e in entry_ids]


async def settle(rounds: int = 20) -> None:
    """Let dispatch tasks run until they go idle."""
    for _ in range(rounds):
        await asyncio.sleep(0)
