"""The objects an offloaded ledger becomes, and their binary formats.

Why a module of its own: the offloader writes exactly what the reader parses, and the
format outlives both (objects stay in the bucket for years), so it is defined once, with a
version, and documented in docs/offload.md.

Keys (``P`` is the configured key prefix, ``L`` the ledger id, ``U`` the attempt's UUID)::

    P ledgers/L/U/data     the entries, in blocks (one multipart part per block)
    P ledgers/L/U/index    where each entry is: block, offset inside the block

Every object of ledger ``L`` lives under ``P ledgers/L/``, so the objects of attempts that
were never recorded (a broker killed mid-upload) are found by listing that prefix.

Data object: blocks back to back. A block is a header (magic ``MGOB``, format version,
block length, first entry id, entry count; big-endian) followed by entry records, each an
entry header (entry id u64, payload length u32, CRC32C of the payload u32) and the payload.
A block ends at the first entry boundary at or past the block size, so an entry is never
split and every block but the last is at least S3's 5 MiB minimum part.

Index object: header (magic ``MGOI``, version, ledger id, attempt UUID, entry count,
ledger payload bytes, data object size, block count, properties length), the properties
(JSON: managed ledger name and whatever the caller recorded), one record per block (first
entry id, entry count, offset in the data object, length), then per block the offset of
each entry inside its block (u32), and a CRC32C of everything before it.
"""

from __future__ import annotations

import array
import bisect
import json
import struct
import sys
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from awscrt.checksums import crc32c as _crc32c

from magnetar.offload.errors import OffloadedDataError

VERSION = 1
DATA_MAGIC = b"MGOB"
INDEX_MAGIC = b"MGOI"
BLOCK_HEADER = struct.Struct(">4sHHIQI")  # magic, version, reserved, length, first id, count
ENTRY_HEADER = struct.Struct(">QII")  # entry id, payload length, crc32c(payload)
INDEX_HEADER = struct.Struct(">4sHHQ16sQQQII")
BLOCK_RECORD = struct.Struct(">QIQI")  # first entry id, count, offset, length
CRC = struct.Struct(">I")


def ledger_prefix(key_prefix: str, ledger_id: int) -> str:
    return f"{key_prefix}ledgers/{ledger_id}/"


def data_key(key_prefix: str, ledger_id: int, attempt: str) -> str:
    return f"{ledger_prefix(key_prefix, ledger_id)}{attempt}/data"


def index_key(key_prefix: str, ledger_id: int, attempt: str) -> str:
    return f"{ledger_prefix(key_prefix, ledger_id)}{attempt}/index"


def attempt_of(key_prefix: str, ledger_id: int, key: str) -> str | None:
    """The attempt UUID in an object key under the ledger's prefix (None: not ours)."""
    prefix = ledger_prefix(key_prefix, ledger_id)
    if not key.startswith(prefix):
        return None
    attempt, _, _ = key[len(prefix) :].partition("/")
    return attempt or None


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c(data))


def _u32_array(values: Sequence[int] | array.array[int]) -> array.array[int]:
    a = array.array("I", values)
    assert a.itemsize == 4
    return a


class BlockBuilder:
    """Collects entry records into one block."""

    def __init__(self, first_entry_id: int) -> None:
        self.first_entry_id = first_entry_id
        self.count = 0
        self.offsets = _u32_array(())
        self._buf = bytearray(BLOCK_HEADER.size)

    @property
    def size(self) -> int:
        return len(self._buf)

    def add(self, entry_id: int, payload: bytes | memoryview) -> None:
        if entry_id != self.first_entry_id + self.count:
            raise ValueError(f"entry {entry_id} out of order in block from {self.first_entry_id}")
        self.offsets.append(len(self._buf))
        self._buf += ENTRY_HEADER.pack(entry_id, len(payload), crc32c(payload))
        self._buf += payload
        self.count += 1

    def finish(self) -> bytes:
        BLOCK_HEADER.pack_into(
            self._buf, 0, DATA_MAGIC, VERSION, 0, len(self._buf), self.first_entry_id, self.count
        )
        return bytes(self._buf)


@dataclass(frozen=True, slots=True)
class BlockInfo:
    first_entry_id: int
    count: int
    offset: int
    """Of the block in the data object."""
    length: int
    entry_offsets: array.array[int] = field(repr=False, compare=False)
    """Offset of each entry record inside the block."""

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + self.count - 1

    def entry_span(self, entry_id: int) -> tuple[int, int]:
        """(start, end) of the entry's record inside the block."""
        i = entry_id - self.first_entry_id
        start = self.entry_offsets[i]
        end = self.entry_offsets[i + 1] if i + 1 < self.count else self.length
        return start, end


