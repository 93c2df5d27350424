"""The pieces of the executors' read loops that need no broker: an Arrow batch cut in two
keeps every row and entry once (``rows.Columns.split``), the protocol loop's message id
bytes are the official client's, a batch payload splits into its rows (and a corrupt one is
noticed), properties come ordered by key, and the ``readPath`` option is checked."""

from __future__ import annotations

import re
import struct
import zlib

import pulsar
import pyarrow as pa
import pytest

from magnetar.spark import options as opts
from magnetar.spark import protocol_read as pr
from magnetar.spark.options import MagnetarSourceError, Position
from magnetar.spark.rows import Columns, arrow_schema
from magnetar.wire import batch as wire_batch
from magnetar.wire import commands, pb
from magnetar.wire.ids import MessageId


def _filled(entries: list[int]) -> Columns:
    """Rows of entries of the given sizes, each row's fields telling which it is: the
    values of an entry in one chunk (as a batch payload) or each in its own (a message
    stored alone, or the official client's loop), some rows with an event time and
    properties of their own."""
    cols = Columns("persistent://public/default/t", 3)
    row = 0
    for e, size in enumerate(entries):
        cols.start_entry(7, e, 1_700_000_000_000 + e, f"producer-{e}", 1_600_000_000_000 + e)
        values = [b"v%d" % (row + i) for i in range(size)]
        if e % 2:
            chunk = b"".join(b"<head>" + value for value in values) + b"<tail>"
            cols.add_chunk(chunk)
        for i, value in enumerate(values):
            if e % 2:
                end = chunk.index(value + b"<") + len(value)
                cols.bounds += (end - len(value), end)
                cols.keys.append(f"k{row}" if row % 2 else None)
                if row % 4 == 1:
                    cols.event_rows.append(row)
                    cols.event_times.append(row)
                if row % 3:
                    cols.property_rows.append(row)
                    cols.properties.append([("n", str(row))])
            else:
                props = [("n", str(row))] if row % 3 else []
                key = f"k{row}" if row % 2 else None
                cols.add_row(key, value, row if row % 4 == 1 else 0, props)
            cols.ids.append(b"id%d" % row)
            cols.batches.append(i)
            row += 1
    return cols


def test_rows_carry_their_entry_and_their_own_fields() -> None:
    table = pa.Table.from_batches([_filled([4, 1, 5, 2]).batch(arrow_schema())]).to_pylist()
    assert [r["value"] for r in table] == [b"v%d" % i for i in range(12)]
    assert [r["key"] for r in table] == [f"k{i}" if i % 2 else None for i in range(12)]
    assert [r["properties"] for r in table] == [[("n", str(i))] if i % 3 else [] for i in range(12)]
    entry_of = [0] * 4 + [1] + [2] * 5 + [3] * 2
    assert [r["producerName"] for r in table] == [f"producer-{e}" for e in entry_of]
    assert [r["messageIdString"] for r in table] == [
        f"7:{e}:{i}:3" for e, i in zip(entry_of, [0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 0, 1], strict=True)
    ]
    events = [int(r["eventTime"].timestamp() * 1000) for r in table]
    assert events == [i if i % 4 == 1 else 1_600_000_000_000 + e for i, e in enumerate(entry_of)]
    published = [int(r["publishTime"].timestamp() * 1000) for r in table]
    assert published == [1_700_000_000_000 + e for e in entry_of]


@pytest.mark.parametrize("at", [1, 3, 4, 5, 9, 10, 11])
def test_a_batch_split_anywhere_keeps_every_row_and_its_entry(at: int) -> None:
    schema = arrow_schema()
    sizes = [4, 1, 5, 2]
    whole = _filled(sizes).batch(schema)
    head = _filled(sizes)
    rest = head.split(at)
    assert head.rows == at and rest.rows == sum(sizes) - at
    assert pa.Table.from_batches([head.batch(schema), rest.batch(schema)]).equals(
        pa.Table.from_batches([whole])
    )


def test_message_id_bytes_are_the_official_clients() -> None:
    for ledger, entry, partition in [(0, 0, -1), (5, 7, 1), (2**40 + 3, 300, 12), (127, 128, 0)]:
        prefix = pr._id_prefix(ledger, entry, partition)
        assert prefix == pulsar.MessageId(partition, ledger, entry, -1).serialize()
        reader = pr._RangeReader.__new__(pr._RangeReader)
        reader._suffixes = {}
        for n in (1, 3, 200):
            suffixes = reader._suffix(n)
            for index in (0, n - 1):
                raw = prefix + suffixes[index]
                mid = pulsar.MessageId.deserialize(raw)
                assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (
                    partition,
                    ledger,
                    entry,
                    index,
                )
                data = pb.MessageIdData.FromString(raw)
                assert (data.batch_index, data.batch_size) == (index, n)
                # the client writes its fields in number order, the batch size last
                base = pulsar.MessageId(partition, ledger, entry, index).serialize()
                assert raw == base + b"\x30" + pr._varint(n)


def _batch_payload() -> bytes:
    messages = []
    for i in range(5):
        smd = pb.SingleMessageMetadata()
        if i % 2:
            smd.partition_key = f"k{i}"
        if i == 3:
            smd.event_time = 42
        for key in ("b", "a") if i == 4 else ():
            smd.properties.add(key=key, value=key * 2)
        messages.append((smd, b"x" * i))
    return wire_batch.build_batch(messages)


