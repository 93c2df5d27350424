"""The compactor and the compacted cursor over the in-memory managed ledger: latest value per
key, tombstones, keyless messages, batches looked into per message, incremental compaction
from the previous horizon, the cursor switch and old-ledger deletion, reads through the
compacted view then the tail, rewind and seek, the last message id, the threshold."""

from __future__ import annotations

import pytest

from magnetar.broker.compaction import format as fmt
from magnetar.broker.compaction.compactor import compact
from magnetar.broker.compaction.cursor import CompactedCursor
from magnetar.broker.compaction.service import AlreadyRunningError, Status, TopicCompaction
from magnetar.broker.compaction.view import CURSOR, LEDGER_PROPERTY, CompactedTopic
from magnetar.broker.contracts import BrokerError
from magnetar.broker.subscriptions import TopicSubscriptionsImpl
from magnetar.managed_ledger.api import (
    EARLIEST,
    ManagedLedgerConfig,
    Position,
    StorageUnavailableError,
)
from magnetar.managed_ledger.memory import MemoryManagedLedger, MemoryManagedLedgerFactory
from magnetar.wire import batch, frames, pb
from magnetar.wire.topics import TopicName
from tests.unit.broker.subscriptions.fakes import FakeCnx, settle, subscribe_cmd


def _single(key: str | None, value: bytes, *, seq: int = 0) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
    if key is not None:
        md.partition_key = key
    md.uncompressed_size = len(value)
    return frames.encode_headers_and_payload(md, value)


def _batch(messages: list[tuple[str | None, bytes]], *, seq: int = 0) -> bytes:
    slots = []
    for key, value in messages:
        smd = pb.SingleMessageMetadata()
        if key is not None:
            smd.partition_key = key
        slots.append((smd, value))
    body = batch.build_batch(slots)
    md = pb.MessageMetadata(
        producer_name="p",
        sequence_id=seq,
        publish_time=1000 + seq,
        num_messages_in_batch=len(messages),
        uncompressed_size=len(body),
    )
    return frames.encode_headers_and_payload(md, body)


def _messages(data: bytes) -> list[tuple[str | None, bytes]]:
    """(key, value) of each message of an entry that a client would hand out."""
    _, raw_md, payload = frames.split_headers_and_payload(data)
    md = frames.parse_message_metadata(raw_md)
    out = []
    for m in batch.split_entry(md, payload):
        if m.metadata.compacted_out:
            continue
        key = m.metadata.partition_key if m.metadata.HasField("partition_key") else None
        out.append((key, bytes(m.payload)))
    return out


async def _view_contents(view: CompactedTopic) -> list[tuple[Position, str | None, bytes]]:
    current = view.current
    assert current is not None
    out = []
    if current.last_entry_id >= 0:
        for entry in await current.read(0, current.last_entry_id):
            for key, value in _messages(entry.data):
                out.append((entry.position, key, value))
    return out


def _ml() -> MemoryManagedLedger:
    return MemoryManagedLedger("t/ns/persistent/x", ManagedLedgerConfig(max_entries_per_ledger=4))


async def test_latest_value_per_key_tombstones_and_keyless() -> None:
    ml = _ml()
    await ml.add_entry(_single("a", b"a1"))
    await ml.add_entry(_single("b", b"b1"))
    await ml.add_entry(_single(None, b"no key"))
    await ml.add_entry(_single("a", b"a2"))
    await ml.add_entry(_single("b", b""))  # tombstone
    await ml.add_entry(_single("c", b"c1"))
    view = CompactedTopic(ml)
    result = await compact(ml, view)
    assert result.keys == 2 and result.entries_read == 6 and result.entries_written == 2
    assert [(k, v) for _, k, v in await _view_contents(view)] == [("a", b"a2"), ("c", b"c1")]
    cursor = ml.cursors[CURSOR]
    assert cursor.mark_delete_position == ml.last_confirmed_entry == view.horizon
    assert cursor.properties == {LEDGER_PROPERTY: result.ledger_id}


