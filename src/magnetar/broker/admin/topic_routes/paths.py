"""What the topic routes read from a request: the typed call's scope and the topic named by
the path.

Why this module exists: every topic route starts the same way; the checks themselves (domain,
namespace, name) are those of the typed topic operations (``broker/topic_ops/scope.py``).
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import remote, validation
from magnetar.broker.admin.common import service
from magnetar.broker.topic_ops import scope as topic_scope
from magnetar.broker.topic_ops.scope import Scope
from magnetar.wire.topics import TopicDomain, TopicName

BASE = "/admin/v2/{domain}/{tenant}/{namespace}"
"""A namespace of either domain."""
TOPIC = f"{BASE}/{{topic}}"
"""A topic."""
SUBSCRIPTION = f"{TOPIC}/subscription/{{subscription}}"
"""A topic's subscription."""


def scope(request: web.Request) -> Scope:
    """The typed call's scope: this broker, its peers over HTTP, and whether the request
    was sent here as to the owner (``authoritative=true``)."""
    authoritative = validation.query_flag(request.query.get("authoritative"), "authoritative")
    return Scope(service(request), remote.peers(request), authoritative=authoritative)


def domain(request: web.Request) -> TopicDomain:
    return topic_scope.domain(request.match_info["domain"])


async def topic(request: web.Request) -> TopicName:
    """The topic of the path (404 unknown domain or namespace, 412 invalid name)."""
    m = request.match_info
    return await topic_scope.topic_name(
        service(request),
        domain_name=m["domain"],
        tenant=m["tenant"],
        namespace_name=m["namespace"],
        local=m["topic"],
    )


def force(request: web.Request) -> bool:
    return validation.query_flag(request.query.get("force"), "force")


def no_content() -> web.Response:
    return web.Response(status=204)
