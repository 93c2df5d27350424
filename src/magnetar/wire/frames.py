"""Pulsar framing: an incremental decoder and the frame encoders.

Why a module of its own: this is the broker's hottest path. Every byte a client sends and
every message dispatched goes through here, so the decoder works on memoryviews with
``struct.unpack_from`` (no per-byte Python loops, no re-slicing of a growing buffer) and
hands out read-only views of metadata and payload instead of copies; the stored form of a
message (``Frame.headers_and_payload``) passes from SEND to storage to MESSAGE untouched.

Wire layout (all integers big-endian)::

    [u32 totalSize][u32 commandSize][BaseCommand]                          simple command
    ... then, for SEND and MESSAGE only:
    [u16 0x0e02][u32 size][BrokerEntryMetadata]                            optional
    [u16 0x0e01][u32 crc32c][u32 metadataSize][MessageMetadata][payload]   crc32c optional

totalSize counts everything after itself; the crc32c covers metadataSize..end.

Bad input raises ``errors.WireError`` subclasses only. A checksum mismatch is *not* raised:
the frame comes back with ``checksum == Checksum.MISMATCH`` so the connection answers
SEND_ERROR(ChecksumError) for that message alone and keeps the connection.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from typing import Any, Final, TypeAlias

from awscrt.checksums import crc32c as _crc32c
from google.protobuf.message import DecodeError, Message

from magnetar.wire import commands, ids, pb
from magnetar.wire.errors import (
    CorruptFrameError,
    CorruptMetadataError,
    FrameTooLargeError,
    UnknownCommandError,
    WireError,
)

Buffer: TypeAlias = bytes | bytearray | memoryview

#: Largest message a client may publish unless configured otherwise (announced in CONNECTED).
DEFAULT_MAX_MESSAGE_SIZE: Final = 5 * 1024 * 1024
#: Allowance for command and metadata on top of the message size, as the reference broker.
FRAME_PADDING: Final = 10 * 1024
#: Default limit on totalSize.
DEFAULT_MAX_FRAME_SIZE: Final = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

MAGIC_CRC32C: Final = 0x0E01
MAGIC_BROKER_ENTRY_METADATA: Final = 0x0E02

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_SIZES: Final = struct.Struct(">II")
_MAGIC_U32: Final = struct.Struct(">HI")

_FIELD_BY_TYPE: Final = commands.FIELD_BY_TYPE
_PAYLOAD_TYPES: Final = commands.PAYLOAD_TYPES
_EMPTY_BODY_TYPES: Final = commands.EMPTY_BODY_TYPES
_HAS_FIELD: Final[Any] = pb.BaseCommand.HasField  # called with a computed field name
_EMPTY: Final = memoryview(b"")


def crc32c(data: Buffer, value: int = 0) -> int:
    """crc32c (Castagnoli), hardware accelerated, of any buffer in place (no copy of a view),
    continuing from ``value``."""
    return int(_crc32c(data, value))


class Checksum(enum.Enum):
    """What the decoder learned about a message's crc32c."""

    ABSENT = "absent"  # the sender put no 0x0e01 section (allowed; nothing to verify)
    VALID = "valid"
    MISMATCH = "mismatch"  # answer SEND_ERROR(ChecksumError) for this message only
    UNVERIFIED = "unverified"  # present, verification switched off in the decoder