async def test_batches_are_looked_into_and_rebuilt_with_the_kept_messages() -> None:
    ml = _ml()
    first = await ml.add_entry(_batch([("a", b"a1"), ("b", b"b1"), ("c", b"c1")]))
    await ml.add_entry(_batch([("b", b"b2"), ("a", b""), (None, b"x")]))
    view = CompactedTopic(ml)
    await compact(ml, view)
    contents = await _view_contents(view)
    assert [(k, v) for _, k, v in contents] == [("c", b"c1"), ("b", b"b2")]
    assert contents[0][0] == first
    current = view.current
    assert current is not None
    (entry,) = await current.read(0, 0)
    # re-built with c only: a batch of one
    assert len(fmt.parse(entry.data).batched or []) == 1
    assert fmt.last_batch_index(entry.data) == -1
    (_, second) = await current.read(0, 1)
    assert [k for k, _ in _messages(second.data)] == ["b"]


async def test_incremental_compaction_switches_and_deletes_the_old_ledger() -> None:
    factory = MemoryManagedLedgerFactory(ManagedLedgerConfig(max_entries_per_ledger=3))
    ml = await factory.open("t/ns/persistent/x")
    for i in range(10):
        await ml.add_entry(_single(f"k{i % 3}", f"v{i}".encode(), seq=i))
    view = CompactedTopic(ml)
    first = await compact(ml, view)
    await ml.add_entry(_single("k0", b"new", seq=10))
    await ml.add_entry(_single("k1", b"", seq=11))
    second = await compact(ml, view)
    assert second.ledger_id != first.ledger_id
    # the second read the previous compacted ledger (3 entries) and the 2 new entries only
    assert second.entries_read == 3 + 2
    assert [(k, v) for _, k, v in await _view_contents(view)] == [("k2", b"v8"), ("k0", b"new")]
    with pytest.raises(StorageUnavailableError):
        await ml.open_aux_ledger(first.ledger_id)
    # nothing new: nothing written
    assert (await compact(ml, view)).ledger_id == -1
    # the view is found again from the cursor after a reopen
    await ml.close()
    reopened = await factory.open("t/ns/persistent/x")
    again = CompactedTopic(reopened)
    await again.load()
    assert again.horizon == view.horizon
    assert again.current is not None and again.current.ledger_id == second.ledger_id
    # deleting the cursor deletes its compacted ledger
    await reopened.delete_cursor(CURSOR)
    with pytest.raises(StorageUnavailableError):
        await reopened.open_aux_ledger(second.ledger_id)


async def test_compacted_cursor_reads_the_view_then_the_tail_rewinds_and_seeks() -> None:
    ml = _ml()
    for i in range(8):
        await ml.add_entry(_single(f"k{i % 2}", f"v{i}".encode(), seq=i))
    view = CompactedTopic(ml)
    await compact(ml, view)
    tail = await ml.add_entry(_single("k0", b"tail", seq=8))
    inner = await ml.new_non_durable_cursor("r", EARLIEST)
    cursor = CompactedCursor(inner, view, from_earliest=True)
    got = []
    while cursor.has_more_entries():
        got.extend(await cursor.read_entries(1))
    values = [v for e in got for _, v in _messages(e.data)]
    assert values == [b"v6", b"v7", b"tail"]
    assert got[-1].position == tail
    cursor.rewind()
    assert [v for e in await cursor.read_entries(10) for _, v in _messages(e.data)] == [
        b"v6",
        b"v7",
    ]
    await cursor.reset(got[1].position)
    assert [e.position for e in await cursor.read_entries(10)] == [got[1].position]
    assert [e.position for e in await cursor.read_entries(10)] == [tail]
    # back to the earliest, and a redelivery (rewind) goes there again
    await cursor.reset(EARLIEST)
    assert [e.position for e in await cursor.read_entries(1)] == [got[0].position]
    cursor.rewind()
    assert [e.position for e in await cursor.read_entries(1)] == [got[0].position]


async def test_last_message_id_and_seek_for_compacted_reads() -> None:
    ml = _ml()
    await ml.add_entry(_single("a", b"a1"))
    kept = await ml.add_entry(_single("b", b"b1"))
    await ml.add_entry(_single("a", b""))  # the topic's last message is a tombstone
    view = CompactedTopic(ml)
    subs = TopicSubscriptionsImpl(TopicName.parse("t"), ml, view)
    before = await subs.last_message_id(read_compacted=True)  # nothing compacted yet: the topic's
    assert (before.ledger_id, before.entry_id) == (ml.last_confirmed_entry.ledger_id, 2)
    await compact(ml, view)
    last = await subs.last_message_id(read_compacted=True)
    assert (last.ledger_id, last.entry_id) == (kept.ledger_id, kept.entry_id)
    plain = await subs.last_message_id()
    assert (plain.ledger_id, plain.entry_id) == (ml.last_confirmed_entry.ledger_id, 2)
    assert await subs.position_for_publish_time(1000, compacted=True) == kept


