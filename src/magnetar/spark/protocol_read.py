"""The executors' read loop on the Pulsar binary protocol, spoken with the project's codec
(``magnetar.wire``) on a blocking socket: the default read path (option ``readPath``).

Why it exists: through the official client's Reader every message costs about 7 us of
Python calls on an executor (``read_next``, then one call per column), more than the whole
single-process client it is compared with, so a batch read of 2 partitions on 2 cores could
not get past half the client's rate (docs/benchmarks.md). Here a task gets one MESSAGE frame
per stored entry and reads the entry (from its metadata size on) from the socket into a bytes
object of its own, which is checksummed and split where it lies: the entry's metadata is
parsed once, its batch split in one pass (one SingleMessageMetadata parse per message, into
one reused object), and a message's value is recorded as where it starts and ends in the
entry (``rows.Columns``), copied into the Arrow column once per record batch; the message id
bytes are built from a per-entry prefix and a per-index suffix.

It is the protocol any Pulsar broker speaks, as the official client speaks it for a reader,
over a blocking connection of the client layer (``magnetar.client.blocking``: handshake,
PING/PONG, request ids, the lookup's redirects) whose frame reader is this module's:
CONNECT; LOOKUP of the topic partition, following redirects and answering
``proxy_through_service_url`` by connecting to the service URL with ``proxy_to_broker_url``
(a Magnetar or Pulsar proxy); SUBSCRIBE of a non-durable exclusive subscription starting at
the entry of the range's start (a non-durable cursor starts *at* that entry; the messages
up to the start are skipped here); FLOW permits re-granted as messages come; PONG to PING;
CLOSE_CONSUMER at the end. A connection lost, a CLOSE_CONSUMER or TOPIC_MIGRATED from the
broker (topic unloaded, moved) or a checksum mismatch: look the topic up again and
resubscribe from the last message read.

The rows are those of ``read.read_range`` (the official client's loop), batch for batch:
checked by tests/integration/spark/test_protocol_read.py. What this loop does not decode --
encrypted entries, chunked messages, a compression codec missing from pyarrow, an entry that
does not split -- is read by that loop instead, from the last message read on (``fallback``).
"""

from __future__ import annotations

import functools
import logging
import secrets
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, cast

from google.protobuf.message import DecodeError

from magnetar import __version__
from magnetar.client import blocking
from magnetar.client.connection import ConnectionLostError
from magnetar.common import backoff
from magnetar.spark.access import ANONYMOUS, Access
from magnetar.spark.options import MagnetarSourceError, Position
from magnetar.spark.rows import (
    ARROW_BATCH_ROWS,
    Columns,
    Range,
    arrow_schema,
    parent_and_index,
    poll_timeout_message,
)
from magnetar.wire import batch, commands, frames, lookup, pb, session, urls
from magnetar.wire.errors import CorruptBatchError, UnsupportedCompressionError, WireError
from magnetar.wire.ids import EARLIEST, MessageId

log = logging.getLogger(__name__)

CLIENT_VERSION: Final = f"magnetar-spark-{__version__}"
PERMITS: Final = 10_000
"""Messages the broker may send ahead of the loop (the official reader had a receiver queue
of 5,000); half of them are granted again once read."""
OPERATION_TIMEOUT_S: Final = 30.0
"""How long looking the topic up and subscribing may take, retries included (the official
client's operation timeout in ``read.read_range``)."""
CLOSE_TIMEOUT_S: Final = 5.0
MAX_RECONNECTS: Final = 10
"""Reconnections in a row without a message read in between before the task fails."""
MAX_FRAME_SIZE: Final = 128 * 1024 * 1024 + frames.FRAME_PADDING
"""The largest frame accepted: brokers announce their own limit (5 MiB by default), this
only guards against a garbled size."""

