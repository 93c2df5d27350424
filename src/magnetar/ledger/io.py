"""What a ledger handle and a recovery need from the ledger client.

Why this module exists: :class:`~magnetar.ledger.client.LedgerClient` builds handles and
recoveries, and they call back into it (bookie connections, ledger metadata, LAC reads and
writes, entry reads). This protocol names those calls, so that neither
:mod:`magnetar.ledger.handle` nor :mod:`magnetar.ledger.recovery` imports the client.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.ledger.bookie_client import BookieClient
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.ledger.placement import BookieInfo, PlacementPolicy
from magnetar.metadata import api


class LedgerIO(Protocol):
    @property
    def placement(self) -> PlacementPolicy: ...

    def bookie(self, bookie_id: str) -> BookieClient: ...

    async def bookies(self) -> list[BookieInfo]: ...

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, api.Version]: ...

    async def store_metadata(self, meta: LedgerMetadata, version: api.Version) -> api.Version: ...

    async def read_lac(self, meta: LedgerMetadata) -> int: ...

    async def write_lac_best_effort(self, meta: LedgerMetadata, lac: int) -> None: ...

    async def read_entries(
        self, meta: LedgerMetadata, first: int, last: int
    ) -> list[tuple[int, bytes]]: ...