class Frame:
    """One decoded frame. Views point into the received bytes and are read-only.

    A view keeps the whole chunk it came from alive (up to the socket read size): code that
    holds payloads for long (an entry cache) should keep ``bytes(view)`` rather than the view.

    A plain class, not a dataclass: in the compiled build (docs/architecture.md, "Compiled hot
    paths") a dataclass's generated ``__init__`` stays interpreted, and every frame makes one.
    """

    __slots__ = ("broker_entry_metadata", "checksum", "command", "headers_and_payload",
                 "metadata", "payload", "type")  # fmt: skip

    def __init__(
        self,
        command: pb.BaseCommand,
        type: commands.CommandType,
        headers_and_payload: memoryview | None = None,
        broker_entry_metadata: memoryview | None = None,
        metadata: memoryview | None = None,
        payload: memoryview | None = None,
        checksum: Checksum = Checksum.ABSENT,
    ) -> None:
        self.command = command
        self.type = type
        self.headers_and_payload = headers_and_payload
        """SEND/MESSAGE: the stored form of the message, from the 0x0e01 magic (or from
        metadataSize when no checksum was sent) to the end -- broker entry metadata excluded."""
        self.broker_entry_metadata = broker_entry_metadata
        """Raw BrokerEntryMetadata when the frame carried a 0x0e02 section."""
        self.metadata = metadata
        """Raw MessageMetadata (None when a checksum mismatch left the layout unreadable)."""
        self.payload = payload
        self.checksum = checksum

    def __repr__(self) -> str:
        return f"Frame({self.type}, checksum={self.checksum.value})"

    @property
    def body(self) -> Message:
        """The sub-command designated by the type (e.g. ``command.send`` for SEND)."""
        return getattr(self.command, _FIELD_BY_TYPE[self.type])  # type: ignore[no-any-return]

    def message_metadata(self) -> pb.MessageMetadata:
        """Parse the MessageMetadata (done on demand: the hot path rarely needs it)."""
        if self.metadata is None:
            raise CorruptMetadataError("frame carries no readable message metadata")
        return parse_message_metadata(self.metadata)

    def parsed_broker_entry_metadata(self) -> pb.BrokerEntryMetadata | None:
        if self.broker_entry_metadata is None:
            return None
        bem = pb.BrokerEntryMetadata()
        try:
            bem.ParseFromString(self.broker_entry_metadata)  # type: ignore[arg-type]  # upb takes any buffer
        except DecodeError as exc:
            raise CorruptMetadataError(f"bad broker entry metadata: {exc}") from None
        return bem


def parse_message_metadata(data: Buffer) -> pb.MessageMetadata:
    """Decode a MessageMetadata, raising CorruptMetadataError on garbage."""
    md = pb.MessageMetadata()
    try:
        md.ParseFromString(data)  # type: ignore[arg-type]  # upb takes any buffer
    except DecodeError as exc:
        raise CorruptMetadataError(f"bad message metadata: {exc}") from None
    return md


