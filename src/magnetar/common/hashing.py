"""Murmur3 x86 32-bit: the hash Pulsar uses for Key_Shared routing (message keys), in C
(mmh3). Namespace bundles hash topic names with CRC32 (broker/ownership.py)."""

from __future__ import annotations

import mmh3


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data`` as an unsigned 32-bit integer (Guava's
    ``murmur3_32_fixed``)."""
    return int(mmh3.hash(data, seed, signed=False))
