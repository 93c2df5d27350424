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


def payload_of(stored: bytes) -> memoryview:
    """The caller's bytes in a stored entry, in place: a view, not a copy (a payload kept
    for long, such as in an entry cache, keeps the stored entry's bytes, 8 more)."""
    if len(stored) < HEADER_SIZE:
        raise ValueError(f"stored entry too short ({len(stored)} bytes)")
    return memoryview(stored)[HEADER_SIZE:]


def unwrap(stored: bytes) -> tuple[int, bytes]:
    """(cumulative length, payload) of a stored entry."""
    if len(stored) < HEADER_SIZE:
        raise ValueError(f"stored entry too short ({len(stored)} bytes)")
    (length,) = _HEADER.unpack_from(stored)
    return int(length), stored[HEADER_SIZE:]
