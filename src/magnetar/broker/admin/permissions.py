"""Permissions: who may produce to and consume from a namespace or a topic, and which roles
may use a subscription -- Pulsar's grant / revoke / list endpoints.

``/admin/v2/namespaces/{tenant}/{namespace}/permissions[/{role}]``,
``.../permissions/subscription[/{subscription}]`` and ``.../permissions/{subscription}/{role}``
(subscription roles), and ``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions
[/{role}]``. All of them live in the namespace record's ``auth_policies`` (Pulsar's
``namespace_auth``, ``destination_auth`` keyed by the full topic name,
``subscription_auth_roles``), changed by compare-and-set; the broker's checks read them
through its policy cache (:mod:`magnetar.broker.access`). Only a tenant admin or a
super-user reaches these routes (the HTTP access middleware).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.common import (
    AdminError,
    body,
    check_name,
    not_found,
    policies_changed,
    read_json,
    service,
    update_json,
)
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import scope as topic_scope
from magnetar.metadata import keys
from magnetar.security import authz
from magnetar.wire.topics import TopicName

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
TOPIC = f"{paths.TOPIC}/permissions"


def _ns(request: web.Request) -> tuple[str, str]:
    return (
        check_name(request.match_info["tenant"], "tenant"),
        check_name(request.match_info["namespace"], "namespace"),
    )


def _auth(data: dict[str, Any]) -> dict[str, Any]:
    auth = data.get("auth_policies")
    if not isinstance(auth, dict):
        auth = data["auth_policies"] = {}
    for name in ("namespace_auth", "destination_auth", "subscription_auth_roles"):
        if not isinstance(auth.get(name), dict):
            auth[name] = {}
    return auth


async def _read(request: web.Request, tenant: str, ns: str) -> dict[str, Any]:
    found = await read_json(service(request).store, keys.namespace(tenant, ns))
    if found is None:
        raise not_found(f"Namespace {tenant}/{ns}")
    return _auth(found[0])


async def _change(request: web.Request, tenant: str, ns: str, change: Any) -> None:
    await update_json(
        service(request).store,
        keys.namespace(tenant, ns),
        lambda data: change(_auth(data)),
        what=f"Namespace {tenant}/{ns}",
    )
    policies_changed(request)


async def _actions(request: web.Request) -> list[str]:
    raw = await body(request)
    if not isinstance(raw, list):
        raise AdminError(400, 'expected a JSON array of actions, e.g. ["produce", "consume"]')
    try:
        return authz.parse_actions(raw)
    except ValueError as err:
        raise AdminError(400, str(err)) from None


def _role(request: web.Request) -> str:
    role = request.match_info["role"]
    if not role.strip():
        raise AdminError(412, "empty role")
    return role


# --- namespace ----------------------------------------------------------------------------------


async def get_namespace(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    return web.json_response((await _read(request, tenant, ns))["namespace_auth"])


async def grant_namespace(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    role, actions = _role(request), await _actions(request)
    await _change(
        request, tenant, ns, lambda auth: auth["namespace_auth"].__setitem__(role, actions)
    )
    return web.Response(status=204)


async def revoke_namespace(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    role = _role(request)
    await _change(request, tenant, ns, lambda auth: auth["namespace_auth"].pop(role, None))
    return web.Response(status=204)


async def get_subscription_roles(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    return web.json_response((await _read(request, tenant, ns))["subscription_auth_roles"])


async def grant_subscription(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    subscription = request.match_info["subscription"]
    raw = await body(request)
    if not isinstance(raw, list) or not all(isinstance(r, str) and r for r in raw):
        raise AdminError(400, "expected a JSON array of role names")
    roles = list(dict.fromkeys(raw))

    def change(auth: dict[str, Any]) -> None:
        auth["subscription_auth_roles"][subscription] = roles

    await _change(request, tenant, ns, change)
    return web.Response(status=204)


async def revoke_subscription(request: web.Request) -> web.Response:
    tenant, ns = _ns(request)
    subscription, role = request.match_info["subscription"], _role(request)

    def change(auth: dict[str, Any]) -> None:
        roles = auth["subscription_auth_roles"].get(subscription) or []
        if role not in roles:
            raise AdminError(412, f"role {role!r} has no access to subscription {subscription}")
        roles.remove(role)
        auth["subscription_auth_roles"][subscription] = roles

    await _change(request, tenant, ns, change)
    return web.Response(status=204)


# --- topic --------------------------------------------------------------------------------------


async def _existing_topic(request: web.Request) -> TopicName:
    """The path's topic; 404 as Pulsar answers when neither it nor a partitioned topic of
    that name exists."""
    topic = await paths.topic(request)
    svc = service(request)
    if not await topic_scope.exists(svc, topic) and not await svc.policies.partitions(topic):
        raise AdminError(404, f"Topic {topic.full_name} not found")
    return topic


async def get_topic(request: web.Request) -> web.Response:
    topic = await paths.topic(request)
    auth = await _read(request, topic.tenant, topic.namespace)
    merged: dict[str, list[str]] = {r: list(a) for r, a in auth["namespace_auth"].items()}
    names = [topic.full_name]
    if topic.is_partition:
        names.append(topic.base_name.full_name)
    for name in names:
        for role, actions in (auth["destination_auth"].get(name) or {}).items():
            held = merged.setdefault(role, [])
            held.extend(a for a in actions if a not in held)
    return web.json_response(merged)


async def grant_topic(request: web.Request) -> web.Response:
    topic = await _existing_topic(request)
    role, actions = _role(request), await _actions(request)

    def change(auth: dict[str, Any]) -> None:
        auth["destination_auth"].setdefault(topic.full_name, {})[role] = actions

    await _change(request, topic.tenant, topic.namespace, change)
    return web.Response(status=204)


async def revoke_topic(request: web.Request) -> web.Response:
    topic = await _existing_topic(request)
    role = _role(request)

    def change(auth: dict[str, Any]) -> None:
        grants = auth["destination_auth"].get(topic.full_name) or {}
        if role not in grants:
            raise AdminError(412, f"Permissions are not set at the topic level for role {role!r}")
        del grants[role]
        if grants:
            auth["destination_auth"][topic.full_name] = grants
        else:
            auth["destination_auth"].pop(topic.full_name, None)

    await _change(request, topic.tenant, topic.namespace, change)
    return web.Response(status=204)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(NAMESPACE, get_namespace)
    router.add_get(f"{NAMESPACE}/subscription", get_subscription_roles)
    router.add_post(f"{NAMESPACE}/subscription/{{subscription}}", grant_subscription)
    router.add_post(f"{NAMESPACE}/{{role}}", grant_namespace)
    router.add_delete(f"{NAMESPACE}/{{role}}", revoke_namespace)
    router.add_delete(f"{NAMESPACE}/{{subscription}}/{{role}}", revoke_subscription)
    router.add_get(TOPIC, get_topic)
    router.add_post(f"{TOPIC}/{{role}}", grant_topic)
    router.add_delete(f"{TOPIC}/{{role}}", revoke_topic)
