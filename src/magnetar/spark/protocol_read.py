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

It is the protocol any Pulsar broker speaks, as the official client speaks it for a reader:
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

import itertools
import logging
import secrets
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

from google.protobuf.message import DecodeError

from magnetar import __version__
from magnetar.spark.options import MagnetarSourceError, Position
from magnetar.spark.rows import (
    ARROW_BATCH_ROWS,
    Columns,
    Range,
    arrow_schema,
    parent_and_index,
    poll_timeout_message,
)
from magnetar.wire import commands, frames, pb
from magnetar.wire.errors import WireError
from magnetar.wire.ids import EARLIEST, MessageId

log = logging.getLogger(__name__)

PROTOCOL_VERSION: Final = 20
"""What the official clients (pulsar-client 3.x, C++ 4.x) announce in CONNECT."""
CLIENT_VERSION: Final = f"magnetar-spark-{__version__}"
PERMITS: Final = 10_000
"""Messages the broker may send ahead of the loop (the official reader had a receiver queue
of 5,000); half of them are granted again once read."""
OPERATION_TIMEOUT_S: Final = 30.0
"""How long looking the topic up and subscribing may take, retries included (the official
client's operation timeout in ``read.read_range``)."""
CLOSE_TIMEOUT_S: Final = 5.0
MAX_REDIRECTS: Final = 20
"""Lookup redirects followed (the official clients' default)."""
MAX_RECONNECTS: Final = 10
"""Reconnections in a row without a message read in between before the task fails."""
MAX_FRAME_SIZE: Final = 128 * 1024 * 1024 + frames.FRAME_PADDING
"""The largest frame accepted: brokers announce their own limit (5 MiB by default), this
only guards against a garbled size."""
READ_BUFFER: Final = 256 * 1024
"""The socket's read buffer: small frames are read from it, a large stored message mostly
straight into its own bytes object."""

_C = pb.BaseCommand
_RETRIABLE: Final = frozenset({pb.ServiceNotReady, pb.TooManyRequests})
"""Broker answers that mean "not now" (the topic being loaded or moved, lookups throttled)."""
_ARROW_CODECS: Final = {pb.LZ4: "lz4_raw", pb.ZSTD: "zstd", pb.SNAPPY: "snappy"}
"""Pulsar's codecs as pyarrow names them: LZ4 and Snappy are the raw block formats, ZSTD
the frame format."""
_U32: Final = struct.Struct(">I")
_SIZES: Final = struct.Struct(">II")
_MAGIC_U32: Final = struct.Struct(">HI")


class _Lost(Exception):
    """The connection is gone or unusable: connect and subscribe again."""


class _Refused(Exception):
    """A broker (or proxy) answered with a ServerError."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{_error_name(code)}: {message}")
        self.code = code


class _Unsupported(Exception):
    """An entry this loop does not decode: the official client's loop reads on from here."""


def _error_name(code: int) -> str:
    try:
        return pb.ServerError.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ServerError({code})"


def _address(url: str) -> tuple[str, int]:
    """``pulsar://host:port[/]`` -> (host, port)."""
    rest = url.strip()
    host, _, port = rest.removeprefix("pulsar://").rstrip("/").rpartition(":")
    if not rest.startswith("pulsar://") or not host or not port.isdigit():
        # (a lookup answering with a TLS URL only: not retried, TLS is not there yet)
        raise _Refused(pb.UnknownError, f"broker URL {url!r} is not pulsar://host:port")
    return host.strip("[]"), int(port)


