"""Geo-replication's pure parts and the receiving side's bookkeeping: sequence ids from source
positions, what a replicator sends (origin marked) and what it never sends (another
cluster's entries, markers), the clusters a policy replicates to, and deduplication replaying
replicated entries under the replicator's name; transactions as dispatch sees them (held while
open, aborted entries skipped, committed ones sent as plain messages); the window of entries
in flight and the cursor moving over the receipted prefix only (docs/geo-replication.md)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from magnetar.broker import replication
from magnetar.broker.dedup import Deduplication, Verdict
from magnetar.broker.transactions.buffer import TransactionBuffer
from magnetar.broker.transactions.ids import TxnId
from magnetar.client import handles
from magnetar.managed_ledger.api import Entry, Position
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.wire import frames, pb


def _entry(position: Position, meta: pb.MessageMetadata, payload: bytes = b"x") -> Entry:
    return Entry(position, frames.encode_headers_and_payload(meta, payload))


def _meta(**fields: Any) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, **fields)


def _replicator(local: str = "a", remote: str = "b") -> replication.Replicator:
    return replication.Replicator(
        topic="persistent://t/n/x",
        managed_ledger=cast(Any, None),
        local=local,
        remote=remote,
        clusters=cast(Any, None),
    )


def test_sequence_ids_grow_with_the_source_position() -> None:
    positions = [Position(3, 0), Position(3, 1), Position(3, 2**32 - 1), Position(4, 0)]
    ids = [replication.sequence_id(p) for p in positions]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_an_entry_is_sent_marked_with_its_origin_and_source_position() -> None:
    prepared = _replicator()._prepare(_entry(Position(5, 9), _meta(num_messages_in_batch=3)))
    assert prepared is not None
    meta, payload, count = prepared
    assert meta.replicated_from == "a" and payload == b"x" and count == 3
    assert (meta.producer_name, meta.sequence_id) == ("p", 7)  # the original's, kept
    props = {p.key: p.value for p in meta.properties}
    assert props[replication.SOURCE_POSITION] == "5:9"
    assert replication.replayed_sequence_id(meta) == (
        "pulsar.repl.a",
        replication.sequence_id(Position(5, 9)),
    )


def test_replicated_entries_and_markers_are_never_sent() -> None:
    r = _replicator()
    assert r._prepare(_entry(Position(1, 0), _meta(replicated_from="b"))) is None
    assert r._prepare(_entry(Position(1, 1), _meta(marker_type=1))) is None
    assert r._prepare(Entry(Position(1, 2), b"\x00\x00")) is None  # undecodable: skipped
    # per-message replication clusters, and replication disabled (the clients' __local__)
    assert r._prepare(_entry(Position(1, 3), _meta(replicate_to=["a", "c"]))) is None
    assert r._prepare(_entry(Position(1, 4), _meta(replicate_to=["__local__"]))) is None
    assert r._prepare(_entry(Position(1, 5), _meta(replicate_to=["a", "b"]))) is not None


def test_remote_clusters_of_a_policy() -> None:
    assert replication.remote_clusters({"replication_clusters": ["a", "b", "c"]}, "a") == [
        "b",
        "c",
    ]
    assert replication.remote_clusters({"replication_clusters": ["a"]}, "a") == []
    assert replication.remote_clusters({}, "a") == []
    assert replication.remote_clusters({"replication_clusters": "b"}, "a") == []
    assert replication.replayed_sequence_id(_meta()) is None


async def test_dedup_replay_records_replicated_entries_under_the_replicator() -> None:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t/n/persistent/x")
    before = Deduplication(ml, entries_interval=1000, inactivity_s=60, max_producers=10)
    await before.enable()  # its cursor: what a restart replays from
    await ml.add_entry(frames.encode_headers_and_payload(_meta(), b"local"))
    source = Position(40, 2)
    meta = _meta(replicated_from="b")
    meta.properties.add(key=replication.SOURCE_POSITION, value=str(source))
    await ml.add_entry(frames.encode_headers_and_payload(meta, b"from b"))
    dedup = Deduplication(ml, entries_interval=1000, inactivity_s=60, max_producers=10)
    await dedup.enable()  # (as when the topic loads again)
    assert dedup.last_sequence_id("p") == 7
    seq = replication.sequence_id(source)
    assert dedup.last_sequence_id("pulsar.repl.b") == seq
    # the replicator resending that entry after a crash is dropped; the next one is new
    assert dedup.check("pulsar.repl.b", seq, seq) is Verdict.DUPLICATE
    nxt = replication.sequence_id(Position(40, 3))
    assert dedup.check("pulsar.repl.b", nxt, nxt) is Verdict.NEW


async def test_transactions_held_open_aborted_skipped_committed_sent_plain() -> None:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t/n/persistent/txn")
    buffer = TransactionBuffer(ml, "persistent://t/n/txn", on_change=lambda: None)
    cursor = await ml.open_cursor("pulsar.repl.b")
    r = replication.Replicator(
        topic="persistent://t/n/txn",
        managed_ledger=ml,
        local="a",
        remote="b",
        clusters=cast(Any, None),
        transactions=lambda: buffer,
    )
    committed, aborted = TxnId(1, 1), TxnId(1, 2)

    def txn_entry(txn: TxnId, body: bytes) -> bytes:
        meta = _meta(txnid_most_bits=txn.most, txnid_least_bits=txn.least)
        return frames.encode_headers_and_payload(meta, body)

    await ml.add_entry(frames.encode_headers_and_payload(_meta(), b"plain-1"))
    await buffer.append(committed, txn_entry(committed, b"committed"))
    await buffer.append(aborted, txn_entry(aborted, b"aborted"))
    await ml.add_entry(frames.encode_headers_and_payload(_meta(), b"plain-2"))
    await buffer.end(committed, commit=True)

    def sendable(entries: list[Entry]) -> list[bytes]:
        out = []
        for entry in entries:
            prepared = r._prepare(entry)
            if prepared is not None:
                meta, payload, _ = prepared
                assert not meta.HasField("txnid_most_bits")
                assert not meta.HasField("txnid_least_bits")
                out.append(payload)
        return out

    # the aborted transaction is still open: nothing from its first entry on
    first = r.within_transactions(cursor, await cursor.read_entries(100))
    assert sendable(first) == [b"plain-1", b"committed"]
    await buffer.end(aborted, commit=False)
    rest = r.within_transactions(cursor, await cursor.read_entries(100))
    assert sendable(rest) == [b"plain-2"]  # the aborted entry and both markers skipped
    assert not cursor.has_more_entries()


class _Remote:
    """The replicator's side of a remote producer, its receipts released by the test (a real
    broker answers in its own time: the window's bookkeeping needs them held)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, asyncio.Future[Any]]] = []

    async def send_stored(
        self, metadata: pb.MessageMetadata, payload: bytes, *, sequence_id: int
    ) -> asyncio.Future[Any]:
        receipt: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((sequence_id, receipt))
        return receipt

    def receipt(self, i: int) -> None:
        self.sent[i][1].set_result(None)


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_the_window_bounds_entries_in_flight_and_the_cursor_follows_receipts() -> None:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t/n/persistent/window")
    cursor = await ml.open_cursor("pulsar.repl.b")
    positions = []
    for i in range(30):
        meta = _meta(replicated_from="c") if i == 3 else _meta()  # 3: not sent
        positions.append(await ml.add_entry(frames.encode_headers_and_payload(meta, b"%d" % i)))
    r = replication.Replicator(
        topic="persistent://t/n/window",
        managed_ledger=ml,
        local="a",
        remote="b",
        clusters=cast(Any, None),
        window=8,
    )
    remote = _Remote()
    running = asyncio.ensure_future(r._replicate(cursor, cast(Any, remote)))
    await _settle()
    # 8 entries read (one of them not sent), none receipted: reading stops there
    assert [s for s, _ in remote.sent] == [
        replication.sequence_id(p) for p in positions[:8] if p != positions[3]
    ]
    assert cursor.mark_delete_position < positions[0]
    remote.receipt(1)  # (out of order) the head still has no receipt: the cursor stays
    await _settle()
    assert cursor.mark_delete_position < positions[0] and len(remote.sent) == 7
    remote.receipt(0)  # the head and the next receipted, then the entry not sent
    await _settle()
    assert cursor.mark_delete_position == positions[1]
    assert len(remote.sent) == 9 and r.msg_out == 2  # two more in the room made
    remote.receipt(2)
    await _settle()
    assert cursor.mark_delete_position == positions[3]  # over the entry not sent, too
    assert len(remote.sent) == 11
    # the producer gives up: replication through it stops, the cursor where it was
    remote.sent[3][1].set_exception(handles.HandleClosedError("gone"))
    with pytest.raises(handles.HandleClosedError):
        await running
    assert cursor.mark_delete_position == positions[3]
    # a new producer: everything after the acknowledged prefix again, same sequence ids
    again = _Remote()
    running = asyncio.ensure_future(r._replicate(cursor, cast(Any, again)))
    await _settle()
    assert [s for s, _ in again.sent] == [replication.sequence_id(p) for p in positions[4:12]]
    while len([f for _, f in again.sent if f.done()]) < 26:
        for _, receipt in again.sent:
            if not receipt.done():
                receipt.set_result(None)
        await _settle()
    assert [s for s, _ in again.sent] == [replication.sequence_id(p) for p in positions[4:]]
    assert cursor.mark_delete_position == positions[-1] and cursor.backlog() == 0
    assert r.msg_out == 3 + 26
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
