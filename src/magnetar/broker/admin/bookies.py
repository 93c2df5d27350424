"""Bookies: ``/admin/v2/bookies/...`` — the bookies of the cluster with their state and rack,
the ledgers marked under-replicated, and decommission (issue 22; docs/operations.md,
"Autorecovery and decommission").

``GET /admin/v2/bookies/all`` answers Pulsar's ``BookiesClusterInfo`` shape (``bookies``:
[{``bookieId``}]) with ``state`` (rw, ro, decommissioning, decommissioned, gone) and ``rack``
added. Decommission is asynchronous: the POST marks the bookie ``decommissioning`` (it turns
read-only, the auditor marks its ledgers, recovery workers move them); the GET reports how
many ledgers still reference it, and ``decommissioned`` once none does and its cookie is gone.

The rack placement (``/admin/v2/bookies/racks-info``) is Pulsar's BookiesRackConfiguration
``{group: {bookie: {rack, hostname}}}``, one record of the metadata store
(magnetar.ledger.racks): ``GET`` answers it (``{}`` when none was set), ``GET .../{bookie}``
one bookie's BookieInfo (404 "Bookie rack placement configuration not found: B"),
``POST .../{bookie}?group=G`` sets it (moving the bookie out of any other group; 412 without
a group or for a rack with a slash inside it, Pulsar's answers with its rack-aware placement
on), ``DELETE`` removes it (404 as the GET). New ledgers' ensembles use the rack set there.

Super-user only, as every route the access table does not name (magnetar.broker.access).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import AdminError, accepts, not_found, parsed, service
from magnetar.ledger import racks
from magnetar.ledger import underreplication as ur
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.metadata import api, keys


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


_RACK_RULE = (
    "Bookie 'rack' parameter is invalid, When `RackawareEnsemblePlacementPolicy` is enabled, "
    "the rack name is not allowed to contain slash (`/`) except for the beginning and end of "
    "the rack name string. When `RegionawareEnsemblePlacementPolicy` is enabled, the rack name "
    "can only contain one slash (`/`) except for the beginning and end of the rack name string."
)


def _bookie_info(value: Any) -> dict[str, Any]:
    """A BookieInfo body: ``rack`` (a string, required) and an optional ``hostname``."""
    if not isinstance(value, dict):
        raise AdminError(400, "a bookie's rack information must be a JSON object")
    unknown = sorted(set(value) - {"rack", "hostname"})
    if unknown:
        raise AdminError(400, f"unknown bookie info fields: {unknown}")
    rack, hostname = value.get("rack"), value.get("hostname")
    if not isinstance(rack, str) or not rack.strip("/"):
        raise AdminError(400, f"rack must be a non-empty string, got {json.dumps(rack)}")
    if hostname is not None and not isinstance(hostname, str):
        raise AdminError(400, f"hostname must be a string, got {json.dumps(hostname)}")
    info: dict[str, Any] = {"rack": rack}
    if hostname is not None:
        info["hostname"] = hostname
    return info


BOOKIE_INFO = validation.Body(
    {
        "type": "object",
        "properties": {"rack": {"type": "string"}, "hostname": {"type": "string"}},
        "required": ["rack"],
    },
    _bookie_info,
    "BookieInfo",
)


async def _racks(store: api.MetadataStore) -> tuple[dict[str, dict[str, Any]], api.Version]:
    record = await store.get(racks.KEY)
    if record is None:
        return {}, api.NOT_EXISTS
    return racks.parse(record.value), record.version


def _remove(config: dict[str, dict[str, Any]], bookie_id: str) -> bool:
    """Take the bookie out of its group (an emptied group goes too); whether it was there."""
    for group, members in list(config.items()):
        if members.pop(bookie_id, None) is not None:
            if not members:
                del config[group]
            return True
    return False


async def _change_racks(request: web.Request, change: Any) -> None:
    """Apply ``change`` (config -> None) to the racks record by compare-and-set."""
    store = service(request).store
    for _ in range(10):
        config, version = await _racks(store)
        change(config)
        try:
            await store.put(racks.KEY, json.dumps(config).encode(), expected_version=version)
        except api.BadVersionError:
            continue
        return
    raise AdminError(409, "the bookies' rack information is being changed concurrently; retry")


async def racks_info(request: web.Request) -> web.Response:
    """Every bookie's rack placement, by group."""
    config, _ = await _racks(service(request).store)
    return web.json_response(config)


def _not_found(bookie_id: str) -> AdminError:
    return AdminError(404, f"Bookie rack placement configuration not found: {bookie_id}")


async def get_rack(request: web.Request) -> web.Response:
    """One bookie's rack placement."""
    bookie_id = request.match_info["bookie"]
    config, _ = await _racks(service(request).store)
    for members in config.values():
        if bookie_id in members:
            return web.json_response(members[bookie_id])
    raise _not_found(bookie_id)


@accepts(BOOKIE_INFO)
async def set_rack(request: web.Request) -> web.Response:
    """Put a bookie in a rack of a group (out of any other group)."""
    bookie_id = request.match_info["bookie"]
    group = request.query.get("group")
    if group is None:
        raise AdminError(412, "Bookie 'group' parameters is missing")
    info: dict[str, Any] = parsed(request)
    if "/" in info["rack"].strip("/"):
        raise AdminError(412, _RACK_RULE)

    def change(config: dict[str, dict[str, Any]]) -> None:
        _remove(config, bookie_id)
        config.setdefault(group, {})[bookie_id] = info

    await _change_racks(request, change)
    return web.Response(status=204)


async def delete_rack(request: web.Request) -> web.Response:
    """Remove a bookie's rack placement (it is placed by the rack it registered with)."""
    bookie_id = request.match_info["bookie"]

    def change(config: dict[str, dict[str, Any]]) -> None:
        if not _remove(config, bookie_id):
            raise _not_found(bookie_id)

    await _change_racks(request, change)
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    """Registered before the topic routes: ``/admin/v2/bookies/decommission/{bookie}`` has
    the shape of ``/admin/v2/{domain}/{tenant}/{namespace}``."""
    router.add_get("/admin/v2/bookies/all", list_bookies)
    router.add_get("/admin/v2/bookies/underreplicated", list_underreplicated)
    router.add_post("/admin/v2/bookies/decommission/{bookie}", decommission)
    router.add_get("/admin/v2/bookies/decommission/{bookie}", decommission_status)
    router.add_get("/admin/v2/bookies/racks-info", racks_info)
    router.add_get("/admin/v2/bookies/racks-info/{bookie}", get_rack)
    router.add_post("/admin/v2/bookies/racks-info/{bookie}", set_rack)
    router.add_delete("/admin/v2/bookies/racks-info/{bookie}", delete_rack)
