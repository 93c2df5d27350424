"""Ensemble placement: which bookies a new ledger (or a replacement) goes to.

Rack-aware: bookies are interleaved across racks so that every write set — Wq consecutive
ensemble positions, striped round-robin — spans as many racks as it can. Without rack
information every bookie is its own rack and placement is a random choice. Pluggable: the
ledger client takes any :class:`PlacementPolicy`.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.metadata import BookieId

DEFAULT_RACK = "/default-rack"


@dataclass(frozen=True, slots=True)
class BookieInfo:
    bookie_id: BookieId
    rack: str = DEFAULT_RACK
    read_only: bool = False


class PlacementPolicy(Protocol):
    def new_ensemble(
        self, bookies: Sequence[BookieInfo], size: int, *, exclude: Collection[BookieId] = ()
    ) -> tuple[BookieId, ...]: ...

    def replace(
        self,
        bookies: Sequence[BookieInfo],
        ensemble: Sequence[BookieId],
        index: int,
        *,
        exclude: Collection[BookieId] = (),
    ) -> BookieId: ...


class RackAwarePlacement:
    """Spread ensembles across racks; prefer a replacement in a rack the rest of the
    ensemble lacks, else one its neighbours lack.

    ``min_racks_per_write_quorum`` with ``enforce_min_racks`` (BookKeeper's
    ``minNumRacksPerWriteQuorum`` / ``enforceMinNumRacksPerWriteQuorum``): an ensemble or a
    replacement whose write sets would span fewer racks than that is refused with
    NotEnoughBookiesError instead of being placed on fewer racks.
    """

    def __init__(
        self,
        rng: random.Random | None = None,
        *,
        min_racks_per_write_quorum: int = 1,
        enforce_min_racks: bool = False,
        write_quorum: int | None = None,
    ) -> None:
        self._rng = rng or random.Random()  # noqa: S311 - placement, not security
        self.min_racks_per_write_quorum = min_racks_per_write_quorum
        self.enforce_min_racks = enforce_min_racks
        self.write_quorum = write_quorum
        """Wq the rack rule is checked against (None: every pair of neighbours)."""

    def _check_racks(self, bookies: Sequence[BookieInfo], ensemble: Sequence[BookieId]) -> None:
        if not self.enforce_min_racks or self.min_racks_per_write_quorum <= 1:
            return
        rack_of = {b.bookie_id: b.rack for b in bookies}
        n = len(ensemble)
        wq = min(self.write_quorum or 2, n)
        for start in range(n):
            racks = {rack_of.get(ensemble[(start + i) % n], DEFAULT_RACK) for i in range(wq)}
            if len(racks) < min(self.min_racks_per_write_quorum, wq):
                raise NotEnoughBookiesError(
                    f"write set starting at position {start} of {list(ensemble)} spans "
                    f"{len(racks)} rack(s), fewer than minNumRacksPerWriteQuorum="
                    f"{self.min_racks_per_write_quorum} (enforced)"
                )

    def _writable(
        self, bookies: Sequence[BookieInfo], exclude: Collection[BookieId]
    ) -> list[BookieInfo]:
        return [b for b in bookies if not b.read_only and b.bookie_id not in exclude]

    def new_ensemble(
        self, bookies: Sequence[BookieInfo], size: int, *, exclude: Collection[BookieId] = ()
    ) -> tuple[BookieId, ...]:
        candidates = self._writable(bookies, exclude)
        if len(candidates) < size:
            raise NotEnoughBookiesError(
                f"need {size} writable bookies, {len(candidates)} available"
            )
        racks: dict[str, list[BookieInfo]] = {}
        for b in candidates:
            racks.setdefault(b.rack, []).append(b)
        for members in racks.values():
            self._rng.shuffle(members)
        # Visit racks round-robin, largest first (ties broken at random), so consecutive
        # positions — and therefore write sets — land in different racks.
        order = list(racks)
        self._rng.shuffle(order)
        order.sort(key=lambda r: -len(racks[r]))
        chosen: list[BookieId] = []
        while len(chosen) < size:
            for rack in order:
                if racks[rack] and len(chosen) < size:
                    chosen.append(racks[rack].pop().bookie_id)
        self._check_racks(bookies, chosen)
        return tuple(chosen)

    def replace(
        self,
        bookies: Sequence[BookieInfo],
        ensemble: Sequence[BookieId],
        index: int,
        *,
        exclude: Collection[BookieId] = (),
    ) -> BookieId:
        candidates = self._writable(bookies, {*exclude, *ensemble})
        if not candidates:
            raise NotEnoughBookiesError(
                f"no writable bookie left to replace {ensemble[index]} "
                f"(ensemble {list(ensemble)}, excluded {sorted(exclude)})"
            )
        rack_of = {b.bookie_id: b.rack for b in bookies}
        n = len(ensemble)
        other_racks = {rack_of.get(b) for i, b in enumerate(ensemble) if i != index}
        neighbour_racks = {rack_of.get(ensemble[(index + d) % n]) for d in (-1, 1) if n > 1}
        for wanted in (
            [b for b in candidates if b.rack not in other_racks],
            [b for b in candidates if b.rack not in neighbour_racks],
            candidates,
        ):
            for choice in self._rng.sample(wanted, len(wanted)):
                proposed = list(ensemble)
                proposed[index] = choice.bookie_id
                try:
                    self._check_racks(bookies, proposed)
                except NotEnoughBookiesError:
                    continue
                return choice.bookie_id
        raise NotEnoughBookiesError(
            f"no bookie can replace {ensemble[index]} in {list(ensemble)} while keeping "
            f"minNumRacksPerWriteQuorum={self.min_racks_per_write_quorum} (enforced)"
        )
