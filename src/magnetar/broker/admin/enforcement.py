"""Namespace and topic policies that act on data: retention and message TTL.

A background loop of the broker visits its loaded topics every few seconds:

* **retention** (``retention_policies``, the topic's own overriding the namespace's) becomes the
  managed ledger's ``retention_time_s`` / ``retention_bytes``; the managed ledger then keeps
  acknowledged ledgers within that window and trims the rest;
* **message TTL** (``message_ttl_in_seconds``): for every durable subscription, the entries
  published before ``now - TTL`` are acknowledged (mark-delete moved past the last of them), as
  Pulsar's expiry monitor does — unacknowledged messages expire, acknowledged ones are unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

from aiohttp import web

from magnetar.broker import http
from magnetar.broker import policies as broker_policies
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import PersistentTopic
from magnetar.managed_ledger.api import ManagedLedgerConfig, Position

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
_TASK = web.AppKey("magnetar_policy_enforcer", asyncio.Task)


def previous_position(ml: Any, position: Position) -> Position | None:
    """The stored entry just before ``position`` (None when there is none)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    earlier = [i for i in ml.ledgers() if i.ledger_id < position.ledger_id and i.entries > 0]
    if not earlier:
        return None
    last = earlier[-1]
    return Position(last.ledger_id, last.entries - 1)


class PolicyEnforcer:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def enforce(self, topic: PersistentTopic) -> None:
        svc = self.service
        policies = await broker_policies.effective_policies(svc.store, svc.policies, topic.name)
        ml: Any = topic.managed_ledger
        config = getattr(ml, "config", None)
        if isinstance(config, ManagedLedgerConfig):
            wanted = broker_policies.retention_config(
                self.service.config.managed_ledger, policies.get("retention_policies")
            )
            if (wanted.retention_time_s, wanted.retention_bytes) != (
                config.retention_time_s,
                config.retention_bytes,
            ):
                ml.update_config(dataclasses.replace(
                    config,
                    retention_time_s=wanted.retention_time_s,
                    retention_bytes=wanted.retention_bytes,
                ))  # fmt: skip
        ttl = policies.get("message_ttl_in_seconds")
        if isinstance(ttl, int) and ttl > 0:
            await self.expire(topic, cutoff_ms=int((time.time() - ttl) * 1000))

    async def expire(self, topic: PersistentTopic, *, cutoff_ms: int) -> None:
        """Acknowledge, on every durable subscription, the entries published before cutoff."""
        subs: Any = topic.subscriptions
        finder = getattr(subs, "position_for_publish_time", None)
        if finder is None:
            return
        ml: Any = topic.managed_ledger
        cursors = [c for c in ml.cursors.values() if c.durable and c.backlog() > 0]
        if not cursors:
            return
        first_young = await finder(cutoff_ms)
        last_old = previous_position(ml, first_young)
        if last_old is None:
            return
        for cursor in cursors:
            if last_old > cursor.mark_delete_position:
                await cursor.mark_delete(last_old)
                log.info(
                    "%s/%s: expired messages up to %s (TTL)", topic.name, cursor.name, last_old
                )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL_S)
            for topic in list(self.service.topics.values()):
                try:
                    await self.enforce(topic)
                except Exception as err:  # one topic's trouble must not stop the others
                    log.warning("%s: policy enforcement: %s", topic.name, err)


async def _start(app: web.Application) -> None:
    app[_TASK] = asyncio.get_running_loop().create_task(PolicyEnforcer(app[http.SERVICE]).run())


async def _stop(app: web.Application) -> None:
    task = app.get(_TASK)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def register(app: web.Application) -> None:
    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
