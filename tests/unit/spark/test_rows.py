"""The pieces of the executors' read loops that need no broker: an Arrow batch cut in two
keeps every row and entry once (``rows.Columns.split``), the protocol loop's message id
bytes are the official client's, a batch payload splits into its rows (and a corrupt one is
noticed), properties come ordered by key, and the ``readPath`` option is checked."""

from __future__ import annotations

import zlib

import pulsar
import pyarrow as pa
import pytest

from magnetar.spark import options as opts
from magnetar.spark import protocol_read as pr
from magnetar.spark.options import MagnetarSourceError
from magnetar.spark.rows import Columns, arrow_schema
from magnetar.wire import batch as wire_batch
from magnetar.wire import pb


def _filled(entries: list[int]) -> Columns:
    """Rows of entries of the given sizes, each row's fields telling which it is."""
    cols = Columns("persistent://public/default/t", 3)
    row = 0
    for e, size in enumerate(entries):
        cols.start_entry(7, e, 1_700_000_000_000 + e, f"producer-{e}")
        for i in range(size):
            cols.keys.append(f"k{row}" if row % 2 else None)
            cols.values.append(b"v%d" % row)
            cols.ids.append(b"id%d" % row)
            cols.batches.append(i)
            cols.events.append(row)
            cols.properties.append([("n", str(row))] if row % 3 else ())
            row += 1
    return cols


@pytest.mark.parametrize("at", [1, 3, 4, 5, 9, 10, 11])
def test_a_batch_split_anywhere_keeps_every_row_and_its_entry(at: int) -> None:
    schema = arrow_schema()
    sizes = [4, 1, 5, 2]
    whole = _filled(sizes).batch(schema)
    head = _filled(sizes)
    rest = head.split(at)
    assert len(head.values) == at and len(rest.values) == sum(sizes) - at
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


def test_a_batch_payload_splits_into_its_rows() -> None:
    cols = Columns("t", -1)
    cols.start_entry(1, 2, 3, "p")
    prefix = pr._id_prefix(1, 2, -1)
    reader = pr._RangeReader.__new__(pr._RangeReader)
    reader._suffixes = {}
    last = pr._split(cols, _batch_payload(), 0, 1, 5, 9, prefix, reader._suffix(5), None)
    assert last == 4
    assert cols.values == [b"x", b"xx", b"xxx", b"xxxx"]
    assert cols.keys == ["k1", None, "k3", None]
    assert cols.events == [9, 9, 42, 9]  # the entry's event time unless the message has one
    assert cols.properties == [(), (), (), [("a", "aa"), ("b", "bb")]]
    assert cols.batches == [1, 2, 3, 4]
    assert cols.ids[0] == prefix + b"\x20\x01\x30\x05"

    keep = pr._unacked(wire_batch.ack_set_from_unacked([0, 3]))
    assert keep == {0, 3}
    cols = Columns("t", -1)
    assert pr._split(cols, _batch_payload(), 0, 0, 5, 0, prefix, reader._suffix(5), keep) == 3
    assert cols.values == [b"", b"xxx"] and cols.batches == [0, 3]

    with pytest.raises(pr._Corrupt, match="out of the payload"):
        pr._split(Columns("t", -1), _batch_payload()[:-3], 0, 0, 5, 0, prefix, [b""] * 5, None)
    with pytest.raises(pr._Corrupt):  # a batch announcing more messages than it holds
        pr._split(Columns("t", -1), _batch_payload(), 0, 0, 6, 0, prefix, [b""] * 6, None)


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
