"""The transaction coordinator and the transaction buffer over the in-memory managed
ledger: states, the log replayed on load (ids never handed out twice, even after the log
was trimmed), participants told of each decision once it is logged, timeouts; the buffer's
max read position, markers and recovery from its snapshot cursor plus the entries after."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions.entries import read_meta
from magnetar.broker.transactions.buffer import CURSOR, TransactionBuffer
from magnetar.broker.transactions.coordinator import LOG_CURSOR, TransactionCoordinator
from magnetar.broker.transactions.ids import TxnId
from magnetar.managed_ledger.api import ManagedLedger
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.wire import frames, pb


class Recorder:
    """Participants that record the decisions (and can fail on demand)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, TxnId, bool]] = []
        self.fail = False

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None:
        if self.fail:
            raise BrokerError(pb.ServiceNotReady, "participant unavailable")
        self.calls.append(("partition", topic, txn, commit))

    async def end_on_subscription(
        self, topic: str, subscription: str, txn: TxnId, commit: bool
    ) -> None:
        self.calls.append(("subscription", f"{topic}/{subscription}", txn, commit))


async def coordinator(
    factory: MemoryManagedLedgerFactory, participants: Recorder
) -> TransactionCoordinator:
    ml = await factory.open("pulsar/system/persistent/__transaction_log_0")
    tc = TransactionCoordinator(0, ml, participants)
    await tc.load()
    return tc


async def test_states_log_trim_and_ids_after_reload() -> None:
    factory = MemoryManagedLedgerFactory()
    rec = Recorder()
    tc = await coordinator(factory, rec)
    a, b, c = [await tc.new_txn(60_000) for _ in range(3)]
    assert [t.least for t in (a, b, c)] == [0, 1, 2] and a.most == 0
    await tc.add_partitions(a, ["t1", "t2", "t1"])
    await tc.add_subscriptions(a, [("t1", "s")])
    await tc.end(a, commit=True)
    assert rec.calls == [
        ("partition", "t1", a, True),
        ("partition", "t2", a, True),
        ("subscription", "t1/s", a, True),
    ]
    with pytest.raises(BrokerError) as err:
        await tc.end(a, commit=True)
    assert err.value.code == pb.TransactionNotFound
    await tc.end(b, commit=False)
    await tc.end(c, commit=False)
    # every transaction ended: the log cursor passed all of it, with the id sequence
    cursor = tc.ml.cursors[LOG_CURSOR]
    assert cursor.mark_delete_position == tc.ml.last_confirmed_entry
    assert cursor.properties["sequence"] == 2
    await tc.ml.close()

    again = await coordinator(factory, rec)
    assert (await again.new_txn(1000)).least == 3  # never an id twice


async def test_reload_finishes_committing_and_keeps_open_deadlines() -> None:
    factory = MemoryManagedLedgerFactory()
    rec = Recorder()
    tc = await coordinator(factory, rec)
    open_txn = await tc.new_txn(60_000)
    stuck = await tc.new_txn(60_000)
    await tc.add_partitions(stuck, ["t1"])
    rec.fail = True  # the participant is down: the commit stays COMMITTING
    with pytest.raises(BrokerError):
        await tc.end(stuck, commit=True)
    await tc.ml.close()

    rec.fail = False
    again = await coordinator(factory, rec)  # load() restarts the commit
    for _ in range(50):
        if rec.calls:
            break
        await asyncio.sleep(0.01)
    assert rec.calls == [("partition", "t1", stuck, True)]
    assert again.get(open_txn).status.value == "OPEN"
    with pytest.raises(BrokerError) as err:
        again.get(stuck)
    assert err.value.code == pb.TransactionNotFound
    with pytest.raises(BrokerError) as err:
        again.check_open(TxnId(0, 99))
    assert err.value.code == pb.TransactionNotFound