@dataclass(frozen=True, slots=True)
class OffloadIndex:
    ledger_id: int
    attempt: str
    entries: int
    ledger_length: int
    """Payload bytes of the ledger (what the ledger reports as its length)."""
    data_size: int
    blocks: tuple[BlockInfo, ...]
    properties: Mapping[str, str] = field(default_factory=dict)
    _firsts: list[int] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._firsts.extend(b.first_entry_id for b in self.blocks)

    @property
    def last_entry_id(self) -> int:
        return self.entries - 1

    def block_of(self, entry_id: int) -> int:
        if not 0 <= entry_id < self.entries:
            raise IndexError(entry_id)
        return bisect.bisect_right(self._firsts, entry_id) - 1

    def encode(self) -> bytes:
        props = json.dumps(dict(self.properties), sort_keys=True).encode()
        out = bytearray(
            INDEX_HEADER.pack(
                INDEX_MAGIC,
                VERSION,
                0,
                self.ledger_id,
                uuidlib.UUID(self.attempt).bytes,
                self.entries,
                self.ledger_length,
                self.data_size,
                len(self.blocks),
                len(props),
            )
        )
        out += props
        for b in self.blocks:
            out += BLOCK_RECORD.pack(b.first_entry_id, b.count, b.offset, b.length)
        for b in self.blocks:
            offsets = _u32_array(b.entry_offsets)
            if sys.byteorder == "little":
                offsets.byteswap()
            out += offsets.tobytes()
        out += CRC.pack(crc32c(out))
        return bytes(out)

    @classmethod
    def decode(cls, raw: bytes, *, where: str = "index") -> OffloadIndex:
        def bad(why: str) -> OffloadedDataError:
            return OffloadedDataError(f"{where}: not a valid offload index: {why}")

        if len(raw) < INDEX_HEADER.size + CRC.size:
            raise bad(f"{len(raw)} bytes")
        (stored_crc,) = CRC.unpack_from(raw, len(raw) - CRC.size)
        if crc32c(memoryview(raw)[: len(raw) - CRC.size]) != stored_crc:
            raise bad("checksum mismatch")
        (magic, version, _, ledger_id, attempt, entries, length, data_size, nblocks, plen) = (
            INDEX_HEADER.unpack_from(raw, 0)
        )
        if magic != INDEX_MAGIC:
            raise bad(f"magic {magic!r}")
        if version != VERSION:
            raise bad(f"format version {version} (this reader knows {VERSION})")
        pos = INDEX_HEADER.size
        try:
            props = json.loads(raw[pos : pos + plen])
        except ValueError as err:
            raise bad(f"properties: {err}") from err
        pos += plen
        records = []
        for _ in range(nblocks):
            records.append(BLOCK_RECORD.unpack_from(raw, pos))
            pos += BLOCK_RECORD.size
        blocks = []
        expected_first = 0
        expected_offset = 0
        for first, count, offset, blen in records:
            if first != expected_first or offset != expected_offset or count < 1:
                raise bad(f"block at entry {first} does not follow the previous one")
            offsets = array.array("I")
            offsets.frombytes(raw[pos : pos + 4 * count])
            if sys.byteorder == "little":
                offsets.byteswap()
            pos += 4 * count
            blocks.append(BlockInfo(first, count, offset, blen, offsets))
            expected_first += count
            expected_offset += blen
        if pos != len(raw) - CRC.size:
            raise bad("trailing bytes")
        if expected_first != entries or expected_offset != data_size:
            raise bad("blocks do not add up to the entry count and data size")
        return cls(
            ledger_id=ledger_id,
            attempt=str(uuidlib.UUID(bytes=attempt)),
            entries=entries,
            ledger_length=length,
            data_size=data_size,
            blocks=tuple(blocks),
            properties={str(k): str(v) for k, v in props.items()},
        )


def parse_entries(
    block: BlockInfo, raw: bytes, first: int, last: int, *, where: str
) -> list[tuple[int, bytes]]:
    """Entries ``first..last`` (inside ``block``) from the block's bytes, each checked
    against its entry id and CRC32C."""
    if len(raw) != block.length:
        raise OffloadedDataError(f"{where}: block has {len(raw)} bytes, index says {block.length}")
    magic, version, _, length, bfirst, count = BLOCK_HEADER.unpack_from(raw, 0)
    if (magic, version, length, bfirst, count) != (
        DATA_MAGIC,
        VERSION,
        block.length,
        block.first_entry_id,
        block.count,
    ):
        raise OffloadedDataError(
            f"{where}: block header {magic!r} v{version} entries {bfirst}+{count} "
            f"does not match the index (entries {block.first_entry_id}+{block.count})"
        )
    view = memoryview(raw)
    out: list[tuple[int, bytes]] = []
    for eid in range(first, last + 1):
        start, end = block.entry_span(eid)
        got_id, size, crc = ENTRY_HEADER.unpack_from(raw, start)
        body = view[start + ENTRY_HEADER.size : end]
        if got_id != eid or size != len(body):
            raise OffloadedDataError(
                f"{where}: entry record at {start} is entry {got_id} of {size} bytes, "
                f"expected entry {eid} of {len(body)}"
            )
        payload = bytes(body)
        if crc32c(payload) != crc:
            raise OffloadedDataError(f"{where}: entry {eid} fails its CRC32C check")
        out.append((eid, payload))
    return out