def _split(cols: Columns, payload: bytes, lo: int, stop: int, keep: frozenset[int] | None) -> int:
    reader = pr._RangeReader.__new__(pr._RangeReader)
    reader._suffixes = {}
    suffixes = reader._suffix(max(stop, 5))
    single = pb.SingleMessageMetadata()
    return pr._split(cols, payload, 0, lo, stop, pr._id_prefix(1, 2, -1), suffixes, keep, single)


def test_a_batch_payload_splits_into_its_rows() -> None:
    schema = arrow_schema()
    cols = Columns("t", -1)
    cols.start_entry(1, 2, 3, "p", 9)
    assert _split(cols, _batch_payload(), 1, 5, None) == 4
    rows = pa.Table.from_batches([cols.batch(schema)]).to_pylist()
    assert [r["value"] for r in rows] == [b"x", b"xx", b"xxx", b"xxxx"]
    assert [r["key"] for r in rows] == ["k1", None, "k3", None]
    # the entry's event time unless the message has one
    assert [int(r["eventTime"].timestamp() * 1000) for r in rows] == [9, 9, 42, 9]
    assert [r["properties"] for r in rows] == [[], [], [], [("a", "aa"), ("b", "bb")]]
    assert cols.batches == [1, 2, 3, 4]
    assert cols.ids[0] == pr._id_prefix(1, 2, -1) + b"\x20\x01\x30\x05"

    keep = pr._unacked(wire_batch.ack_set_from_unacked([0, 3]))
    assert keep == {0, 3}
    cols = Columns("t", -1)
    cols.start_entry(1, 2, 3, "p")
    assert _split(cols, _batch_payload(), 0, 5, keep) == 3
    assert cols.batch(schema).column("value").to_pylist() == [b"", b"xxx"]
    assert cols.batches == [0, 3]

    with pytest.raises(pr._Corrupt, match="out of the payload"):
        _split(Columns("t", -1), _batch_payload()[:-3], 0, 5, None)
    with pytest.raises(pr._Corrupt):  # a batch announcing more messages than it holds
        _split(Columns("t", -1), _batch_payload(), 0, 6, None)


def test_compressed_payloads_decompress_with_every_codec() -> None:
    raw = b"payload " * 100
    md = pb.MessageMetadata(uncompressed_size=len(raw))
    for codec, packed in [
        (pb.NONE, raw),
        (pb.ZLIB, zlib.compress(raw)),
        (pb.LZ4, pa.compress(raw, codec="lz4_raw", asbytes=True)),
        (pb.ZSTD, pa.compress(raw, codec="zstd", asbytes=True)),
        (pb.SNAPPY, pa.compress(raw, codec="snappy", asbytes=True)),
    ]:
        md.compression = codec
        data, start = pr._payload(md, b"head" + packed, 4, "1:2")
        assert data[start:] == raw
    md.compression = pb.ZLIB
    with pytest.raises(pr._Unsupported, match="does not decompress"):
        pr._payload(md, b"not zlib", 0, "1:2")


def test_the_read_path_option() -> None:
    assert opts.read_path({}) == opts.READ_PATH_PROTOCOL
    assert opts.read_path({"readpath": "Client"}) == opts.READ_PATH_CLIENT
    with pytest.raises(MagnetarSourceError, match="option readPath must be protocol or client"):
        opts.read_path({"readpath": "fast"})


def _reader_for(index: int) -> pr._RangeReader:
    """A range reader of everything, without a connection (its ``_entry`` is what is used)."""
    reader = pr._RangeReader.__new__(pr._RangeReader)
    reader.after, reader.until = Position(-1, -1, -1), Position(9, 9, 9)
    reader.until_entry, reader.index, reader.granted = (9, 9), index, 0
    reader._suffixes, reader._single = {}, pb.SingleMessageMetadata()
    return reader


def _entry_frame(entry: int, payload: bytes, n: int) -> pr._Frame:
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=5, num_messages_in_batch=n
    )
    stored = struct.pack(">I", meta.ByteSize()) + meta.SerializeToString() + payload
    command = commands.message(consumer_id=1, message_id=MessageId(1, entry))
    return pr._Frame(command, command.type, stored, None)


def test_an_entry_that_does_not_split_leaves_the_rows_before_it_alone() -> None:
    schema = arrow_schema()
    reader, cols = _reader_for(-1), Columns("t", -1)
    assert not reader._entry(_entry_frame(0, _batch_payload(), 5), cols)
    before = cols.batch(schema)
    with pytest.raises(pr._Unsupported, match="entry 1:1"):
        reader._entry(_entry_frame(1, _batch_payload()[:-3], 5), cols)
    assert cols.rows == 5 and cols.batch(schema).equals(before)  # nothing of entry 1:1
    assert reader.after == Position(1, 0, 4)  # the fallback reads on from there


def test_the_service_url_option() -> None:
    assert opts.service_url({"serviceurl": " pulsar://b:6650/ "}) == "pulsar://b:6650/"
    assert opts.service_url({"serviceurl": "pulsar://b"}) == "pulsar://b"  # (port 6650)
    assert opts.service_url({"serviceurl": "pulsar+ssl://b:6651"}) == "pulsar+ssl://b:6651"
    for url, says in [
        ("", "option serviceUrl (pulsar://host:port or pulsar+ssl://host:port) is required"),
        ("b:6650", "expected pulsar://host:port"),
        ("pulsar://b:x", "port 'x' is not a number"),
        ("pulsar://a:6650,b:6650", "name one host"),
    ]:
        with pytest.raises(MagnetarSourceError, match=re.escape(says)):
            opts.service_url({"serviceurl": url})
