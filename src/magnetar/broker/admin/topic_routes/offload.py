"""Manual offload of a topic: ``PUT`` and ``GET /admin/v2/persistent/{t}/{ns}/{topic}/offload``.

Why a module of its own: the offload endpoints (Pulsar's ``triggerOffload`` and
``offloadStatus``) are one resource of the topic routes; they only start and report the
managed ledger's offload (:mod:`magnetar.managed_ledger.offloading`).

* ``PUT .../offload`` with a message id (Pulsar's ``MessageIdImpl`` JSON) starts offloading
  every closed ledger before the one holding that message and answers 204 at once; 409
  while an offload of the topic runs, 400 when the message id is past the topic's end or
  the broker has no offloader, 405 for a non-persistent topic.
* ``GET .../offload`` answers Pulsar's ``OffloadProcessStatus``: ``status`` (NOT_RUN,
  RUNNING, SUCCESS, ERROR), ``lastError`` (S3's or the bookies' message) and
  ``firstUnoffloadedMessage``.

Both run on the topic's owner (another broker answers 307, like every operation on a
topic's data).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import AdminError, accepts, parsed
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_ops import scope as topic_scope
from magnetar.managed_ledger.api import ManagedLedgerError, Position
from magnetar.managed_ledger.offloading import OffloadInProgressError, OffloadStatus
from magnetar.wire.ids import MessageId

LATEST = 2**63 - 1
"""The ledger id of pulsar-admin's ``latest`` message id."""


async def _stored_topic(request: web.Request, operation: str) -> PersistentTopic:
    """The persistent topic of the path, loaded on its owner (307 to another owner)."""
    return await topic_scope.stored(paths.scope(request), await paths.topic(request), operation)


def _managed_ledger(topic: PersistentTopic) -> Any:
    ml: Any = topic.managed_ledger
    if getattr(ml, "offload", None) is None:
        raise AdminError(
            400,
            f"offload is not configured on this broker (topic {topic.name}): set "
            "managedLedgerOffloadDriver and s3ManagedLedgerOffloadBucket (docs/offload.md)",
        )
    return ml


@accepts(validation.MESSAGE_ID)
async def trigger_offload(request: web.Request) -> web.Response:
    """Offload the topic's closed ledgers before the one holding the message id."""
    loaded = await _stored_topic(request, "Offload of")
    ml = _managed_ledger(loaded)
    mid: MessageId = parsed(request)
    last = ml.last_confirmed_entry
    if mid.ledger_id < 0 or mid.entry_id < 0:
        raise AdminError(400, f"message id {mid.ledger_id}:{mid.entry_id} is not a position")
    upto = Position(mid.ledger_id, mid.entry_id)
    latest = mid.ledger_id == LATEST  # pulsar-admin's "latest": every closed ledger
    if not latest and upto > last and upto.ledger_id != ml.current_ledger_id:
        raise AdminError(
            400, f"message id {upto} is past the topic's last message {last} (nothing there)"
        )
    try:
        ml.offload.prefix(upto)
    except OffloadInProgressError as err:
        raise AdminError(409, str(err)) from None
    except ManagedLedgerError as err:
        raise AdminError(503, str(err)) from None
    return web.Response(status=204)


async def offload_status(request: web.Request) -> web.Response:
    """Pulsar's OffloadProcessStatus of the topic's last offload."""
    loaded = await _stored_topic(request, "Offload of")
    ml = _managed_ledger(loaded)
    found: OffloadStatus = ml.offload.status
    return web.json_response(found.to_json(loaded.name.partition_index))


def register(router: web.UrlDispatcher) -> None:
    router.add_put(f"{paths.TOPIC}/offload", trigger_offload)
    router.add_get(f"{paths.TOPIC}/offload", offload_status)
