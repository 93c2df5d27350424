"""The ledger client's entry envelope: what it stores on bookies around the caller's bytes.

Each stored entry starts with the ledger's cumulative length in bytes up to and including
this entry (u64, big-endian), so a recovering client learns the ledger's length from its
last entry alone, as BookKeeper does from its digest header.
"""

from __future__ import annotations

import struct

from magnetar.common.buffers import Payload

_HEADER = struct.Struct(">Q")
HEADER_SIZE = _HEADER.size


def wrap(cumulative_length: int, payload: Payload) -> bytes:
    """The stored entry: the header, then ``payload`` (one copy of it)."""
    return b"".join((_HEADER.pack(cumulative_length), payload))


VIEW_MIN = 2048
"""From this size on :func:`payload_of` gives a view; a smaller payload is cheaper to copy
than to view (a memoryview object is about 200 bytes and two allocations)."""


def payload_of(stored: bytes) -> Payload:
    """The caller's bytes in a stored entry: from :data:`VIEW_MIN` bytes on a view in place,
    not a copy (a payload kept for long, such as in an entry cache, keeps the stored entry's
    bytes, 8 more); below it, a copy."""
    if len(stored) < HEADER_SIZE:
        raise ValueError(f"stored entry too short ({len(stored)} bytes)")
    if len(stored) - HEADER_SIZE < VIEW_MIN:
        return stored[HEADER_SIZE:]
    return memoryview(stored)[HEADER_SIZE:]


def unwrap(stored: bytes) -> tuple[int, bytes]:
    """(cumulative length, payload) of a stored entry."""
    if len(stored) < HEADER_SIZE:
        raise ValueError(f"stored entry too short ({len(stored)} bytes)")
    (length,) = _HEADER.unpack_from(stored)
    return int(length), stored[HEADER_SIZE:]
