"""Sticky-key hashing for Key_Shared subscriptions, bit-for-bit as Pulsar does it.

Pulsar hashes a message's key with Murmur3 x86 32-bit (seed 0, Guava's ``murmur3_32_fixed``),
keeps the non-negative 31 bits, and maps the result onto 65,536 slots; consumers own ranges
of slots. Using the same function means a key lands on the consumer an operator moving from
Pulsar would expect, and sticky hash ranges configured for Pulsar mean the same thing here.
"""

from __future__ import annotations

import functools
from typing import Final

from magnetar.common.hashing import murmur3_32

RANGE_SIZE: Final = 1 << 16
"""Slots of the hash space (Pulsar's DEFAULT_RANGE_SIZE, 2 << 15)."""


@functools.lru_cache(maxsize=1 << 16)
def sticky_key_hash(key: bytes) -> int:
    """Pulsar's ``makeStickyKeyHash``: murmur3_32(key) & Integer.MAX_VALUE."""
    return murmur3_32(key) & 0x7FFFFFFF


def key_slot(key: bytes) -> int:
    """The slot (0..65535) a key routes to."""
    return sticky_key_hash(key) % RANGE_SIZE