_C = pb.BaseCommand
_RETRIABLE: Final = frozenset({pb.ServiceNotReady, pb.TooManyRequests})
"""Broker answers that mean "not now" (the topic being loaded or moved, lookups throttled)."""
_ARROW_CODECS: Final = {pb.LZ4: "lz4_raw", pb.ZSTD: "zstd", pb.SNAPPY: "snappy"}
"""Pulsar's codecs as pyarrow names them: LZ4 and Snappy are the raw block formats, ZSTD
the frame format."""
_U32: Final = struct.Struct(">I")
_SIZES: Final = struct.Struct(">II")
_MAGIC_U32: Final = struct.Struct(">HI")

_Lost = ConnectionLostError
"""The connection is gone or unusable: connect and subscribe again."""


class _Refused(Exception):
    """A broker (or proxy) answered with a ServerError."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{commands.error_name(code)}: {message}")
        self.code = code


class _Unsupported(Exception):
    """An entry this loop does not decode: the official client's loop reads on from here."""


class _Link(blocking.BlockingConnection):
    """One blocking connection of the client layer to a broker, directly or piped by a proxy
    to the broker named in ``proxy_to``, whose MESSAGE frames are read by ``_frame``."""

    def next_entry(self, deadline: float) -> _Frame | None:
        """The next frame (MESSAGE ones as ``read_frame`` reads them), or None when
        ``deadline`` passed first (the link is unusable after that: a frame may have been
        cut)."""
        return cast(_Frame | None, self.next(deadline))

    def read_frame(self) -> _Frame | None:
        """Read one frame (None: a command of a type unknown here, skipped). A MESSAGE's
        stored message (from its metadata size on) is read into a bytes object of its own:
        checksummed and split where it lies (see the module's docstring)."""
        try:
            return self._frame()
        except TimeoutError:
            self.timed_out = True  # (the stream may hold part of a frame)
            raise

    def _frame(self) -> _Frame | None:
        read = self.exactly
        total, size = _SIZES.unpack(read(8))
        if total > MAX_FRAME_SIZE or size > total - 4:
            raise _Lost(f"undecodable data from {self.where}: frame {total}, command {size}")
        cmd = pb.BaseCommand()
        try:
            cmd.ParseFromString(read(size))
        except DecodeError as exc:
            raise _Lost(f"undecodable command from {self.where}: {exc}") from None
        left = total - 4 - size
        known = cmd.HasField("type")
        if not known or cmd.type != _C.MESSAGE:
            if left:
                read(left)  # (only SEND and MESSAGE carry a payload; a reader gets no SEND)
            return _Frame(cmd, cmd.type, None, None) if known else None
        crc = None
        while left >= 6:  # the optional sections before the stored message
            head = read(6)
            left -= 6
            magic, value = _MAGIC_U32.unpack(head)
            if magic == frames.MAGIC_BROKER_ENTRY_METADATA and value <= left:
                read(value)  # (not asked for in SUBSCRIBE; skipped when sent)
                left -= value
                continue
            if magic == frames.MAGIC_CRC32C:
                crc = value
                break
            return _Frame(cmd, cmd.type, head + read(left), None)  # no checksum section
        stored = read(left)
        if len(stored) < 4 or _U32.unpack_from(stored)[0] > left - 4:
            raise _Lost(f"undecodable data from {self.where}: a MESSAGE without its metadata")
        return _Frame(cmd, cmd.type, stored, crc)


class _Frame(NamedTuple):
    """A frame as the read loop needs it."""

    command: pb.BaseCommand
    type: int
    stored: bytes | None
    """A MESSAGE's stored message: [u32 metadata size][MessageMetadata][payload]."""
    crc: int | None
    """Its crc32c, when the broker sent one."""


def read_range(
    service_url: str,
    r: Range,
    *,
    poll_timeout_ms: int,
    fallback: Callable[[Position], Iterator[Any]],
    access: Access = ANONYMOUS,
    versions: bool = False,
) -> Iterator[Any]:
    """Every message of ``r`` in order, as Arrow record batches of ``rows.SCHEMA``
    (``ARROW_BATCH_ROWS`` rows each, the last one fewer), the same batches as
    ``read.read_range``. ``fallback(after)`` reads the rest of the range after ``after`` with
    the official client, for entries this loop does not decode. ``versions``: with each
    row's schema version (``rows.arrow_schema``)."""
    after = Position.parse(r.after)
    until = Position.parse(r.until)
    if until <= after:
        return
    reader = _RangeReader(service_url, r.topic, after, until, poll_timeout_ms, access)
    reader.versions = versions
    try:
        yield from reader.batches(fallback)
    finally:
        reader.close()


