"""Driving subscriptions without I/O: the in-memory managed ledger (entries in one ledger)
and a recording client connection."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.contracts import BROKER_REQUEST_ID, PRODUCER_CLOSE_REQUEST_ID
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.memory import MemoryManagedLedger
from magnetar.wire import batch, commands, frames, pb
from magnetar.wire.ids import MessageId

LEDGER = 1
"""The first ledger of a new in-memory managed ledger: the tests' entries are all in it."""


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


class Ledger(MemoryManagedLedger):
    """The in-memory managed ledger, with a synchronous add for tests (in-memory adds are
    complete when ``append`` returns)."""

    def __init__(self) -> None:
        super().__init__("public/default/persistent/t")

    def add(self, data: bytes) -> Position:
        return self.append(data).result()


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
    drained: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

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

    def send_receipt(
        self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
    ) -> None:
        self.commands.append(
            commands.send_receipt(
                producer_id=producer_id,
                sequence_id=sequence_id,
                message_id=MessageId(ledger_id, entry_id),
                highest_sequence_id=highest,
            )
        )

    def close_producer(self, producer_id: int) -> None:
        self.commands.append(
            commands.close_producer(producer_id=producer_id, request_id=PRODUCER_CLOSE_REQUEST_ID)
        )

    def close_consumer(self, consumer_id: int) -> None:
        self.commands.append(
            commands.close_consumer(consumer_id=consumer_id, request_id=BROKER_REQUEST_ID)
        )

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

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "writable" and value and "drained" in self.__dict__:
            self.drained.set()  # a test made the connection writable: wake wait_writable

    async def wait_writable(self) -> None:
        while not self.writable:
            self.drained.clear()
            await self.drained.wait()

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
    """Let dispatch tasks run until they go idle: ``rounds`` turns of the event loop, no
    time. Every fake here answers within a turn (no I/O, no timer), so the dispatch a test
    started has run when this returns; a check that something is *not* sent stands on the
    same turns."""
    for _ in range(rounds):
        await asyncio.sleep(0)  # a loop turn, not a timed wait (see the docstring)