async def test_one_compaction_at_a_time_status_and_threshold() -> None:
    ml = _ml()
    for i in range(20):
        await ml.add_entry(_single(f"k{i % 4}", b"x" * 100, seq=i))
    compaction = TopicCompaction(ml, CompactedTopic(ml))
    assert compaction.status_json() == {"status": "NOT_RUN", "lastError": ""}
    assert not compaction.check_threshold(0)
    await compaction.ensure_cursor()  # a threshold is set: keep everything until compacted
    assert ml.cursors[CURSOR].mark_delete_position < ml.first_position
    ml.request_trim()
    assert ml.number_of_entries == 20
    assert compaction.backlog_bytes() > 2000
    assert not compaction.check_threshold(10**9)
    task = compaction.trigger()
    assert compaction.status is Status.RUNNING
    with pytest.raises(AlreadyRunningError):
        compaction.trigger()
    await task
    assert compaction.status_json() == {"status": "SUCCESS", "lastError": ""}
    stats = compaction.stats()
    assert stats["lastCompactionRemovedEventCount"] == 20 - 4
    assert stats["lastCompactionSucceedTimestamp"] > 0
    assert stats["lastCompactionFailedTimestamp"] == 0
    assert compaction.backlog_bytes() == 0
    await ml.add_entry(_single("k0", b"y" * 500, seq=20))
    assert compaction.check_threshold(100)
    assert compaction.running
    await compaction._task  # type: ignore[misc]
    assert compaction.backlog_bytes() == 0


async def test_read_compacted_subscriptions_through_the_dispatcher() -> None:
    ml = _ml()
    for i in range(10):
        await ml.add_entry(_single(f"k{i % 2}", f"v{i}".encode(), seq=i))
    view = CompactedTopic(ml)
    await compact(ml, view)
    await ml.add_entry(_single("k0", b"tail", seq=10))
    subs = TopicSubscriptionsImpl(TopicName.parse("persistent://public/default/t"), ml, view)

    shared = subscribe_cmd(1, sub_type=pb.CommandSubscribe.Shared)
    shared.read_compacted = True
    with pytest.raises(BrokerError) as refused:
        await subs.subscribe(shared, FakeCnx())
    assert refused.value.code == pb.NotAllowedError

    cmd = subscribe_cmd(2, sub="compacted")
    cmd.read_compacted = True
    cnx = FakeCnx()
    consumer = await subs.subscribe(cmd, cnx)
    consumer.flow(100)
    await settle()
    assert [m.data for m in cnx.messages] == [
        e.data
        for e in (await view.current.read(0, 1))  # type: ignore[union-attr]
    ] + [(await ml.read_entry(ml.last_confirmed_entry)).data]
    # nothing acknowledged: a redelivery goes back into the compacted ledger
    consumer.redeliver_unacknowledged([])
    await settle()
    assert len(cnx.messages) == 6
    # the ledgers before the horizon were trimmed (no other subscription held them): a plain
    # subscription sees what is stored, the compacted one saw each key's value from before
    plain = FakeCnx()
    other = await subs.subscribe(subscribe_cmd(3, sub="plain"), plain)
    other.flow(100)
    await settle()
    assert len(plain.messages) == ml.number_of_entries == 3


async def test_a_compressed_batch_that_does_not_decompress_is_skipped() -> None:
    ml = _ml()
    await ml.add_entry(_single("a", b"a1"))
    md = pb.MessageMetadata(
        producer_name="p",
        sequence_id=1,
        publish_time=1,
        num_messages_in_batch=2,
        compression=pb.LZ4,
        uncompressed_size=100,
    )
    await ml.add_entry(frames.encode_headers_and_payload(md, b"\x00" * 40))
    compaction = TopicCompaction(ml, CompactedTopic(ml))
    await compaction.compact()  # the garbage holds no key to keep: the entry is left out
    assert compaction.status_json()["status"] == "SUCCESS"
    current = compaction.view.current
    assert current is not None
    kept = [e.data for e in await current.read(0, current.last_entry_id)]
    assert kept == [_single("a", b"a1")]
