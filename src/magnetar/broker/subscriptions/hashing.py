"""Sticky-key hashing for Key_Shared subscriptions, bit-for-bit as Pulsar does it.

Pulsar hashes a message's key with Murmur3 x86 32-bit (seed 0, Guava's ``murmur3_32_fixed``),
keeps the non-negative 31 bits, and maps the result onto 65,536 slots; consumers own ranges
of slots. Using the same function means a key lands on the consumer an operator moving from
Pulsar would expect, and sticky hash ranges configured for Pulsar mean the same thing here.
"""

from __future__ import annotations

import functools
from typing import Final

RANGE_SIZE: Final = 1 << 16
"""Slots of the hash space (Pulsar's DEFAULT_RANGE_SIZE, 2 << 15)."""

_C1: Final = 0xCC9E2D51
_C2: Final = 0x1B873593
_M32: Final = 0xFFFFFFFF


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data`` as an unsigned 32-bit integer."""
    h = seed & _M32
    n = len(data)
    tail = n & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    rest = n & 3
    if rest:
        k = int.from_bytes(data[tail:], "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


@functools.lru_cache(maxsize=1 << 16)
def sticky_key_hash(key: bytes) -> int:
    """Pulsar's ``makeStickyKeyHash``: murmur3_32(key) & Integer.MAX_VALUE."""
    return murmur3_32(key) & 0x7FFFFFFF


def key_slot(key: bytes) -> int:
    """The slot (0..65535) a key routes to."""
    return sticky_key_hash(key) % RANGE_SIZE