class _RangeReader:
    """One task's read of one range: the subscription, the position reached, the rows."""

    versions = False
    """With each entry's schema version (valueSchema=auto; ``rows.arrow_schema``)."""

    def __init__(
        self,
        service_url: str,
        topic: str,
        after: Position,
        until: Position,
        poll_ms: int,
        access: Access,
    ) -> None:
        try:
            self.service = urls.parse_service_url(service_url)
        except urls.BadUrlError as exc:
            raise MagnetarSourceError(f"reading {topic}: {exc}") from None
        # TLS (pulsar+ssl://) and credentials: built here, on the executor
        self.ssl_context = access.ssl_context() if self.service.tls else None
        self.auth = access.credentials()
        self.topic = topic
        self.after = after  # the last message appended to the rows (or the range's start)
        self.until = until
        self.until_entry = (until.ledger, until.entry)
        self.poll_ms = poll_ms
        self.parent, self.index = parent_and_index(topic)
        self.subscription = f"reader-{secrets.token_hex(5)}"
        self.consumer_name = f"magnetar-spark-{secrets.token_hex(5)}"
        self._consumer_ids = 0
        self.link: _Link | None = None
        self.consumer_id = 0
        self.granted = 0  # messages delivered since the last FLOW
        self._suffixes: dict[int, list[bytes]] = {}
        self._single = pb.SingleMessageMetadata()  # parsed into for every batched message

    # --- connection -----------------------------------------------------------------------

    def _owner(self, deadline: float) -> _Link:
        """A connection to the broker serving the topic (LOOKUP, redirects followed)."""

        def connect(address: urls.Address, proxy_to: str | None) -> _Link:
            return _Link(
                address,
                proxy_to=proxy_to,
                deadline=deadline,
                client_version=CLIENT_VERSION,
                ssl_context=self.ssl_context,
                auth=self.auth,
            )

        try:
            return blocking.find_owner(
                topic=self.topic, service=self.service, connect=connect, deadline=deadline
            )
        except (lookup.LookupFailedError, session.HandshakeRefusedError) as exc:
            raise _Refused(exc.code, exc.message) from None
        except urls.BadUrlError as exc:
            # (a lookup answering with a URL this loop cannot use: not retried)
            raise _Refused(pb.UnknownError, str(exc)) from None

    def _subscribe(self) -> None:
        """Look the topic up and subscribe at the entry of ``after``, retrying what is
        retriable for ``OPERATION_TIMEOUT_S``."""
        self._drop_link()
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        delays = backoff.Backoff(initial_s=0.1, max_s=2.0)
        while True:
            try:
                link = self._owner(deadline)
                try:
                    self._subscribe_on(link, deadline)
                except BaseException:
                    link.close()
                    raise
                self.link = link
                return
            except _Refused as exc:
                if exc.code not in _RETRIABLE:
                    raise MagnetarSourceError(
                        f"reading {self.topic}: the broker refused: {exc}"
                    ) from None
                problem = str(exc)
            except _Lost as exc:
                problem = str(exc)
            delay = delays.next()
            if time.monotonic() + delay >= deadline:
                raise MagnetarSourceError(
                    f"reading {self.topic}: could not subscribe within "
                    f"{OPERATION_TIMEOUT_S:.0f} s: {problem}"
                )
            log.info("reading %s: %s; retrying in %.1f s", self.topic, problem, delay)
            time.sleep(delay)

    def _subscribe_on(self, link: _Link, deadline: float) -> None:
        a = self.after
        start = EARLIEST if a.ledger < 0 or a.entry < 0 else MessageId(a.ledger, a.entry)
        self._consumer_ids += 1
        cid = self._consumer_ids
        answer = link.request(
            commands.subscribe(
                topic=self.topic,
                subscription=self.subscription,
                consumer_id=cid,
                request_id=0,  # (the connection's own)
                sub_type=pb.CommandSubscribe.Exclusive,
                consumer_name=self.consumer_name,
                durable=False,
                start_message_id=start,
                initial_position=pb.CommandSubscribe.Latest,
            ),
            deadline,
        )
        if answer.type == _C.ERROR:
            raise _Refused(answer.error.error, answer.error.message)
        if answer.type != _C.SUCCESS:
            raise _Lost(f"{link.where} answered SUBSCRIBE with {answer.type}")
        self.consumer_id = cid
        self.granted = 0
        link.send(commands.flow(consumer_id=cid, permits=PERMITS))

    def _drop_link(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def close(self) -> None:
        """CLOSE_CONSUMER (answered within ``CLOSE_TIMEOUT_S``, or not), then the socket."""
        link, self.link = self.link, None
        if link is None:
            return
        try:
            link.request(
                commands.close_consumer(consumer_id=self.consumer_id, request_id=0),
                time.monotonic() + CLOSE_TIMEOUT_S,
            )
        except (_Lost, _Refused):
            pass  # the broker drops the subscription with the connection anyway
        finally:
            link.close()

    # --- the loop -------------------------------------------------------------------------

    def batches(self, fallback: Callable[[Position], Iterator[Any]]) -> Iterator[Any]:
        schema = arrow_schema(versions=self.versions)
        cols = Columns(self.parent, self.index)
        poll_s = self.poll_ms / 1000
        reconnects = 0
        finished = False
        while not finished:
            self._subscribe()
            link = self.link
            assert link is not None
            deadline = time.monotonic() + poll_s
            try:
                while not finished:
                    frame = link.next_entry(deadline)
                    if frame is None:
                        raise MagnetarSourceError(
                            poll_timeout_message(
                                self.topic, self.after, self.until.text(), self.poll_ms
                            )
                        )
                    kind = frame.type
                    if kind != _C.MESSAGE:
                        if kind in (_C.CLOSE_CONSUMER, _C.TOPIC_MIGRATED):
                            raise _Lost(f"the broker sent {commands.type_name(kind)}")
                        continue  # (SUCCESS, ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC...)
                    if frame.command.message.consumer_id != self.consumer_id:
                        continue
                    deadline = time.monotonic() + poll_s
                    before = self.after
                    try:
                        finished = self._entry(frame, cols)
                    except _Unsupported as why:
                        log.warning(
                            "reading %s: %s; the official client reads on from after %s",
                            self.topic, why, self.after.text(),
                        )  # fmt: skip
                        if cols.rows:
                            yield cols.batch(schema)
                        self.close()
                        yield from fallback(self.after)
                        return
                    if self.after != before:
                        reconnects = 0
                    while cols.rows >= ARROW_BATCH_ROWS:
                        rest = cols.split(ARROW_BATCH_ROWS)
                        yield cols.batch(schema)
                        cols = rest
                    if self.granted >= PERMITS // 2:
                        link.send(commands.flow(consumer_id=self.consumer_id, permits=self.granted))
                        self.granted = 0
            except _Lost as lost:
                reconnects += 1
                if reconnects > MAX_RECONNECTS:
                    raise MagnetarSourceError(
                        f"reading {self.topic}: {reconnects} reconnections without progress "
                        f"after {self.after.text()}; the last problem: {lost}"
                    ) from None
                log.info("reading %s: %s; subscribing again after %s",
                         self.topic, lost, self.after.text())  # fmt: skip
        if cols.rows:
            yield cols.batch(schema)

    def _entry(self, frame: _Frame, cols: Columns) -> bool:
        """Append the messages of one MESSAGE frame (a stored entry) that are in the range;
        True once the range is complete."""
        mid = frame.command.message.message_id
        ledger, entry = mid.ledgerId, mid.entryId
        stored = frame.stored
        assert stored is not None  # (a MESSAGE frame always has it)
        if frame.crc is not None and frames.crc32c(stored) != frame.crc:
            # (the official client's check: a mismatch is dropped and read again)
            raise _Lost(f"checksum mismatch in entry {ledger}:{entry}")
        (size,) = _U32.unpack_from(stored)  # (the link checked it fits)
        start = 4 + size  # of the payload
        try:
            md = frames.parse_message_metadata(stored[4:start])
        except WireError as exc:
            raise _Unsupported(f"entry {ledger}:{entry}: {exc}") from None
        batched = md.HasField("num_messages_in_batch")
        n = md.num_messages_in_batch if batched else 1
        self.granted += n
        here = (ledger, entry)
        a, until_entry = self.after, self.until_entry
        if here > until_entry:
            return True
        finished = here == until_entry
        if here < (a.ledger, a.entry) or md.marker_type:
            return finished  # read before (a reconnection), or a broker marker
        if batched:
            lo = max(0, a.batch + 1) if here == (a.ledger, a.entry) else 0
            stop = min(n, self.until.batch + 1) if finished else n
        else:
            lo, stop = (0, 1) if a < (ledger, entry, -1) <= self.until else (0, 0)
        if lo >= stop:
            return finished
        if md.encryption_keys:
            raise _Unsupported(f"entry {ledger}:{entry} is encrypted")
        if md.num_chunks_from_msg > 1:
            raise _Unsupported(f"entry {ledger}:{entry} is a chunk of a larger message")
        data, start = _payload(md, stored, start, f"{ledger}:{entry}")
        prefix = _id_prefix(ledger, entry, self.index)
        version = -1
        if self.versions and md.schema_version:
            version = int.from_bytes(md.schema_version, "big")
        cols.start_entry(ledger, entry, md.publish_time, md.producer_name, md.event_time, version)
        if not batched:
            value = data[start:] if start else data
            props = _pairs(md.properties) if md.properties else []
            cols.add_row(md.partition_key or None, value, 0, props)
            cols.ids.append(prefix)
            cols.batches.append(-1)
            self.after = Position(ledger, entry, -1)
            return finished
        ack_set = frame.command.message.ack_set
        keep = _unacked(ack_set) if ack_set else None
        rows = cols.rows
        try:
            last = _split(cols, data, start, lo, stop, prefix, self._suffix(n), keep, self._single)
        except _Corrupt as exc:
            cols.split(rows)  # (the rows of this entry appended before the damage: dropped)
            raise _Unsupported(f"entry {ledger}:{entry}: {exc}") from None
        if last >= 0:
            self.after = Position(ledger, entry, last)
        return finished

    def _suffix(self, n: int) -> list[bytes]:
        """Per batch index of a batch of ``n``: the end of its MessageIdData
        (batch_index = 4, batch_size = 6)."""
        found = self._suffixes.get(n)
        if found is None:
            size = b"\x30" + _varint(n)
            found = self._suffixes[n] = [b"\x20" + _varint(i) + size for i in range(n)]
        return found


class _Corrupt(Exception):
    """A batch payload that does not split into its messages."""


def _split(
    cols: Columns,
    data: bytes,
    p: int,
    lo: int,
    stop: int,
    prefix: bytes,
    suffixes: list[bytes],
    keep: frozenset[int] | None,
    smd: pb.SingleMessageMetadata,
) -> int:
    """Append messages ``lo`` to ``stop - 1`` of the batch payload that starts at ``p`` in
    ``data`` (``[u32 size][SingleMessageMetadata][payload]...``) to ``cols``, those in
    ``keep`` only when given; the last batch index appended (-1: none). ``smd`` is parsed
    into for each message (reused: no object per message). The hot loop of the read path:
    a message costs one metadata parse and a few appends; its value stays in ``data``."""
    cols.add_chunk(data)
    keys, bounds = cols.keys.append, cols.bounds.append
    parse, unpack, has = smd.ParseFromString, _U32.unpack_from, smd.HasField
    end = len(data)
    try:
        for i in range(min(lo, stop)):  # messages before the range: only their sizes
            (size,) = unpack(data, p)
            m = p + 4 + size
            parse(data[p + 4 : m])
            p = m + smd.payload_size
            if p > end or p < m:
                raise _Corrupt(f"message {i} ends at {p}, out of the payload's {end} bytes")
        picked: list[int] = []
        taken: Sequence[int] = range(lo, stop) if keep is None else picked
        for i in range(lo, stop):
            (size,) = unpack(data, p)
            m = p + 4 + size
            raw = data[p + 4 : m]
            parse(raw)
            p = m + smd.payload_size
            if p > end or p < m:
                raise _Corrupt(f"message {i} ends at {p}, out of the payload's {end} bytes")
            if keep is not None:
                if i not in keep:
                    continue
                picked.append(i)
            bounds(m)
            bounds(p)
            keys(smd.partition_key or None)
            # a field's tag byte is in the metadata when the field is: without it, known
            # absent without reading the field -- event_time (5, varint) is 0x28, properties
            # (1) start with 0x0a (0x8a if over-long)
            if 40 in raw and has("event_time"):  # its own event time, the entry's otherwise
                cols.event_rows.append(len(cols.keys) - 1)
                cols.event_times.append(smd.event_time)
            if (10 in raw or 138 in raw) and (pairs := smd.properties):
                cols.property_rows.append(len(cols.keys) - 1)
                cols.properties.append(_pairs(pairs))
    except (struct.error, DecodeError) as exc:
        raise _Corrupt(f"the batch does not split: {exc}") from None
    cols.batches.extend(taken)
    if keep is None:
        cols.ids.extend(map(prefix.__add__, suffixes[lo:stop]))
    else:
        cols.ids.extend([prefix + suffixes[i] for i in taken])
    return taken[-1] if taken else -1


def _pairs(kvs: Any) -> list[tuple[str, str]]:
    """Message properties as the official client hands them over: a map ordered by key,
    the first of repeated keys."""
    if len(kvs) == 1:
        kv = kvs[0]
        return [(kv.key, kv.value)]
    out: dict[str, str] = {}
    for kv in kvs:
        out.setdefault(kv.key, kv.value)
    return sorted(out.items())


def _unacked(words: Any) -> frozenset[int]:
    """The batch indexes a MESSAGE's ack_set leaves to deliver (bit set: not acknowledged)."""
    return frozenset(batch.unacked_from_ack_set(words))


@functools.cache
def _arrow_codecs() -> Mapping[int, batch.Decompressor]:
    """The codecs besides ZLIB, from pyarrow (imported on the first compressed entry):
    those this pyarrow has."""
    import pyarrow as pa

    def codec(name: str) -> batch.Decompressor:
        def run(payload: Any, size: int) -> bytes:
            out: bytes = pa.decompress(payload, decompressed_size=size, codec=name, asbytes=True)
            return out

        return run

    return {
        code: codec(name) for code, name in _ARROW_CODECS.items() if pa.Codec.is_available(name)
    }


def _payload(md: pb.MessageMetadata, stored: bytes, start: int, where: str) -> tuple[bytes, int]:
    """An entry's payload, decompressed (``wire.batch.decompress``): the bytes holding it
    and where it starts there."""
    codec = md.compression
    if codec == pb.NONE:
        return stored, start
    try:
        out = batch.decompress(
            memoryview(stored)[start:], codec, md.uncompressed_size, codecs=_arrow_codecs()
        )
    except UnsupportedCompressionError:
        lacking = _ARROW_CODECS.get(codec)
        if lacking is not None:
            raise _Unsupported(
                f"entry {where} is {lacking}-compressed; pyarrow lacks {lacking}"
            ) from None
        raise _Unsupported(f"entry {where} has compression {codec}, unknown here") from None
    except CorruptBatchError as exc:
        raise _Unsupported(f"entry {where} does not decompress: {exc}") from None
    return bytes(out), 0


def _id_prefix(ledger: int, entry: int, partition: int) -> bytes:
    """The start of a message's MessageIdData as the official client serialises it:
    ledgerId = 1, entryId = 2, partition = 3 (when the topic is a partition)."""
    out = b"\x08" + _varint(ledger) + b"\x10" + _varint(entry)
    if partition >= 0:
        out += b"\x18" + _varint(partition)
    return out


def _varint(value: int) -> bytes:
    """A protobuf varint of a non-negative value."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
