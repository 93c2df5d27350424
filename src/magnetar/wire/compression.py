"""Pulsar's payload codecs, both ways, as the official clients write them: ZLIB (a zlib
stream), LZ4 (a raw LZ4 block, no size prefix: the size is the metadata's
``uncompressed_size``), ZSTD (a Zstandard frame) and SNAPPY (raw Snappy, no framing).

Why this module exists: the broker looks inside compressed batches where semantics need it
(compaction keeps some messages of a batch and writes the batch back with its codec), and
the readers that split batches decompress them. ZLIB comes with Python; the others come
from ``cramjam`` (one maintained package of the three codecs' reference libraries).

Nothing here does I/O.
"""

from __future__ import annotations

import zlib

import cramjam

from magnetar.wire import pb
from magnetar.wire.errors import UnsupportedCompressionError
from magnetar.wire.frames import Buffer


class DecompressError(ValueError):
    """A payload that does not decompress with its codec."""


def decompress(codec: int, payload: Buffer, uncompressed_size: int) -> bytes:
    """``payload`` decompressed with ``codec`` (not NONE); its length is not checked here.
    UnsupportedCompressionError for a codec Pulsar does not have, DecompressError for a
    payload that does not decompress."""
    try:
        if codec == pb.ZLIB:
            return zlib.decompress(payload, bufsize=max(uncompressed_size, 1))
        if codec == pb.LZ4:
            return bytes(cramjam.lz4.decompress_block(payload, output_len=uncompressed_size))
        if codec == pb.ZSTD:
            return bytes(cramjam.zstd.decompress(payload, output_len=uncompressed_size))
        if codec == pb.SNAPPY:
            return bytes(cramjam.snappy.decompress_raw(payload))
    except (zlib.error, cramjam.DecompressionError, ValueError, OSError) as exc:
        raise DecompressError(str(exc)) from None
    raise UnsupportedCompressionError(f"compression {codec} is not one of Pulsar's codecs")


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` (NONE: unchanged), as a client would have sent it."""
    if codec == pb.NONE:
        return data
    if codec == pb.ZLIB:
        return zlib.compress(data)
    if codec == pb.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if codec == pb.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == pb.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise UnsupportedCompressionError(f"compression {codec} is not one of Pulsar's codecs")