class FrameDecoder:
    """Turns a byte stream, in chunks of any size, into Frames.

    ``for frame in decoder.feed(chunk): ...`` -- frames come out as soon as they are
    complete. Frames lying whole inside a ``bytes`` chunk are views of that chunk (no copy);
    a frame split across chunks is assembled once into a buffer of its exact size, allocated
    only after its size passed the limit check.

    Errors are raised in stream order, after every earlier frame was yielded. A fatal error
    (``exc.fatal``: the stream cannot be re-synchronised) is raised again by every later
    call. After a non-fatal one (unknown command type) the offending frame is skipped:
    call ``frames()`` to carry on with the rest of the data already fed.
    """

    __slots__ = ("_data", "_error", "_filled", "_frame", "_head", "_max", "_pos", "_verify")

    def __init__(
        self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, verify_checksum: bool = True
    ) -> None:
        self._max = max_frame_size
        self._verify = verify_checksum
        self._data: memoryview = _EMPTY  # current input chunk
        self._pos = 0  # next unread byte of _data
        self._head = bytearray()  # first bytes (< 4) of a frame split across chunks
        self._frame: bytearray | None = None  # frame being assembled across chunks
        self._filled = 0  # bytes of _frame received so far
        self._error: WireError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (for flow-control accounting)."""
        partial = self._filled if self._frame is not None else len(self._head)
        return partial + len(self._data) - self._pos

    def feed(self, data: Buffer) -> Iterator[Frame]:
        """Add received bytes and iterate over the frames now complete.

        ``bytes`` (what asyncio's ``data_received`` passes) is used in place; other buffers
        are copied once, since their owner may reuse them.
        """
        self.push(data)
        return self.frames()

    def push(self, data: Buffer) -> None:
        """Add received bytes without decoding yet."""
        if self._error is not None:
            raise self._error
        if not data:
            return
        if type(data) is not bytes:
            data = bytes(data)
        if self._pos < len(self._data):  # the previous chunk was not drained: keep its rest
            data = bytes(self._data[self._pos :]) + data
        self._data = memoryview(data)
        self._pos = 0

    def frames(self) -> Iterator[Frame]:
        """Iterate over complete frames in the data fed so far."""
        next_frame = self.next_frame
        while (frame := next_frame()) is not None:
            yield frame

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more data is fed."""
        if self._error is not None:
            raise self._error
        try:
            if self._frame is None and not self._head:
                return self._next_in_chunk()
            return self._next_assembled()
        except WireError as exc:
            if exc.fatal:
                self._error = exc
                self._data = _EMPTY
                self._pos = 0
            raise

    # -- framing ---------------------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        if size > self._max:
            raise FrameTooLargeError(size, self._max)
        if size < 4:
            raise CorruptFrameError(f"frame size {size} is too small to hold a command size")

    def _next_in_chunk(self) -> Frame | None:
        data = self._data
        pos = self._pos
        avail = len(data) - pos
        if avail >= 4:
            (size,) = _U32.unpack_from(data, pos)
            self._check_size(size)
            end = pos + 4 + size
            if end <= len(data):
                self._pos = end
                return self._parse(data, pos, end)
            buf = bytearray(4 + size)
            buf[:avail] = data[pos:]
            self._frame = buf
            self._filled = avail
        elif avail:
            self._head += data[pos:]
        self._data = _EMPTY
        self._pos = 0
        return None

    def _next_assembled(self) -> Frame | None:
        data = self._data
        pos = self._pos
        end = len(data)
        buf = self._frame
        if buf is None:
            head = self._head
            take = min(4 - len(head), end - pos)
            head += data[pos : pos + take]
            pos += take
            self._pos = pos
            if len(head) < 4:
                return None
            (size,) = _U32.unpack_from(head)
            self._check_size(size)
            buf = bytearray(4 + size)
            buf[:4] = head
            self._head = bytearray()
            self._frame = buf
            self._filled = 4
        filled = self._filled
        take = min(len(buf) - filled, end - pos)
        buf[filled : filled + take] = data[pos : pos + take]
        self._filled = filled = filled + take
        self._pos = pos + take
        if filled < len(buf):
            return None
        self._frame = None
        return self._parse(memoryview(buf).toreadonly(), 0, len(buf))

    # -- frame contents ----------------------------------------------------------------------

    def _parse(self, mv: memoryview, start: int, end: int) -> Frame:
        (cmd_size,) = _U32.unpack_from(mv, start + 4)
        cmd_start = start + 8
        cmd_end = cmd_start + cmd_size
        if cmd_end > end:
            raise CorruptFrameError(
                f"command size {cmd_size} exceeds the frame ({end - start - 8} bytes left)"
            )
        cmd = pb.BaseCommand()
        try:
            cmd.ParseFromString(mv[cmd_start:cmd_end])  # type: ignore[arg-type]  # upb takes any buffer
        except DecodeError as exc:
            raise CorruptFrameError(f"undecodable command: {exc}") from None
        if not cmd.HasField("type"):
            raise _missing_type(mv[cmd_start:cmd_end])
        ctype = cmd.type
        if not _HAS_FIELD(cmd, _FIELD_BY_TYPE[ctype]) and ctype not in _EMPTY_BODY_TYPES:
            raise CorruptFrameError(f"{commands.type_name(ctype)} command without its body")
        if ctype in _PAYLOAD_TYPES:
            if cmd_end == end:
                raise CorruptFrameError(f"{commands.type_name(ctype)} without metadata/payload")
            return self._parse_payload(cmd, ctype, mv, cmd_end, end)
        if cmd_end != end:
            raise CorruptFrameError(
                f"{end - cmd_end} unexpected bytes after a {commands.type_name(ctype)} command"
            )
        return Frame(cmd, ctype)

    def _parse_payload(
        self, cmd: pb.BaseCommand, ctype: commands.CommandType, mv: memoryview, p: int, end: int
    ) -> Frame:
        bem: memoryview | None = None
        magic = _U16.unpack_from(mv, p)[0] if end - p >= 2 else 0
        if magic == MAGIC_BROKER_ENTRY_METADATA:
            if end - p < 6:
                raise CorruptFrameError("truncated broker entry metadata header")
            (bem_size,) = _U32.unpack_from(mv, p + 2)
            bem_end = p + 6 + bem_size
            if bem_end > end:
                raise CorruptFrameError(f"broker entry metadata size {bem_size} exceeds the frame")
            bem = mv[p + 6 : bem_end]
            p = bem_end
            magic = _U16.unpack_from(mv, p)[0] if end - p >= 2 else 0
        hp_start = p
        checksum = Checksum.ABSENT
        if magic == MAGIC_CRC32C:
            if end - p < 6:
                raise CorruptFrameError("truncated checksum header")
            (crc,) = _U32.unpack_from(mv, p + 2)
            p += 6
            if not self._verify:
                checksum = Checksum.UNVERIFIED
            elif crc32c(mv[p:end]) == crc:
                checksum = Checksum.VALID
            else:
                checksum = Checksum.MISMATCH
        hp = mv[hp_start:end]
        if end - p >= 4:
            (meta_size,) = _U32.unpack_from(mv, p)
            meta_end = p + 4 + meta_size
            if meta_end <= end:
                return Frame(cmd, ctype, hp, bem, mv[p + 4 : meta_end], mv[meta_end:end], checksum)
        if checksum is Checksum.MISMATCH:
            # the corruption the checksum caught may be in the sizes: report the mismatch
            return Frame(cmd, ctype, hp, bem, None, None, checksum)
        raise CorruptFrameError("metadata size missing or exceeding the frame")


def _missing_type(raw: memoryview) -> WireError:
    """Tell an unknown command type (framing intact) from a command without any type."""
    if len(raw) >= 2 and raw[0] == 0x08:  # field 1, varint: the type the peer meant
        value = 0
        for i in range(1, min(len(raw), 11)):
            byte = raw[i]
            value |= (byte & 0x7F) << (7 * (i - 1))
            if not byte & 0x80:
                return UnknownCommandError(value)
    return CorruptFrameError("command without a type")


# -- encoding ------------------------------------------------------------------------------


_VARINT_1: Final = tuple(bytes((i,)) for i in range(128))


def _varint(value: int) -> bytes:
    """``value`` (unsigned) as a protobuf base-128 varint."""
    if value < 0x80:
        return _VARINT_1[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_RECEIPT_HEAD: Final = bytes((0x08, pb.BaseCommand.SEND_RECEIPT, 0x3A))
"""BaseCommand.type = SEND_RECEIPT, then field 7 (send_receipt), length-delimited."""


def encode_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int
) -> bytes:
    """The SEND_RECEIPT frame of ``commands.send_receipt`` (message id without partition or
    batch index, ``highest_sequence_id`` set), encoded directly: the same bytes as the
    protobuf encoder gives (tests/unit/wire/test_frames.py compares them), for about half
    its cost, once per stored message on the publish path."""
    seq = _varint(sequence_id)
    mid = b"".join(
        (b"\x08", _varint(ids.to_unsigned(ledger_id)), b"\x10", _varint(ids.to_unsigned(entry_id)))
    )
    body = b"".join(
        (
            b"\x08",
            _varint(producer_id),
            b"\x10",
            seq,
            b"\x1a",
            _VARINT_1[len(mid)],  # at most 22 bytes
            mid,
            b"\x20",
            seq if highest_sequence_id == sequence_id else _varint(highest_sequence_id),
        )
    )
    size = _varint(len(body))
    n = 3 + len(size) + len(body)
    return b"".join((_SIZES.pack(n + 4, n), _RECEIPT_HEAD, size, body))


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """A simple command frame. Raises EncodeError if a field the clients require is unset."""
    body = cmd.SerializeToString()
    n = len(body)
    return _SIZES.pack(n + 4, n) + body


def encode_headers_and_payload(
    metadata: pb.MessageMetadata | bytes, payload: Buffer, *, checksum: bool = True
) -> bytes:
    """The stored form of a message: ``[0x0e01][crc32c][metadataSize][metadata][payload]``
    (without the checksum section when ``checksum`` is False)."""
    meta = metadata if type(metadata) is bytes else metadata.SerializeToString()  # type: ignore[union-attr]
    head = _U32.pack(len(meta)) + meta
    if not checksum:
        return b"".join((head, payload))
    crc = _crc32c(payload, _crc32c(head))
    return b"".join((_MAGIC_U32.pack(MAGIC_CRC32C, crc), head, payload))


def encode_payload_command_parts(
    cmd: pb.BaseCommand,
    headers_and_payload: Buffer,
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None,
) -> Sequence[Buffer]:
    """A SEND/MESSAGE frame as buffers for ``transport.writelines`` (the stored
    ``headers_and_payload`` is not copied)."""
    body = cmd.SerializeToString()
    n = len(body)
    if broker_entry_metadata is None:
        total = 4 + n + len(headers_and_payload)
        return (_SIZES.pack(total, n) + body, headers_and_payload)
    bem = (
        broker_entry_metadata
        if type(broker_entry_metadata) is bytes
        else broker_entry_metadata.SerializeToString()  # type: ignore[union-attr]
    )
    total = 4 + n + 6 + len(bem) + len(headers_and_payload)
    head = b"".join(
        (_SIZES.pack(total, n), body, _MAGIC_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(bem)), bem)
    )
    return (head, headers_and_payload)


