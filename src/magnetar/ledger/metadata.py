"""Ledger metadata: quorum sizes, ensembles per fragment, state and end, as stored in the
metadata store (one JSON record per ledger, updated only by compare-and-set).

Why: every participant — the writer, a recovering owner, readers, the offloader — decides
where an entry lives and whether the ledger is closed from this one record.
"""

from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass, field, replace
from typing import Any

LedgerId = int
BookieId = str


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries from ``first_entry_id`` on (until the next fragment) live on ``ensemble``."""

    first_entry_id: int
    ensemble: tuple[BookieId, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: LedgerId
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[Fragment, ...]
    password: bytes
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    """Valid once CLOSED: the last entry of the ledger (-1 when empty)."""
    length: int = 0
    """Bytes of entry data, valid once CLOSED."""
    ctime_ms: int = 0
    custom: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        if not self.fragments:
            raise ValueError("a ledger needs at least one fragment")
        for f in self.fragments:
            if len(f.ensemble) != self.ensemble_size:
                raise ValueError(f"fragment {f.first_entry_id} has {len(f.ensemble)} bookies")

    @property
    def closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_fragment(self) -> Fragment:
        return self.fragments[-1]

    def fragment_of(self, entry_id: int) -> Fragment:
        found = self.fragments[0]
        for f in self.fragments:
            if f.first_entry_id > entry_id:
                break
            found = f
        return found

    def write_set_indices(self, entry_id: int) -> tuple[int, ...]:
        """Ensemble positions storing ``entry_id``: Wq consecutive ones, striped round-robin."""
        return _write_sets(self.ensemble_size, self.write_quorum)[entry_id % self.ensemble_size]

    def write_set(self, entry_id: int) -> list[BookieId]:
        ensemble = self.fragment_of(entry_id).ensemble
        return [ensemble[i] for i in self.write_set_indices(entry_id)]

    def with_fragment(self, first_entry_id: int, ensemble: tuple[BookieId, ...]) -> LedgerMetadata:
        """A copy with a new last fragment (ensemble change) starting at ``first_entry_id``."""
        kept = tuple(f for f in self.fragments if f.first_entry_id < first_entry_id)
        return replace(self, fragments=(*kept, Fragment(first_entry_id, ensemble)))

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "ledgerId": self.ledger_id,
            "ensembleSize": self.ensemble_size,
            "writeQuorumSize": self.write_quorum,
            "ackQuorumSize": self.ack_quorum,
            "state": self.state.value,
            "lastEntryId": self.last_entry_id,
            "length": self.length,
            "ctime": self.ctime_ms,
            "password": self.password.hex(),
            "ensembles": [[f.first_entry_id, list(f.ensemble)] for f in self.fragments],
            "customMetadata": self.custom,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerMetadata:
        doc = json.loads(raw)
        return cls(
            ledger_id=int(doc["ledgerId"]),
            ensemble_size=int(doc["ensembleSize"]),
            write_quorum=int(doc["writeQuorumSize"]),
            ack_quorum=int(doc["ackQuorumSize"]),
            state=LedgerState(doc["state"]),
            last_entry_id=int(doc["lastEntryId"]),
            length=int(doc["length"]),
            ctime_ms=int(doc.get("ctime", 0)),
            password=bytes.fromhex(doc["password"]),
            fragments=tuple(Fragment(int(first), tuple(ens)) for first, ens in doc["ensembles"]),
            custom=dict(doc.get("customMetadata", {})),
        )


@functools.cache
def _write_sets(ensemble: int, write: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple((s + i) % ensemble for i in range(write)) for s in range(ensemble))


def check_quorums(ensemble: int, write: int, ack: int) -> None:
    if not 1 <= ack <= write <= ensemble:
        raise ValueError(
            f"quorums must satisfy 1 <= Aq <= Wq <= E, got E={ensemble} Wq={write} Aq={ack}"
        )
