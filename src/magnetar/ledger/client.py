"""The ledger client: creates, opens (with or without recovery), reads and deletes ledgers.

It keeps one :class:`BookieClient` per bookie, learns the writable bookies from their leased
registrations in the metadata store, and stores ledger metadata there by compare-and-set.

Transport to bookies is one setting for the whole client (``tls``: the broker's
bookkeeperTLS* keys): TLS with it, plaintext without. A bookie's registration says whether it
serves TLS (``"tls": true``); a bookie whose transport differs from the client's cannot be
reached, so it is left out of new ensembles with a warning naming it (ledgers already on it
report the connection failure as any unreachable bookie does).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Mapping

from magnetar.common import grpctls
from magnetar.ledger import racks
from magnetar.ledger.bookie_client import BookieClient, LocalBookie, LocalBookieClient
from magnetar.ledger.errors import (
    BookieError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.metadata import Fragment, LedgerMetadata, check_quorums
from magnetar.ledger.placement import DEFAULT_RACK, BookieInfo, PlacementPolicy, RackAwarePlacement
from magnetar.ledger.recovery import LedgerRecoveryOp
from magnetar.metadata import api, keys

log = logging.getLogger(__name__)

READ_BATCH_MAX_BYTES = 4 * 1024 * 1024


class LedgerClient:
    def __init__(
        self,
        store: api.MetadataStore,
        *,
        placement: PlacementPolicy | None = None,
        add_timeout: float = 10.0,
        rpc_timeout: float = 10.0,
        local_bookies: Mapping[str, LocalBookie] | None = None,
        tls: grpctls.ClientTls | None = None,
    ) -> None:
        self.store = store
        self.tls = tls
        """Credentials of the channels to bookies (None: plaintext)."""
        self._transport_mismatch: set[str] = set()
        self._local_bookies = dict(local_bookies or {})
        """Bookies in this process (standalone): adds to them skip gRPC."""
        self.placement: PlacementPolicy = placement or RackAwarePlacement()
        self.add_timeout = add_timeout
        self.rpc_timeout = rpc_timeout
        self._bookies: dict[str, BookieClient] = {}

    # --- bookies ---------------------------------------------------------------------------

    def bookie(self, bookie_id: str) -> BookieClient:
        client = self._bookies.get(bookie_id)
        if client is None:
            local = self._local_bookies.get(bookie_id)
            if local is not None:
                client = LocalBookieClient(
                    bookie_id, local, add_timeout=self.add_timeout, rpc_timeout=self.rpc_timeout
                )
            else:
                client = BookieClient(
                    bookie_id,
                    add_timeout=self.add_timeout,
                    rpc_timeout=self.rpc_timeout,
                    tls=self.tls,
                )
            self._bookies[bookie_id] = client
        return client

    async def bookies(self) -> list[BookieInfo]:
        """Bookies registered as available now (their leases are alive), each in its rack:
        the one the admin API's racks-info gives it, else the one it registered with."""
        found: list[BookieInfo] = []
        assigned = await racks.overrides(self.store)
        async for record in self.store.scan_all(keys.BOOKIES_AVAILABLE):
            bookie_id = keys.unsegment(record.key.rsplit("/", 1)[-1])
            try:
                info = json.loads(record.value) if record.value else {}
            except ValueError:
                info = {}
            if bookie_id not in self._local_bookies and not self._transport_matches(
                bookie_id, info
            ):
                continue
            found.append(
                BookieInfo(
                    bookie_id=bookie_id,
                    rack=assigned.get(bookie_id) or str(info.get("rack") or DEFAULT_RACK),
                    read_only=bool(info.get("readOnly", False)),
                )
            )
        return found

    def _transport_matches(self, bookie_id: str, info: object) -> bool:
        """Whether the bookie serves the transport this client speaks (TLS or plaintext)."""
        serves_tls = isinstance(info, dict) and bool(info.get("tls", False))
        if serves_tls == (self.tls is not None):
            self._transport_mismatch.discard(bookie_id)
            return True
        if bookie_id not in self._transport_mismatch:
            self._transport_mismatch.add(bookie_id)
            log.warning(
                "bookie %s serves %s but this client is configured for %s: not placing "
                "ledgers on it (set the bookkeeperTLS* keys to match the bookies)",
                bookie_id,
                "TLS" if serves_tls else "plaintext",
                "TLS" if self.tls is not None else "plaintext",
            )
        return False

    # --- metadata --------------------------------------------------------------------------

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, api.Version]:
        record = await self.store.get(keys.ledger(ledger_id))
        if record is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        return LedgerMetadata.from_json(record.value), record.version

    async def store_metadata(self, meta: LedgerMetadata, version: api.Version) -> api.Version:
        """CAS the ledger's metadata; BadVersionError when someone else changed it."""
        return await self.store.put(
            keys.ledger(meta.ledger_id), meta.to_json(), expected_version=version
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def create(
        self,
        *,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom: Mapping[str, str] | None = None,
    ) -> LedgerHandle:
        """Create a ledger on a fresh ensemble and return its writer."""
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        available = await self.bookies()
        try:
            ensemble = self.placement.new_ensemble(available, ensemble_size)
        except NotEnoughBookiesError as err:
            if not self._transport_mismatch:
                raise
            raise NotEnoughBookiesError(
                f"{err}; left out: {', '.join(sorted(self._transport_mismatch))}, which serve "
                f"{'plaintext' if self.tls is not None else 'TLS'} while this client speaks "
                f"{'TLS' if self.tls is not None else 'plaintext'}"
            ) from err
        ledger_id = await self.store.next_id(keys.LEDGER_COUNTER)
        meta = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            fragments=(Fragment(0, ensemble),),
            password=secrets.token_bytes(16),
            ctime_ms=int(time.time() * 1000),
            custom=dict(custom or {}),
        )
        version = await self.store.put(
            keys.ledger(ledger_id), meta.to_json(), expected_version=api.NOT_EXISTS
        )
        return LedgerHandle(self, meta, version, writable=True)

    async def open(self, ledger_id: int, *, recovery: bool = False) -> LedgerHandle:
        """A read handle. With ``recovery`` an open ledger is fenced, recovered and closed
        first (the previous writer's next adds then fail); without it, an open ledger is read
        up to the LAC its bookies report."""
        if recovery:
            meta, version = await LedgerRecoveryOp(self, ledger_id).run()
        else:
            meta, version = await self.read_metadata(ledger_id)
        handle = LedgerHandle(
            self,
            meta,
            version,
            writable=False,
            last_add_confirmed=meta.last_entry_id if meta.closed else -1,
            length=meta.length if meta.closed else 0,
        )
        if not meta.closed:
            await handle.refresh_lac()
        return handle

    async def delete(self, ledger_id: int) -> None:
        """Delete the ledger's entries on every bookie that held them, then its metadata."""
        try:
            meta, version = await self.read_metadata(ledger_id)
        except NoSuchLedgerError:
            return
        bookies = {b for f in meta.fragments for b in f.ensemble}
        results = await asyncio.gather(
            *(self.bookie(b).delete_ledger(ledger_id) for b in bookies), return_exceptions=True
        )
        for bookie, result in zip(sorted(bookies), results, strict=False):
            if isinstance(result, BaseException):
                # The bookie's garbage collector removes ledgers whose metadata is gone.
                log.warning("delete of ledger %d on %s failed: %s", ledger_id, bookie, result)
        try:
            await self.store.delete(keys.ledger(ledger_id), expected_version=version)
        except api.NotFoundError:
            pass

    async def close(self) -> None:
        clients, self._bookies = list(self._bookies.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    # --- used by handles and recovery --------------------------------------------------------

    async def read_lac(self, meta: LedgerMetadata) -> int:
        """The highest LAC the last fragment's bookies report (for readers of open ledgers)."""
        results = await asyncio.gather(
            *(self.bookie(b).read_lac(meta.ledger_id) for b in meta.last_fragment.ensemble),
            return_exceptions=True,
        )
        lacs = [r[0] for r in results if isinstance(r, tuple)]
        if not lacs:
            raise BookieError("*", 14, f"no bookie of ledger {meta.ledger_id} answered read-lac")
        return max(lacs)

    async def write_lac_best_effort(self, meta: LedgerMetadata, lac: int) -> None:
        await asyncio.gather(
            *(
                self.bookie(b).write_lac(meta.ledger_id, meta.password, lac)
                for b in meta.last_fragment.ensemble
            ),
            return_exceptions=True,
        )

    async def read_entries(
        self, meta: LedgerMetadata, first: int, last: int
    ) -> list[tuple[int, bytes]]:
        """Stored entries first..last, with failover.

        The lowest entry still wanted is asked of the first replica of its write set not yet
        tried for it, as a range up to ``last``: that bookie returns what it holds from there
        (all of it when E == Wq, its stripe otherwise, up to a byte limit). A bookie that
        fails is skipped for the rest of the call; an entry no replica has is an error.
        """
        found: dict[int, bytes] = {}
        tried: set[tuple[int, str]] = set()
        bad: dict[str, str] = {}
        eid = first
        while eid <= last:
            if eid in found:
                eid += 1
                continue
            candidates = [b for b in meta.write_set(eid) if (eid, b) not in tried and b not in bad]
            if not candidates:
                raise NoSuchEntryError(
                    f"ledger {meta.ledger_id}: entry {eid} is on no reachable replica "
                    f"({meta.write_set(eid)}; errors: {bad})"
                )
            bookie = candidates[0]
            tried.add((eid, bookie))
            try:
                got = await self.bookie(bookie).read(
                    meta.ledger_id, eid, last, past_lac=True, max_bytes=READ_BATCH_MAX_BYTES
                )
            except NoSuchEntryError:
                continue
            except BookieError as err:
                bad[bookie] = str(err)
                continue
            for k, v in got:
                if first <= k <= last:
                    found.setdefault(k, v)
        return sorted(found.items())
