"""A cursor's acknowledgement state, as pure data: no I/O, no event loop.

Why this module exists: the rules of what is acknowledged (mark-delete position, individual
acks beyond it, partially acknowledged batches) are the part of a cursor that must never be
wrong — a mistake skips or redelivers messages — so they live apart from persistence and
reads, and are unit-tested on their own.

* Everything at or before ``mark_delete`` is acknowledged. A mark-delete position may be
  ``(ledger, -1)``: "before the first entry of that ledger".
* Individually acknowledged entries after it are kept as one pyroaring bitmap of entry ids
  per ledger; the mark-delete position absorbs any acknowledged prefix.
* A batch entry whose messages are partly acknowledged keeps the set of acknowledged batch
  indexes and the batch size; once every index is acknowledged the entry itself is.
* The encoded form (:meth:`AckState.encode`) is what a durable cursor writes to its ledger.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap

from magnetar.managed_ledger.api import Position

FORMAT = 1
_WORD = 64
_SIGN = 1 << 63


@dataclass(slots=True)
class BatchAcks:
    size: int
    acked: BitMap

    @property
    def complete(self) -> bool:
        return (
            len(self.acked) >= self.size and self.acked.range_cardinality(0, self.size) >= self.size
        )


def ack_set_words(unacked: Iterable[int], size: int) -> list[int]:
    """Pulsar's ``ack_set``: a Java ``BitSet.toLongArray()`` of the bits set (signed 64-bit
    words, little-endian word order, trailing zero words dropped)."""
    words = [0] * ((size + _WORD - 1) // _WORD)
    for i in unacked:
        words[i // _WORD] |= 1 << (i % _WORD)
    while words and words[-1] == 0:
        words.pop()
    return [w - (1 << 64) if w & _SIGN else w for w in words]


def indexes_of_words(words: Iterable[int]) -> list[int]:
    """The bit indexes set in an ``ack_set`` (inverse of :func:`ack_set_words`)."""
    out: list[int] = []
    for n, w in enumerate(words):
        w &= (1 << 64) - 1
        base = n * _WORD
        while w:
            low = w & -w
            out.append(base + low.bit_length() - 1)
            w ^= low
    return out


class AckState:
    """Mark-delete position + individually deleted entries + partial batches + properties."""

    __slots__ = ("_batches", "_individual", "mark_delete", "properties")

    def __init__(self, mark_delete: Position, properties: Mapping[str, int] | None = None):
        self.mark_delete = mark_delete
        self.properties: dict[str, int] = dict(properties or {})
        self._individual: dict[int, BitMap] = {}
        self._batches: dict[Position, BatchAcks] = {}

    # --- queries --------------------------------------------------------------------------

    def is_deleted(self, p: Position) -> bool:
        if p <= self.mark_delete:
            return True
        bm = self._individual.get(p.ledger_id)
        return bm is not None and p.entry_id in bm

    def deleted_count(self) -> int:
        """Individually deleted entries after the mark-delete position."""
        return sum(len(bm) for bm in self._individual.values())

    def deleted_in(self, ledger_id: int) -> BitMap | None:
        return self._individual.get(ledger_id)

    def ranges(self) -> Iterator[tuple[Position, Position]]:
        """Individually deleted runs as Pulsar's open-closed ranges (before first, last]."""
        for lid in sorted(self._individual):
            start = prev = -2
            for e in self._individual[lid]:
                if e != prev + 1:
                    if start >= 0:
                        yield Position(lid, start - 1), Position(lid, prev)
                    start = e
                prev = e
            if start >= 0:
                yield Position(lid, start - 1), Position(lid, prev)

    def ranges_str(self) -> str:
        """``[(3:1..3:3], (3:5..3:6]]`` as in Pulsar's ``individuallyDeletedMessages``."""
        return "[" + ", ".join(f"({a}..{b}]" for a, b in self.ranges()) + "]"

    def batch(self, p: Position) -> BatchAcks | None:
        return self._batches.get(p)

    def unacked_batch_words(self, p: Position) -> list[int] | None:
        b = self._batches.get(p)
        if b is None or self.is_deleted(p):
            return None
        return ack_set_words((i for i in range(b.size) if i not in b.acked), b.size)

    @property
    def batch_count(self) -> int:
        return len(self._batches)

    # --- updates --------------------------------------------------------------------------

    def set_mark_delete(self, p: Position) -> None:
        """Move the mark-delete position to ``p`` (forward or back) and drop what it covers."""
        self.mark_delete = p
        for lid in [lid for lid in self._individual if lid <= p.ledger_id]:
            if lid < p.ledger_id:
                del self._individual[lid]
            else:
                bm = self._individual[lid]
                bm.remove_range(0, p.entry_id + 1)
                if not bm:
                    del self._individual[lid]
        if self._batches:
            for bp in [bp for bp in self._batches if bp <= p]:
                del self._batches[bp]

    def delete(self, p: Position) -> bool:
        """Acknowledge ``p`` individually; True when it was not acknowledged before."""
        if p <= self.mark_delete:
            return False
        bm = self._individual.get(p.ledger_id)
        if bm is None:
            bm = self._individual[p.ledger_id] = BitMap()
        elif p.entry_id in bm:
            return False
        bm.add(p.entry_id)
        if self._batches:
            self._batches.pop(p, None)
        return True

    def advance(self, next_position: Callable[[Position], Position]) -> bool:
        """Absorb the acknowledged prefix after the mark-delete position into it; True when
        it moved. ``next_position`` crosses ledger boundaries (the managed ledger's)."""
        moved = False
        md = self.mark_delete
        while self._individual:
            nxt = next_position(md)
            bm = self._individual.get(nxt.ledger_id)
            if bm is None or nxt.entry_id not in bm:
                break
            e = nxt.entry_id
            while e + 1 in bm:  # the rest of the run inside this ledger
                e += 1
            md = Position(nxt.ledger_id, e)
            bm.remove_range(0, e + 1)
            if not bm:
                del self._individual[nxt.ledger_id]
            moved = True
        if moved:
            self.set_mark_delete(md)
        return moved

    def batch_ack(self, p: Position, indexes: Iterable[int], size: int) -> bool:
        """Acknowledge batch ``indexes`` of entry ``p``; True when the whole batch is now
        acknowledged (the caller then deletes the entry)."""
        if self.is_deleted(p):
            return False
        b = self._batches.get(p)
        if b is None:
            b = self._batches[p] = BatchAcks(size, BitMap())
        b.size = max(b.size, size)
        b.acked.update(i for i in indexes if 0 <= i < b.size)
        if b.complete:
            del self._batches[p]
            return True
        return False

    def clear(self) -> None:
        self._individual.clear()
        self._batches.clear()

    def drop_ledgers_before(self, ledger_id: int) -> None:
        """Forget individual acks of ledgers that were deleted (all before ``ledger_id``)."""
        for lid in [lid for lid in self._individual if lid < ledger_id]:
            del self._individual[lid]

    # --- encoding -------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "markDelete": [self.mark_delete.ledger_id, self.mark_delete.entry_id],
            "properties": self.properties,
            "individual": [
                [lid, base64.b64encode(bm.serialize()).decode()]
                for lid, bm in sorted(self._individual.items())
            ],
            "batches": [
                [p.ledger_id, p.entry_id, b.size, base64.b64encode(b.acked.serialize()).decode()]
                for p, b in sorted(self._batches.items())
            ],
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> AckState:
        doc = json.loads(bytes(raw))
        md = doc["markDelete"]
        state = cls(Position(int(md[0]), int(md[1])), doc.get("properties") or {})
        for lid, blob in doc.get("individual", []):
            bm = BitMap.deserialize(base64.b64decode(blob))
            if bm:
                state._individual[int(lid)] = bm
        for lid, eid, size, blob in doc.get("batches", []):
            state._batches[Position(int(lid), int(eid))] = BatchAcks(
                int(size), BitMap.deserialize(base64.b64decode(blob))
            )
        return state