def encode_payload_command(
    cmd: pb.BaseCommand,
    headers_and_payload: Buffer,
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None,
) -> bytes:
    """A SEND/MESSAGE frame as one bytes object (copies the payload once)."""
    return b"".join(
        encode_payload_command_parts(
            cmd, headers_and_payload, broker_entry_metadata=broker_entry_metadata
        )
    )


def encode_message(
    cmd: pb.BaseCommand,
    metadata: pb.MessageMetadata | bytes,
    payload: Buffer,
    *,
    checksum: bool = True,
    broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None,
) -> bytes:
    """Convenience for clients and tests: a SEND/MESSAGE frame from metadata and payload."""
    return encode_payload_command(
        cmd,
        encode_headers_and_payload(metadata, payload, checksum=checksum),
        broker_entry_metadata=broker_entry_metadata,
    )


def split_headers_and_payload(data: Buffer) -> tuple[Checksum, memoryview, memoryview]:
    """Split a stored message (``Frame.headers_and_payload``) into (checksum status,
    metadata, payload), verifying the crc32c when present. Raises CorruptMetadataError when
    the layout is broken and the checksum does not explain it."""
    mv = memoryview(data).toreadonly() if not isinstance(data, memoryview) else data
    end = len(mv)
    p = 0
    checksum = Checksum.ABSENT
    if end >= 6 and _U16.unpack_from(mv, 0)[0] == MAGIC_CRC32C:
        (crc,) = _U32.unpack_from(mv, 2)
        p = 6
        checksum = Checksum.VALID if crc32c(mv[p:]) == crc else Checksum.MISMATCH
    if end - p >= 4:
        (meta_size,) = _U32.unpack_from(mv, p)
        meta_end = p + 4 + meta_size
        if meta_end <= end:
            return checksum, mv[p + 4 : meta_end], mv[meta_end:]
    raise CorruptMetadataError(
        "stored message has a bad layout"
        + (" (checksum mismatch)" if checksum is Checksum.MISMATCH else "")
    )


#: Pre-encoded keep-alive frames.
PING_FRAME: Final = encode_command(commands.ping())
PONG_FRAME: Final = encode_command(commands.pong())
