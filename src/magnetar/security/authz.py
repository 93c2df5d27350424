"""Pulsar's authorization rules as pure functions over the stored policies.

Why this module exists: the binary protocol (LOOKUP, PRODUCER, SUBSCRIBE, ...) and the admin
REST API decide with the same rules, which are Pulsar's ``PulsarAuthorizationProvider``'s:

* a super-user (``superUserRoles``) may do everything;
* a tenant's admin (its ``adminRoles``) may do everything inside the tenant;
* otherwise a topic operation needs a permission granted to the role on the namespace
  (``auth_policies.namespace_auth``) or on the topic (``auth_policies.destination_auth``,
  keyed by the full topic name; a partition inherits its partitioned topic's grants):
  ``produce`` to produce, ``consume`` to subscribe (and, if the subscription is listed in
  ``subscription_auth_roles``, the role must be listed there too), either one to look up;
* a proxy role (``proxyRoles``) acts for the original principal it forwards, and is refused
  without one; both the proxy role and the original principal must be allowed (as in
  Pulsar: a proxy's role is usually a super-user).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Action(enum.StrEnum):
    """Pulsar's AuthAction values (what ``grant-permission --actions`` takes)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class TopicOp(enum.Enum):
    LOOKUP = "lookup"
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    """Tenant-admin operations (terminate, compact, unload, delete, policies...)."""


def parse_actions(values: Iterable[Any]) -> list[str]:
    """Validated, de-duplicated action names; ValueError naming an unknown one."""
    out: list[str] = []
    for value in values:
        try:
            name = Action(str(value)).value
        except ValueError:
            allowed = ", ".join(a.value for a in Action)
            raise ValueError(f"unknown action {value!r}: one of {allowed}") from None
        if name not in out:
            out.append(name)
    return out


@dataclass(frozen=True, slots=True)
class Rules:
    enabled: bool = False
    """authorizationEnabled: off, every authenticated role may do everything."""
    super_users: frozenset[str] = field(default_factory=frozenset)
    proxy_roles: frozenset[str] = field(default_factory=frozenset)

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    def acting_role(self, role: str, original_principal: str | None) -> str | None:
        """The role a request is made for: the original principal when ``role`` is a proxy
        role (None when a proxy forwards none), else ``role``."""
        if role in self.proxy_roles:
            return original_principal or None
        return role

    def valid_original_principal(self, role: str, original_principal: str | None) -> bool:
        """Whether a connection of ``role`` may name ``original_principal`` (Pulsar's
        isValidOriginalPrincipal): a proxy role must name one that is no proxy role, any
        other role must name none. A broker with authorization on refuses CONNECT otherwise."""
        if role in self.proxy_roles:
            return bool(original_principal) and original_principal not in self.proxy_roles
        return not original_principal

    def checked_roles(self, role: str, original_principal: str | None) -> tuple[str, ...]:
        """The roles that must all be allowed, as Pulsar's AuthorizationService checks them:
        a proxy role *and* the original principal it forwards; () when a proxy forwards
        none, or forwards a proxy role; else ``role`` alone (an original principal sent by a
        role that is no proxy role is not taken)."""
        if role in self.proxy_roles:
            if not original_principal or original_principal in self.proxy_roles:
                return ()
            return (role, original_principal)
        return (role,)


def permissions(
    auth_policies: Mapping[str, Any] | None, *, topic: str, base_topic: str | None, role: str
) -> set[str]:
    """The actions ``role`` holds on ``topic`` (namespace grants and topic grants, the
    partitioned topic's too when ``base_topic`` is given)."""
    auth = auth_policies or {}
    held: set[str] = set(_list(_dict(auth.get("namespace_auth")).get(role)))
    topics = _dict(auth.get("destination_auth"))
    for name in (topic, base_topic):
        if name is not None:
            held.update(_list(_dict(topics.get(name)).get(role)))
    return held


def subscription_allowed(
    auth_policies: Mapping[str, Any] | None, *, subscription: str | None, role: str
) -> bool:
    """False when ``subscription`` is restricted to roles that do not include ``role``."""
    if not subscription:
        return True
    roles = _list(_dict(_dict(auth_policies).get("subscription_auth_roles")).get(subscription))
    return not roles or role in roles


def topic_allowed(
    op: TopicOp,
    *,
    role: str,
    tenant_admins: Iterable[str],
    auth_policies: Mapping[str, Any] | None,
    topic: str,
    base_topic: str | None = None,
    subscription: str | None = None,
) -> bool:
    """Whether a role that is not a super-user may do ``op`` on ``topic``."""
    if role in set(tenant_admins):
        return True
    if op is TopicOp.ADMIN:
        return False
    held = permissions(auth_policies, topic=topic, base_topic=base_topic, role=role)
    if op is TopicOp.PRODUCE:
        return Action.PRODUCE in held
    if op is TopicOp.CONSUME:
        return Action.CONSUME in held and subscription_allowed(
            auth_policies, subscription=subscription, role=role
        )
    return Action.PRODUCE in held or Action.CONSUME in held


def namespace_allowed(
    op: TopicOp,
    *,
    role: str,
    tenant_admins: Iterable[str],
    auth_policies: Mapping[str, Any] | None,
) -> bool:
    """Whether a role that is not a super-user may do ``op`` on a whole namespace."""
    if role in set(tenant_admins):
        return True
    if op is TopicOp.ADMIN:
        return False
    held = set(_list(_dict(_dict(auth_policies).get("namespace_auth")).get(role)))
    if op is TopicOp.PRODUCE:
        return Action.PRODUCE in held
    if op is TopicOp.CONSUME:
        return Action.CONSUME in held
    return Action.PRODUCE in held or Action.CONSUME in held


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple | set) else []