async def test_timeout_aborts_and_a_wrong_end_is_invalid_status() -> None:
    factory = MemoryManagedLedgerFactory()
    rec = Recorder()
    tc = await coordinator(factory, rec)
    txn = await tc.new_txn(1)
    await tc.add_partitions(txn, ["t"])
    await asyncio.sleep(0.01)
    rec.fail = True
    await tc.expire()  # ABORTING now, the participant failed
    with pytest.raises(BrokerError) as err:
        await tc.end(txn, commit=True)
    assert err.value.code == pb.InvalidTxnStatus
    rec.fail = False
    await tc.expire()  # retried
    for _ in range(50):
        if rec.calls:
            break
        await asyncio.sleep(0.01)
    assert rec.calls == [("partition", "t", txn, False)]


def _entry(txn: TxnId | None, text: str) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if txn is not None:
        meta.txnid_most_bits, meta.txnid_least_bits = txn
    return frames.encode_headers_and_payload(meta, text.encode())


async def _visible(ml: ManagedLedger, buffer: TransactionBuffer) -> list[str]:
    """What dispatch would deliver: up to the max read position, minus hidden entries."""
    limit = buffer.max_read_position or ml.last_confirmed_entry
    out = []
    for e in await ml.read_entries(ml.first_position, max_entries=1000):
        meta = read_meta(e.data)
        if e.position <= limit and not buffer.hides(meta):
            out.append(bytes(e.data).rsplit(b"\x00", 1)[-1].decode()[-2:])
    return out


async def test_buffer_holds_commits_hides_aborts_and_recovers() -> None:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t/ns/persistent/buf")
    changes: list[int] = []
    buffer = TransactionBuffer(
        ml, "t", on_change=lambda: changes.append(1), validate=lambda txn, topic: True
    )
    t1, t2, t3 = TxnId(0, 1), TxnId(0, 2), TxnId(0, 3)
    with pytest.raises(BrokerError):
        buffer.append(t1, _entry(t1, "x1"))  # not prepared (never added to a transaction)
    await buffer.prepare()
    await ml.add_entry(_entry(None, "p0"))
    await buffer.append(t1, _entry(t1, "a1"))
    await buffer.append(t2, _entry(t2, "b2"))
    await ml.add_entry(_entry(None, "p1"))
    await buffer.append(t3, _entry(t3, "c3"))
    assert await _visible(ml, buffer) == ["p0"]
    await buffer.end(t2, commit=False)
    assert await _visible(ml, buffer) == ["p0"]  # t1 still holds
    await buffer.end(t1, commit=True)
    assert await _visible(ml, buffer) == ["p0", "a1", "p1"]
    with pytest.raises(BrokerError) as err:
        buffer.append(t1, _entry(t1, "late"))
    assert err.value.code == pb.TransactionConflict
    await ml.close()

    ml = await factory.open("t/ns/persistent/buf")
    assert CURSOR in ml.cursors
    recovered = TransactionBuffer(ml, "t", on_change=lambda: None)
    await recovered.recover()
    assert recovered.ongoing() == [t3] and recovered.is_aborted(t2)
    assert await _visible(ml, recovered) == ["p0", "a1", "p1"]
    await recovered.end(t3, commit=True)
    assert await _visible(ml, recovered) == ["p0", "a1", "p1", "c3"]
    assert changes  # the topic was told (its subscriptions wake)


async def test_buffer_of_a_remote_coordinators_transaction_prepares_itself() -> None:
    """A coordinator of another broker cannot prepare this buffer: the first SEND is taken,
    held at once, and the snapshot cursor opens below it so a restart replays it."""
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t/ns/persistent/remote")
    buffer = TransactionBuffer(ml, "t", on_change=lambda: None, validate=lambda t, n: False)
    await ml.add_entry(_entry(None, "p0"))
    txn = TxnId(1, 7)
    future = buffer.append(txn, _entry(txn, "r1"))
    assert buffer.active and await _visible(ml, buffer) == ["p0"]
    await future
    for _ in range(100):
        if CURSOR in ml.cursors:
            break
        await asyncio.sleep(0.01)
    await ml.add_entry(_entry(None, "p2"))
    await ml.close()

    ml = await factory.open("t/ns/persistent/remote")
    recovered = TransactionBuffer(ml, "t", on_change=lambda: None)
    await recovered.recover()
    assert recovered.ongoing() == [txn]
    assert await _visible(ml, recovered) == ["p0"]
    await recovered.end(txn, commit=False)
    assert await _visible(ml, recovered) == ["p0", "p2"]
