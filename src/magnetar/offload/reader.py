"""Reading an offloaded ledger back: ranged GETs of whole blocks through a bounded cache.

Why: consumers catching up on old data read entry ranges in order, so the unit fetched is a
block (one ranged GET), the next block is fetched ahead while the current one is consumed,
and fetched blocks stay in a least-recently-used cache whose size in bytes is bounded and
shared by every offloaded ledger this broker reads. Every entry is checked against the
index (entry id, length) and its CRC32C before it is returned: a damaged or foreign object
is an error, never wrong data; S3 being down is :class:`S3UnavailableError`, a temporary
error the caller may retry.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

from magnetar.common.buffers import Payload
from magnetar.offload import layout, metrics
from magnetar.offload.errors import NoSuchOffloadedEntryError, OffloadError
from magnetar.offload.s3 import S3Client

log = logging.getLogger(__name__)


class BlockCache:
    """Blocks by key, least recently used evicted first, never more than ``max_bytes``
    (a block larger than that is served but not kept). Concurrent reads of one block share
    one fetch; a fetch finishes even if the reader that started it is cancelled."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._blocks: OrderedDict[Hashable, bytes] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Task[bytes]] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._blocks

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        data = self._blocks.get(key)
        if data is not None:
            self._blocks.move_to_end(key)
            self.hits += 1
            metrics.CACHE_HITS.inc()
            return data
        return await asyncio.shield(self._fetch(key, fetch))

    def prefetch(self, key: Hashable, fetch: Callable[[], Awaitable[bytes]]) -> None:
        """Start fetching ``key`` unless it is cached or on its way (read-ahead)."""
        if key not in self._blocks and self.max_bytes > 0:
            self._fetch(key, fetch)

    def _fetch(self, key: Hashable, fetch: Callable[[], Awaitable[bytes]]) -> asyncio.Task[bytes]:
        task = self._inflight.get(key)
        if task is None:
            self.misses += 1
            metrics.CACHE_MISSES.inc()
            task = asyncio.ensure_future(fetch())
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._done, key))
        return task

    def _done(self, key: Hashable, task: asyncio.Task[bytes]) -> None:
        self._inflight.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # the error went (or goes) to whoever awaited it; nothing is cached
        self.put(key, task.result())

    def put(self, key: Hashable, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        while self._blocks and self.bytes + len(data) > self.max_bytes:
            _, evicted = self._blocks.popitem(last=False)
            self.bytes -= len(evicted)
            self.evictions += 1
        self._blocks[key] = data
        self.bytes += len(data)
        metrics.CACHE_BYTES.set(self.bytes)

    def drop(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._blocks if predicate(k)]:
            self.bytes -= len(self._blocks.pop(key))
        metrics.CACHE_BYTES.set(self.bytes)

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._blocks.clear()
        self.bytes = 0
        metrics.CACHE_BYTES.set(0)


class OffloadedLedgerReader:
    """A closed ledger read from its offloaded objects; ``read`` answers like a ledger
    client's read handle: (entry id, payload) for entries ``first..last``."""

    def __init__(
        self,
        s3: S3Client,
        cache: BlockCache,
        index: layout.OffloadIndex,
        data_key: str,
        *,
        topic: str = "",
    ) -> None:
        self._s3 = s3
        self._cache = cache
        self.index = index
        self.data_key = data_key
        self.topic = topic
        self._labels = metrics.labels_of(topic)

    @property
    def ledger_id(self) -> int:
        return self.index.ledger_id

    @property
    def closed(self) -> bool:
        return True

    @property
    def last_add_confirmed(self) -> int:
        return self.index.last_entry_id

    @property
    def length(self) -> int:
        return self.index.ledger_length

    def _where(self, block: int) -> str:
        return f"s3://{self._s3.bucket}/{self.data_key} block {block}"

    def _fetcher(self, b: int) -> Callable[[], Awaitable[bytes]]:
        block = self.index.blocks[b]

        async def fetch() -> bytes:
            t0 = time.perf_counter()
            data = await self._s3.get(self.data_key, block.offset, block.offset + block.length - 1)
            metrics.READ_OFFLOAD_DATA_LATENCY.labels(*self._labels).observe(
                (time.perf_counter() - t0) * 1e6
            )
            return data

        return fetch

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]:
        if first < 0 or last < first:
            raise ValueError(f"bad range {first}..{last}")
        if last > self.index.last_entry_id:
            raise NoSuchOffloadedEntryError(
                f"ledger {self.ledger_id}: entry {last} is past the last offloaded entry "
                f"{self.index.last_entry_id}"
            )
        out: list[tuple[int, Payload]] = []
        try:
            b = self.index.block_of(first)
            e = first
            while e <= last:
                block = self.index.blocks[b]
                raw = await self._cache.get((self.data_key, b), self._fetcher(b))
                end = min(last, block.last_entry_id)
                out.extend(layout.parse_entries(block, raw, e, end, where=self._where(b)))
                e = end + 1
                b += 1
        except OffloadError:
            metrics.READ_OFFLOAD_ERROR.labels(*self._labels).inc()
            raise
        if b < len(self.index.blocks):  # read-ahead: the block a sequential reader needs next
            self._cache.prefetch((self.data_key, b), self._fetcher(b))
        metrics.read_offloaded(self.topic, sum(len(p) for _, p in out))
        return out
