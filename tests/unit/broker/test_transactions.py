"""Transactions in-process: a real BrokerService (embedded metadata store, in-memory managed
ledgers) and ServerConnections over a recording transport, driven with the commands the
official clients send: TC_CLIENT_CONNECT, NEW_TXN, ADD_PARTITION_TO_TXN, transactional SEND
and ACK, END_TXN -- commit and abort visibility across two topics, consume-transform-produce,
recovery after the broker is rebuilt over the same storage, timeouts and bad input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.transactions import coordinator as coordinator_mod
from magnetar.broker.transactions.ids import TxnId
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.metadata import api as md
from magnetar.metadata import open_store
from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import MessageId
from magnetar.wire.topics import TopicName
from tests.support.inprocess import Client
from tests.support.wait import eventually

_C = pb.BaseCommand
T1 = "persistent://public/default/txn-a"
T2 = "persistent://public/default/txn-b"
CONFIG = BrokerConfig(
    bind_address="127.0.0.1",
    port=1,
    http_port=2,
    session_ttl_s=5.0,
    transaction_coordinator_enabled=True,
)


class Broker:
    """A service over storage that outlives it (a restart rebuilds the service only)."""

    def __init__(self, tmp_path: Path, config: BrokerConfig = CONFIG) -> None:
        self.path = tmp_path
        self.config = config
        self.factory = MemoryManagedLedgerFactory()
        self.store: md.MetadataStore | None = None
        self.service: BrokerService | None = None

    async def start(self) -> BrokerService:
        self.store = await open_store(f"embedded://{self.path / 'metadata'}")
        self.service = BrokerService(
            config=self.config, store=self.store, managed_ledgers=self.factory
        )
        await self.service.start()
        return self.service

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.close()
        if self.store is not None:
            await self.store.close()
        self.service = self.store = None


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(tmp_path)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


class TxnClient(Client):
    async def tc_connect(self, tc_id: int = 0) -> frames.Frame:
        cmd = pb.BaseCommand(type=_C.TC_CLIENT_CONNECT_REQUEST)
        cmd.tcClientConnectRequest.request_id = rid = self.rid()
        cmd.tcClientConnectRequest.tc_id = tc_id
        self.send(cmd)
        return await self.expect(_C.TC_CLIENT_CONNECT_RESPONSE, request_id=rid)

    async def new_txn(self, timeout_ms: int = 60_000) -> TxnId:
        cmd = pb.BaseCommand(type=_C.NEW_TXN)
        cmd.newTxn.request_id = rid = self.rid()
        cmd.newTxn.txn_ttl_seconds = timeout_ms
        cmd.newTxn.tc_id = 0
        self.send(cmd)
        r = (await self.expect(_C.NEW_TXN_RESPONSE, request_id=rid)).command.newTxnResponse
        assert not r.HasField("error"), r.message
        return TxnId(r.txnid_most_bits, r.txnid_least_bits)

    async def add_partition(self, txn: TxnId, *topics: str) -> Any:
        cmd = pb.BaseCommand(type=_C.ADD_PARTITION_TO_TXN)
        r = cmd.addPartitionToTxn
        r.request_id = rid = self.rid()
        r.txnid_most_bits, r.txnid_least_bits = txn
        r.partitions.extend(topics)
        self.send(cmd)
        f = await self.expect(_C.ADD_PARTITION_TO_TXN_RESPONSE, request_id=rid)
        return f.command.addPartitionToTxnResponse

    async def add_subscription(self, txn: TxnId, topic: str, sub: str) -> Any:
        cmd = pb.BaseCommand(type=_C.ADD_SUBSCRIPTION_TO_TXN)
        r = cmd.addSubscriptionToTxn
        r.request_id = rid = self.rid()
        r.txnid_most_bits, r.txnid_least_bits = txn
        r.subscription.add(topic=topic, subscription=sub)
        self.send(cmd)
        f = await self.expect(_C.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, request_id=rid)
        return f.command.addSubscriptionToTxnResponse

    async def end(self, txn: TxnId, commit: bool) -> Any:
        cmd = pb.BaseCommand(type=_C.END_TXN)
        r = cmd.endTxn
        r.request_id = rid = self.rid()
        r.txnid_most_bits, r.txnid_least_bits = txn
        r.txn_action = pb.COMMIT if commit else pb.ABORT
        self.send(cmd)
        return (await self.expect(_C.END_TXN_RESPONSE, request_id=rid)).command.endTxnResponse

    async def txn_publish(self, producer_id: int, seq: int, text: str, txn: TxnId) -> Any:
        meta = pb.MessageMetadata(
            producer_name="p",
            sequence_id=seq,
            publish_time=1000 + seq,
            txnid_most_bits=txn.most,
            txnid_least_bits=txn.least,
        )
        send = commands.send(producer_id=producer_id, sequence_id=seq)
        send.send.txnid_most_bits, send.send.txnid_least_bits = txn
        self.send(send, frames.encode_headers_and_payload(meta, text.encode()))
        return await self.expect((_C.SEND_RECEIPT, _C.SEND_ERROR), sequence_id=seq)

    async def sub_on(self, topic: str, consumer_id: int, sub: str) -> None:
        await self.subscribe(consumer_id, sub, topic=topic, sub_type=pb.CommandSubscribe.Shared)
        self.send(commands.flow(consumer_id=consumer_id, permits=1000))

    def received(self, consumer_id: int) -> list[tuple[MessageId, bytes]]:
        self._pump()
        out = []
        for f in [f for f in self.frames if f.type == _C.MESSAGE]:
            if f.command.message.consumer_id == consumer_id:
                self.frames.remove(f)
                mid = f.command.message.message_id
                assert f.payload is not None
                out.append((MessageId(mid.ledgerId, mid.entryId), bytes(f.payload)))
        return out


async def collect(c: TxnClient, consumer_id: int, n: int) -> list[bytes]:
    got: list[tuple[MessageId, bytes]] = []

    def enough() -> bool:
        got.extend(c.received(consumer_id))
        return len(got) >= n

    await eventually(enough, timeout=5, what=f"{n} messages on consumer {consumer_id}")
    return [p.split(b"\x00")[-1] for _, p in got]


def text_of(payload: bytes) -> str:
    return payload.decode(errors="replace")


async def settled(c: TxnClient) -> None:
    """Let dispatch run a few loop turns (for asserting that nothing arrives)."""
    for _ in range(20):
        await asyncio.sleep(0.01)  # not a wait: the window of a negative check
    c._pump()


async def connected(service: BrokerService) -> TxnClient:
    c = TxnClient(service)
    await c.connect()
    r = (await c.tc_connect()).command.tcClientConnectResponse
    assert not r.HasField("error"), r.message
    return c


async def test_commit_and_abort_across_two_topics(broker: Broker) -> None:
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    await c.producer(2, T2)
    await c.sub_on(T1, 10, "s")
    await c.sub_on(T2, 11, "s")

    committed = await c.new_txn()
    aborted = await c.new_txn()
    for txn in (committed, aborted):
        assert not (await c.add_partition(txn, T1, T2)).HasField("error")
    await c.publish(1, 0, "plain-before")
    for i, txn in enumerate((committed, aborted)):
        tag = "commit" if txn is committed else "abort"
        for p, topic in ((1, T1), (2, T2)):
            f = await c.txn_publish(p, 10 + i, f"{tag}-{topic[-1]}", txn)
            assert f.type == _C.SEND_RECEIPT
    await c.publish(1, 20, "plain-after")

    # only what precedes the open transactions is delivered
    first = await collect(c, 10, 1)
    assert [text_of(p).endswith("plain-before") for p in first] == [True]
    await settled(c)
    assert c.received(10) == [] and c.received(11) == []

    assert not (await c.end(aborted, commit=False)).HasField("error")
    await settled(c)
    assert c.received(10) == [] and c.received(11) == []  # the committed one still holds
    assert not (await c.end(committed, commit=True)).HasField("error")
    got1 = [text_of(p) for p in await collect(c, 10, 2)]
    got2 = [text_of(p) for p in await collect(c, 11, 1)]
    assert [g.rsplit("\x00", 1)[-1][-8:] for g in got1] and any("commit-a" in g for g in got1)
    assert any("plain-after" in g for g in got1)
    assert len(got2) == 1 and "commit-b" in got2[0]
    await settled(c)
    assert c.received(10) == [] and c.received(11) == []  # never the aborted ones


async def test_transactional_acks_commit_and_abort(broker: Broker) -> None:
    """Consume-transform-produce: the input's ack and the output's message in one
    transaction; abort redelivers the input and never shows the output."""
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    await c.producer(2, T2)
    ids = [await c.publish(1, i, f"in{i}") for i in range(2)]
    await c.sub_on(T1, 10, "work")
    await c.sub_on(T2, 11, "out")
    await collect(c, 10, 2)

    async def process(mid: MessageId, seq: int, commit: bool) -> None:
        txn = await c.new_txn()
        await c.add_partition(txn, T2)
        await c.add_subscription(txn, T1, "work")
        assert (await c.txn_publish(2, seq, f"out{seq}", txn)).type == _C.SEND_RECEIPT
        ack = commands.ack(consumer_id=10, message_ids=[mid], request_id=c.rid())
        ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
        c.send(ack)
        r = await c.expect(_C.ACK_RESPONSE, request_id=ack.ack.request_id)
        assert not r.command.ackResponse.HasField("error")
        assert not (await c.end(txn, commit)).HasField("error")

    subs = broker.service.topics[T1].subscriptions
    await process(ids[0], 100, commit=True)
    await eventually(lambda: subs.stats()["work"]["msgBacklog"] == 1, what="ack applied")
    out = await collect(c, 11, 1)
    assert "out100" in text_of(out[0])

    await process(ids[1], 101, commit=False)
    again = await collect(c, 10, 1)  # the aborted ack: redelivered
    assert "in1" in text_of(again[0])
    assert subs.stats()["work"]["msgBacklog"] == 1
    await settled(c)
    assert c.received(11) == []


async def test_last_message_id_stops_before_open_transactions_and_markers(
    broker: Broker,
) -> None:
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    plain = await c.publish(1, 0, "plain")
    txn = await c.new_txn()
    await c.add_partition(txn, T1)
    await c.txn_publish(1, 1, "held", txn)
    await c.sub_on(T1, 10, "s")

    async def last_id() -> tuple[int, int]:
        cmd = pb.BaseCommand(type=_C.GET_LAST_MESSAGE_ID)
        cmd.getLastMessageId.consumer_id = 10
        cmd.getLastMessageId.request_id = rid = c.rid()
        c.send(cmd)
        f = await c.expect(_C.GET_LAST_MESSAGE_ID_RESPONSE, request_id=rid)
        mid = f.command.getLastMessageIdResponse.last_message_id
        return mid.ledgerId, mid.entryId

    assert await last_id() == (plain.ledger_id, plain.entry_id)  # the open one is held
    await c.end(txn, commit=False)
    assert await last_id() == (plain.ledger_id, plain.entry_id)  # aborted entry, marker
    other = await c.new_txn()
    await c.add_partition(other, T1)
    f = await c.txn_publish(1, 2, "kept", other)
    await c.end(other, commit=True)
    kept = f.command.send_receipt.message_id
    assert await last_id() == (kept.ledgerId, kept.entryId)  # not its commit marker


async def test_transactional_cumulative_ack(broker: Broker) -> None:
    """Exclusive subscription: a cumulative ACK in a transaction moves the mark-delete
    position only when the transaction commits."""
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    ids = [await c.publish(1, i, f"m{i}") for i in range(3)]
    await c.subscribe(10, "ex", topic=T1)
    c.send(commands.flow(consumer_id=10, permits=10))
    await collect(c, 10, 3)
    subs = broker.service.topics[T1].subscriptions
    for commit in (False, True):
        txn = await c.new_txn()
        await c.add_subscription(txn, T1, "ex")
        ack = commands.ack(
            consumer_id=10, message_ids=[ids[1]], cumulative=True, request_id=c.rid()
        )
        ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
        c.send(ack)
        await c.expect(_C.ACK_RESPONSE, request_id=ack.ack.request_id)
        assert subs.stats()["ex"]["msgBacklog"] == 3  # held
        assert not (await c.end(txn, commit)).HasField("error")
    await eventually(lambda: subs.stats()["ex"]["msgBacklog"] == 1, what="cumulative ack applied")


async def test_held_message_is_not_redelivered_until_the_abort(broker: Broker) -> None:
    """A message a transaction acknowledged stays with that transaction when its consumer
    goes: another consumer gets it only after the abort (never after a commit)."""
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    ids = [await c.publish(1, i, f"h{i}") for i in range(2)]
    await c.sub_on(T1, 10, "s")
    await collect(c, 10, 2)
    txns = []
    for mid in ids:
        txn = await c.new_txn()
        ack = commands.ack(consumer_id=10, message_ids=[mid], request_id=c.rid())
        ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
        c.send(ack)
        await c.expect(_C.ACK_RESPONSE, request_id=ack.ack.request_id)
        txns.append(txn)
    c.cnx.protocol.connection_lost(None)  # the consumer goes; its messages stay held
    d = await connected(broker.service)
    await d.sub_on(T1, 20, "s")
    await settled(d)
    assert d.received(20) == []
    assert not (await d.end(txns[0], commit=True)).HasField("error")
    assert not (await d.end(txns[1], commit=False)).HasField("error")
    got = await collect(d, 20, 1)
    assert "h1" in text_of(got[0])
    await settled(d)
    assert d.received(20) == []  # never the committed one


async def test_conflicting_transactional_acks(broker: Broker) -> None:
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    mid = await c.publish(1, 0, "x")
    await c.sub_on(T1, 10, "s")
    await collect(c, 10, 1)
    codes = []
    for _ in range(2):
        txn = await c.new_txn()
        ack = commands.ack(consumer_id=10, message_ids=[mid], request_id=c.rid())
        ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
        c.send(ack)
        r = (await c.expect(_C.ACK_RESPONSE, request_id=ack.ack.request_id)).command
        codes.append(r.ackResponse.error if r.ackResponse.HasField("error") else None)
    assert codes == [None, pb.TransactionConflict]


async def test_restart_recovers_open_and_committing_transactions(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    service = await b.start()
    try:
        c = await connected(service)
        await c.producer(1, T1)
        open_txn = await c.new_txn()
        await c.add_partition(open_txn, T1)
        await c.txn_publish(1, 1, "open-1", open_txn)
        committing = await c.new_txn()
        await c.add_partition(committing, T1)
        await c.txn_publish(1, 2, "committing-2", committing)
        # the coordinator logs COMMITTING, then the broker stops before any marker
        coordinator = service.transactions.coordinator_of(committing)
        await coordinator._log(committing, "status", s="COMMITTING")
    finally:
        await b.stop()

    service = await b.start()
    c = await connected(service)  # loads the coordinator: it finishes the commit
    await c.sub_on(T1, 10, "s")
    coordinator = service.transactions.coordinator_of(open_txn)
    await eventually(lambda: coordinator.stats()["ongoingTxnSize"] == 1, what="the commit finished")
    await settled(c)
    assert c.received(10) == []  # the open one, first in the topic, still holds both
    assert not (await c.end(open_txn, commit=False)).HasField("error")
    got = await collect(c, 10, 1)
    assert "committing-2" in text_of(got[0])
    await settled(c)
    assert c.received(10) == []  # never the aborted one
    assert coordinator.stats()["ongoingTxnSize"] == 0
    await b.stop()


async def test_timeout_aborts(broker: Broker) -> None:
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    txn = await c.new_txn(timeout_ms=200)
    await c.add_partition(txn, T1)
    await c.txn_publish(1, 1, "late", txn)
    await c.publish(1, 2, "plain")
    await c.sub_on(T1, 10, "s")
    got = await collect(c, 10, 1)  # held until the timeout aborts the transaction
    assert "plain" in text_of(got[0])
    r = await c.end(txn, commit=True)
    assert r.error == pb.TransactionNotFound


async def test_bad_input(broker: Broker) -> None:
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)
    unknown = TxnId(0, 999)
    assert (await c.end(unknown, commit=True)).error == pb.TransactionNotFound
    assert (await c.add_partition(unknown, T1)).error == pb.TransactionNotFound
    txn = await c.new_txn()
    assert not (await c.end(txn, commit=True)).HasField("error")
    assert (await c.end(txn, commit=True)).error == pb.TransactionNotFound
    other = await c.new_txn()
    await c.add_partition(other, T1)
    await c.end(other, commit=False)
    # a SEND of an ended transaction, and of one the topic was not added to
    assert (await c.txn_publish(1, 1, "x", other)).type == _C.SEND_ERROR
    third = await c.new_txn()
    f = await c.txn_publish(1, 2, "y", third)
    assert f.type == _C.SEND_ERROR and f.command.send_error.error == pb.NotAllowedError
    r = (await c.tc_connect(5)).command.tcClientConnectResponse
    assert r.error == pb.TransactionCoordinatorNotFound
    # nothing else broke: plain publishing and consuming work
    await c.publish(1, 3, "fine")
    await c.sub_on(T1, 10, "s")
    assert "fine" in text_of((await collect(c, 10, 1))[0])


async def test_disabled_refuses_with_not_allowed(tmp_path: Path) -> None:
    b = Broker(tmp_path, replace(CONFIG, transaction_coordinator_enabled=False))
    service = await b.start()
    try:
        c = TxnClient(service)
        await c.connect()
        cmd = pb.BaseCommand(type=_C.NEW_TXN)
        cmd.newTxn.request_id = 5
        c.send(cmd)
        err = (await c.expect(_C.ERROR, request_id=5)).command.error
        assert err.error == pb.NotAllowedError
        assert err.message == "Transactions are not enabled."
        await c.producer(1, T1)
        f = await c.txn_publish(1, 1, "x", TxnId(0, 0))
        assert f.type == _C.SEND_ERROR and f.command.send_error.error == pb.NotAllowedError
        await c.publish(1, 2, "still fine")
    finally:
        await b.stop()


def test_default_timeout_constant() -> None:
    assert coordinator_mod.DEFAULT_TIMEOUT_MS == 60_000


async def test_unloaded_coordinator_is_loaded_again_from_its_log(broker: Broker) -> None:
    """A broker losing its session closes its coordinators; the next TC_CLIENT_CONNECT
    loads the coordinator from its log with its open transactions."""
    assert broker.service is not None
    c = await connected(broker.service)
    txn = await c.new_txn()
    await broker.service.transactions.unload_coordinators()
    cmd = pb.BaseCommand(type=_C.NEW_TXN)
    cmd.newTxn.request_id = rid = c.rid()
    c.send(cmd)
    r = (await c.expect(_C.NEW_TXN_RESPONSE, request_id=rid)).command.newTxnResponse
    assert r.error == pb.TransactionCoordinatorNotFound
    await c.tc_connect()
    assert not (await c.end(txn, commit=True)).HasField("error")
    assert (await c.new_txn()).least == txn.least + 1


async def test_compaction_keeps_committed_and_skips_aborted_messages(broker: Broker) -> None:
    """Compacting a topic with transactions (as Pulsar): an aborted transaction's keyed
    messages never replace a key's value nor add a key; a committed one's count like any."""
    assert broker.service is not None
    c = await connected(broker.service)
    await c.producer(1, T1)

    async def keyed(seq: int, key: str, text: str, txn: TxnId | None = None) -> None:
        meta = pb.MessageMetadata(
            producer_name="p", sequence_id=seq, publish_time=1000 + seq, partition_key=key
        )
        send = commands.send(producer_id=1, sequence_id=seq)
        if txn is not None:
            meta.txnid_most_bits, meta.txnid_least_bits = txn
            send.send.txnid_most_bits, send.send.txnid_least_bits = txn
        c.send(send, frames.encode_headers_and_payload(meta, text.encode()))
        assert (await c.expect((_C.SEND_RECEIPT, _C.SEND_ERROR), sequence_id=seq)).type == (
            _C.SEND_RECEIPT
        )

    committed, aborted = await c.new_txn(), await c.new_txn()
    for txn in (committed, aborted):
        assert not (await c.add_partition(txn, T1)).HasField("error")
    await keyed(1, "a", "a-plain")
    await keyed(2, "b", "b-committed", committed)
    await keyed(3, "a", "a-aborted", aborted)
    await keyed(4, "c", "c-aborted", aborted)
    assert not (await c.end(aborted, commit=False)).HasField("error")
    assert not (await c.end(committed, commit=True)).HasField("error")

    loaded = await broker.service.get_topic(TopicName.parse(T1), create=False)
    assert isinstance(loaded, PersistentTopic) and loaded.compaction is not None
    await eventually(
        lambda: not loaded.txn_buffer or not loaded.txn_buffer.ongoing(), what="both ended"
    )
    result = await loaded.compaction.compact()
    assert result.keys == 2, result

    cmd = commands.subscribe(
        topic=T1, subscription="compacted", consumer_id=20, request_id=c.rid(),
        initial_position=pb.CommandSubscribe.Earliest,
    )  # fmt: skip
    cmd.subscribe.read_compacted = True
    c.send(cmd)
    await c.expect(_C.SUCCESS)
    c.send(commands.flow(consumer_id=20, permits=100))
    got = [text_of(p) for p in await collect(c, 20, 2)]
    assert len(got) == 2, got
    assert any(g.endswith("a-plain") for g in got) and any(g.endswith("b-committed") for g in got)
    await settled(c)
    assert c.received(20) == []  # no aborted value, no marker
