"""Bookies: ``/admin/v2/bookies/...`` — the bookies of the cluster with their state and rack,
the ledgers marked under-replicated, and decommission (issue 22; docs/operations.md,
"Autorecovery and decommission").

``GET /admin/v2/bookies/all`` answers Pulsar's ``BookiesClusterInfo`` shape (``bookies``:
[{``bookieId``}]) with ``state`` (rw, ro, decommissioning, decommissioned, gone) and ``rack``
added. Decommission is asynchronous: the POST marks the bookie ``decommissioning`` (it turns
read-only, the auditor marks its ledgers, recovery workers move them); the GET reports how
many ledgers still reference it, and ``decommissioned`` once none does and its cookie is gone.
Super-user only, as every route the access table does not name (magnetar.broker.access).
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.common import AdminError, not_found, service
from magnetar.ledger import underreplication as ur
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import keys


async def list_bookies(request: web.Request) -> web.Response:
    """The bookies of the cluster: id, state (rw, ro, decommissioning, decommissioned, gone),
    rack."""
    statuses = await ur.bookie_statuses(service(request).store)
    return web.json_response({"bookies": [s.to_json() for s in statuses]})


async def list_underreplicated(request: web.Request) -> web.Response:
    """Ledgers marked under-replicated, with the bookies they must be moved off."""
    marks = await ur.marks(service(request).store)
    return web.json_response([m.to_json() for m in marks])


async def _progress(request: web.Request, bookie_id: str) -> dict[str, object]:
    store = service(request).store
    status = {s.bookie_id: s for s in await ur.bookie_statuses(store)}.get(bookie_id)
    if status is None:
        raise not_found(f"bookie {bookie_id}")
    referencing = 0
    async for record in store.scan_all(keys.LEDGERS):
        try:
            meta = LedgerMetadata.from_json(record.value)
        except (ValueError, KeyError, TypeError):
            continue
        if any(bookie_id in f.ensemble for f in meta.fragments):
            referencing += 1
    return {**status.to_json(), "ledgersReferencing": referencing}


async def decommission(request: web.Request) -> web.Response:
    """Start decommissioning a bookie (read-only, its ledgers re-replicated elsewhere)."""
    bookie_id = request.match_info["bookie"]
    store = service(request).store
    status = {s.bookie_id: s for s in await ur.bookie_statuses(store)}.get(bookie_id)
    if status is None:
        raise not_found(f"bookie {bookie_id}")
    if status.state is ur.BookieState.DECOMMISSIONED:
        raise AdminError(409, f"bookie {bookie_id} is already decommissioned")
    await ur.start_decommission(store, bookie_id)
    return web.json_response(await _progress(request, bookie_id))


async def decommission_status(request: web.Request) -> web.Response:
    """A decommission's progress: the bookie's state and the ledgers still on it."""
    return web.json_response(await _progress(request, request.match_info["bookie"]))


def register(router: web.UrlDispatcher) -> None:
    """Registered before the topic routes: ``/admin/v2/bookies/decommission/{bookie}`` has
    the shape of ``/admin/v2/{domain}/{tenant}/{namespace}``."""
    router.add_get("/admin/v2/bookies/all", list_bookies)
    router.add_get("/admin/v2/bookies/underreplicated", list_underreplicated)
    router.add_post("/admin/v2/bookies/decommission/{bookie}", decommission)
    router.add_get("/admin/v2/bookies/decommission/{bookie}", decommission_status)