class _Link:
    """One blocking connection to a broker, directly or piped by a proxy to the broker
    named in ``proxy_to``: CONNECT on opening, PONG to the broker's PINGs while reading."""

    def __init__(self, address: tuple[str, int], *, proxy_to: str | None, deadline: float) -> None:
        self.address, self.proxy_to = address, proxy_to
        self.where = f"{address[0]}:{address[1]}" + (f" (proxy to {proxy_to})" if proxy_to else "")
        try:
            self.sock = socket.create_connection(address, timeout=_left(deadline))
        except OSError as exc:
            raise _Lost(f"cannot connect to {self.where}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stream = self.sock.makefile("rb", buffering=READ_BUFFER)
        self.timed_out = False  # a read timed out mid-frame: the stream is unusable
        try:
            connect = commands.connect(
                client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION
            )
            if proxy_to:
                connect.connect.proxy_to_broker_url = proxy_to
            self.send(connect)
            frame = self.next(deadline)
            if frame is None:
                raise _Lost(f"{self.where} did not answer CONNECT in time")
            if frame.type == _C.ERROR:
                raise _Refused(frame.command.error.error, frame.command.error.message)
            if frame.type != _C.CONNECTED:
                raise _Refused(
                    pb.UnknownError,
                    f"{self.where} answered CONNECT with {commands.type_name(frame.type)} "
                    "(authentication is not supported by the source)",
                )
        except BaseException:
            self.close()
            raise

    def send(self, cmd: pb.BaseCommand) -> None:
        try:
            self.sock.sendall(frames.encode_command(cmd))
        except OSError as exc:
            raise _Lost(f"sending to {self.where}: {exc}") from None

    def next(self, deadline: float) -> _Frame | None:
        """The next frame, or None when ``deadline`` (``time.monotonic()``) passed first
        (the link is unusable after that: a frame may have been cut)."""
        while True:
            if self.timed_out:
                raise _Lost(f"reading from {self.where}: an earlier read timed out")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                self.sock.settimeout(left)
                frame = self._frame()
            except TimeoutError:
                self.timed_out = True
                return None
            except OSError as exc:
                raise _Lost(f"reading from {self.where}: {exc}") from None
            if frame is None:
                continue  # an unknown command type: skipped, as the clients do
            if frame.type == _C.PING:
                self.send(commands.pong())
                continue
            return frame

    def _exactly(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) < n:
            raise _Lost(f"{self.where} closed the connection")
        return data  # type: ignore[no-any-return]

    def _frame(self) -> _Frame | None:
        """Read one frame (None: a command of a type unknown here, skipped). A MESSAGE's
        stored message (from its metadata size on) is read into a bytes object of its own:
        checksummed and split where it lies (see the module's docstring)."""
        read = self._exactly
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

    def request(self, cmd: pb.BaseCommand, deadline: float) -> pb.BaseCommand:
        """Send ``cmd`` and return the answer carrying its request id."""
        rid = getattr(commands.body(cmd), "request_id")  # noqa: B009 (requests have one)
        self.send(cmd)
        while True:
            frame = self.next(deadline)
            if frame is None:
                raise _Lost(f"{self.where} did not answer {commands.type_name(cmd.type)} in time")
            answer = frame.command
            if (
                frame.type != _C.MESSAGE
                and commands.has_body(answer)
                and getattr(commands.body(answer), "request_id", None) == rid
            ):
                return answer

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


class _Frame(NamedTuple):
    """A frame as the read loop needs it."""

    command: pb.BaseCommand
    type: int
    stored: bytes | None
    """A MESSAGE's stored message: [u32 metadata size][MessageMetadata][payload]."""
    crc: int | None
    """Its crc32c, when the broker sent one."""


def _left(deadline: float) -> float:
    return max(0.001, deadline - time.monotonic())


def read_range(
    service_url: str,
    r: Range,
    *,
    poll_timeout_ms: int,
    fallback: Callable[[Position], Iterator[Any]],
) -> Iterator[Any]:
    """Every message of ``r`` in order, as Arrow record batches of ``rows.SCHEMA``
    (``ARROW_BATCH_ROWS`` rows each, the last one fewer), the same batches as
    ``read.read_range``. ``fallback(after)`` reads the rest of the range after ``after`` with
    the official client, for entries this loop does not decode."""
    after = Position.parse(r.after)
    until = Position.parse(r.until)
    if until <= after:
        return
    reader = _RangeReader(service_url, r.topic, after, until, poll_timeout_ms)
    try:
        yield from reader.batches(fallback)
    finally:
        reader.close()


class _RangeReader:
    """One task's read of one range: the subscription, the position reached, the rows."""

    def __init__(
        self, service_url: str, topic: str, after: Position, until: Position, poll_ms: int
    ) -> None:
        self.service = _address(service_url)
        self.topic = topic
        self.after = after  # the last message appended to the rows (or the range's start)
        self.until = until
        self.until_entry = (until.ledger, until.entry)
        self.poll_ms = poll_ms
        self.parent, self.index = parent_and_index(topic)
        self.subscription = f"reader-{secrets.token_hex(5)}"
        self.consumer_name = f"magnetar-spark-{secrets.token_hex(5)}"
        self._request_ids = itertools.count(1)
        self._consumer_ids = itertools.count(1)
        self.link: _Link | None = None
        self.consumer_id = 0
        self.granted = 0  # messages delivered since the last FLOW
        self._suffixes: dict[int, list[bytes]] = {}
        self._single = pb.SingleMessageMetadata()  # parsed into for every batched message

    # --- connection -----------------------------------------------------------------------

    def _owner(self, deadline: float) -> _Link:
        """A connection to the broker serving the topic (LOOKUP, redirects followed)."""
        link = _Link(self.service, proxy_to=None, deadline=deadline)
        authoritative = False
        try:
            for _ in range(MAX_REDIRECTS + 1):
                ask = commands.lookup(
                    topic=self.topic,
                    request_id=next(self._request_ids),
                    authoritative=authoritative,
                )
                answer = link.request(ask, deadline)
                if answer.type == _C.ERROR:
                    raise _Refused(answer.error.error, answer.error.message)
                if answer.type != _C.LOOKUP_RESPONSE:
                    raise _Lost(f"{link.where} answered LOOKUP with {answer.type}")
                r = answer.lookupTopicResponse
                if r.response == pb.CommandLookupTopicResponse.Failed:
                    raise _Refused(r.error, r.message)
                url = r.brokerServiceUrl
                proxied = r.proxy_through_service_url
                if r.response == pb.CommandLookupTopicResponse.Redirect:
                    following = self._link_to(url, proxied, deadline)
                    link.close()
                    link, authoritative = following, r.authoritative
                    continue
                if not proxied and link.proxy_to is None and _address(url) == link.address:
                    return link  # the broker asked serves the topic itself
                owner = self._link_to(url, proxied, deadline)
                link.close()
                return owner
            raise _Refused(pb.ServiceNotReady, f"more than {MAX_REDIRECTS} lookup redirects")
        except BaseException:
            link.close()
            raise

    def _link_to(self, url: str, proxied: bool, deadline: float) -> _Link:
        if proxied:
            return _Link(self.service, proxy_to=url, deadline=deadline)
        return _Link(_address(url), proxy_to=None, deadline=deadline)

    def _subscribe(self) -> None:
        """Look the topic up and subscribe at the entry of ``after``, retrying what is
        retriable for ``OPERATION_TIMEOUT_S``."""
        self._drop_link()
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        delay = 0.1
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
            if time.monotonic() + delay >= deadline:
                raise MagnetarSourceError(
                    f"reading {self.topic}: could not subscribe within "
                    f"{OPERATION_TIMEOUT_S:.0f} s: {problem}"
                )
            log.info("reading %s: %s; retrying in %.1f s", self.topic, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _subscribe_on(self, link: _Link, deadline: float) -> None:
        a = self.after
        start = EARLIEST if a.ledger < 0 or a.entry < 0 else MessageId(a.ledger, a.entry)
        cid = next(self._consumer_ids)
        answer = link.request(
            commands.subscribe(
                topic=self.topic,
                subscription=self.subscription,
                consumer_id=cid,
                request_id=next(self._request_ids),
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
                commands.close_consumer(
                    consumer_id=self.consumer_id, request_id=next(self._request_ids)
                ),
                time.monotonic() + CLOSE_TIMEOUT_S,
            )
        except (_Lost, _Refused):
            pass  # the broker drops the subscription with the connection anyway
        finally:
            link.close()

    # --- the loop -------------------------------------------------------------------------

    def batches(self, fallback: Callable[[Position], Iterator[Any]]) -> Iterator[Any]:
        schema = arrow_schema()
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
                    frame = link.next(deadline)
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
        cols.start_entry(ledger, entry, md.publish_time, md.producer_name, md.event_time)
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
    out = set()
    for k, word in enumerate(words):
        word &= (1 << 64) - 1
        while word:
            low = word & -word
            out.add(64 * k + low.bit_length() - 1)
            word ^= low
    return frozenset(out)


def _payload(md: pb.MessageMetadata, stored: bytes, start: int, where: str) -> tuple[bytes, int]:
    """An entry's payload, decompressed: the bytes holding it and where it starts there."""
    codec = md.compression
    if codec == pb.NONE:
        return stored, start
    payload = memoryview(stored)[start:]
    size = md.uncompressed_size
    try:
        if codec == pb.ZLIB:
            out = zlib.decompress(payload, bufsize=max(size, 1))
        elif codec in _ARROW_CODECS:
            import pyarrow as pa

            name = _ARROW_CODECS[codec]
            if not pa.Codec.is_available(name):
                raise _Unsupported(f"entry {where} is {name}-compressed; pyarrow lacks {name}")
            out = pa.decompress(payload, decompressed_size=size, codec=name, asbytes=True)
        else:
            raise _Unsupported(f"entry {where} has compression {codec}, unknown here")
    except (zlib.error, ValueError, OSError) as exc:  # (pyarrow's errors are ValueError/OSError)
        raise _Unsupported(f"entry {where} does not decompress: {exc}") from None
    if len(out) != size:
        raise _Unsupported(f"entry {where} decompressed to {len(out)} bytes, not {size}")
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
