"""Admin calls to the broker that owns a topic, for operations spanning topics that several
brokers own: partitioned stats, deleting or unloading a partitioned topic, deleting a
namespace. (Operations on one topic answer ``307`` to its owner instead; see ``topics``.)

Only the current owner is asked: an unowned topic is handled by this broker, which may take
its bundle, as a lookup would.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, Final

import aiohttp

from magnetar.broker.admin.common import AdminError
from magnetar.broker.service import BrokerService
from magnetar.wire.topics import TopicName

TIMEOUT_S: Final = 30.0


async def owner_elsewhere(svc: BrokerService, topic: TopicName) -> str | None:
    """The web URL of the broker owning ``topic`` when that is another broker; None when this
    broker owns it or nobody does."""
    owner = await svc.ownership.owner_of(await svc.bundle(topic))
    if owner is None or owner.broker.broker_id == svc.me.broker_id:
        return None
    if not owner.broker.web_service_url:
        raise AdminError(503, f"topic {topic.full_name} is owned by a broker without a web URL")
    return owner.broker.web_service_url.rstrip("/")


def namespace_path(domain: str, tenant: str, namespace: str) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}``, each part URL-quoted."""
    parts = (domain, tenant, namespace)
    return "/admin/v2/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def topic_path(topic: TopicName) -> str:
    """The admin path of a topic of either domain."""
    base = namespace_path(topic.domain.value, topic.tenant, topic.namespace)
    return f"{base}/{urllib.parse.quote(topic.local_name, safe='')}"


async def call(base_url: str, method: str, path: str) -> tuple[int, Any]:
    """``method path`` on another broker's admin API (authoritative: it owns the topic);
    (status, decoded JSON or None). AdminError 503 when it cannot be reached."""
    sep = "&" if "?" in path else "?"
    url = f"{base_url}{path}{sep}authoritative=true"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
            session.request(method, url) as response,
        ):
            text = await response.text()
            return response.status, (json.loads(text) if text.strip() else None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        raise AdminError(503, f"broker {base_url} did not answer {method} {path}: {err}") from None


def raise_for(status: int, answer: Any, *, ok: tuple[int, ...] = (200, 204)) -> None:
    """Pass another broker's refusal on with its status and reason."""
    if status in ok:
        return
    reason = answer.get("reason") if isinstance(answer, dict) else None
    raise AdminError(status, str(reason or f"the owning broker answered {status}"))
