"""Who a connection or an HTTP request is, and what it may do (docs/security.md).

Why this module exists: the binary protocol's session (:mod:`magnetar.broker.connection`),
its service requests (:mod:`magnetar.broker.requests`) and the admin REST API all ask the
same two questions -- who is this (the :class:`~magnetar.security.authn.Authenticator` of
``authenticationProviders``) and may that role do this here (the rules of
:mod:`magnetar.security.authz` over the tenant's admin roles and the namespace's
``auth_policies``, read through the broker's policy cache). :class:`Access` answers both,
once, for all of them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

from magnetar.broker import policies
from magnetar.broker.contracts import BrokerError
from magnetar.security import authz
from magnetar.security.authn import Authenticator, Identity
from magnetar.security.config import SecurityConfig
from magnetar.wire import pb
from magnetar.wire.topics import TopicName

TopicOp = authz.TopicOp

_WHAT: dict[TopicOp, str] = {
    TopicOp.LOOKUP: "Lookup",
    TopicOp.PRODUCE: "Produce",
    TopicOp.CONSUME: "Consume",
    TopicOp.ADMIN: "administer",
}


class Access:
    def __init__(self, config: SecurityConfig, cache: policies.PolicyCache) -> None:
        self.config = config
        self.authenticator: Authenticator | None = config.authenticator()
        """None when authentication is off (every client is anonymous and unchecked)."""
        self.rules = config.rules()
        self._cache = cache

    @property
    def authentication_enabled(self) -> bool:
        return self.authenticator is not None

    @property
    def authorization_enabled(self) -> bool:
        return self.rules.enabled

    def acting_role(self, identity: Identity | None, original_principal: str | None) -> str | None:
        """The role named in refusals: the original principal of a proxy's connection."""
        if identity is None:
            return None
        return self.rules.acting_role(identity.role, original_principal)

    def _checked(
        self, identity: Identity | None, original_principal: str | None
    ) -> tuple[str, ...]:
        """The roles that must all be allowed (a proxy role and the client it acts for)."""
        if identity is None:
            return ()
        return self.rules.checked_roles(identity.role, original_principal)

    def is_super_user(
        self, identity: Identity | None, original_principal: str | None = None
    ) -> bool:
        """Authorization off, or every checked role is a super-user."""
        if not self.rules.enabled:
            return True
        roles = self._checked(identity, original_principal)
        return bool(roles) and all(self.rules.is_super_user(role) for role in roles)

    async def may_administer_tenant(
        self, identity: Identity | None, tenant: str, original_principal: str | None = None
    ) -> bool:
        """Super-user, or one of the tenant's ``adminRoles`` (each checked role)."""
        if self.is_super_user(identity, original_principal):
            return True
        roles = self._checked(identity, original_principal)
        if not roles:
            return False
        admins = await self._cache.tenant_admins(tenant) or ()
        return all(self.rules.is_super_user(role) or role in admins for role in roles)

    async def _grants(self, tenant: str, ns: str) -> tuple[tuple[str, ...], Any]:
        """(the tenant's admins, the namespace's auth_policies)."""
        policies_ = await self._cache.namespace(tenant, ns)
        admins = await self._cache.tenant_admins(tenant) or ()
        return admins, policies_.raw.get("auth_policies") if policies_ else None

    async def may(
        self,
        identity: Identity | None,
        op: TopicOp,
        topic: TopicName,
        *,
        original_principal: str | None = None,
        subscription: str | None = None,
    ) -> bool:
        """Whether ``op`` on ``topic`` is allowed (always, with authorization off). Through
        a proxy both the proxy's role and the original principal must be allowed, as in
        Pulsar's AuthorizationService."""
        if self.is_super_user(identity, original_principal):
            return True
        roles = self._checked(identity, original_principal)
        if not roles:
            return False
        admins, auth = await self._grants(topic.tenant, topic.namespace)
        return all(
            self.rules.is_super_user(role)
            or authz.topic_allowed(
                op,
                role=role,
                tenant_admins=admins,
                auth_policies=auth,
                topic=topic.full_name,
                base_topic=topic.base_name.full_name if topic.is_partition else None,
                subscription=subscription,
            )
            for role in roles
        )

    async def check_namespace(
        self,
        identity: Identity | None,
        op: TopicOp,
        tenant: str,
        namespace: str,
        *,
        original_principal: str | None = None,
    ) -> None:
        """BrokerError(AuthorizationError) unless ``op`` is allowed on the namespace as a
        whole (its own grants; a grant on one topic does not count)."""
        if self.is_super_user(identity, original_principal):
            return
        roles = self._checked(identity, original_principal)
        if roles:
            admins, auth = await self._grants(tenant, namespace)
            if all(
                self.rules.is_super_user(role)
                or authz.namespace_allowed(op, role=role, tenant_admins=admins, auth_policies=auth)
                for role in roles
            ):
                return
        self._refuse(identity, original_principal, op, f"{tenant}/{namespace}")

    async def check(
        self,
        identity: Identity | None,
        op: TopicOp,
        topic: TopicName,
        *,
        original_principal: str | None = None,
        subscription: str | None = None,
    ) -> None:
        """BrokerError(AuthorizationError) unless :meth:`may`."""
        if not await self.may(
            identity, op, topic, original_principal=original_principal, subscription=subscription
        ):
            self._refuse(identity, original_principal, op, str(topic))

    def _refuse(
        self, identity: Identity | None, original_principal: str | None, op: TopicOp, what: str
    ) -> None:
        role = self.acting_role(identity, original_principal)
        raise BrokerError(
            pb.AuthorizationError,
            f"Client with role {role!r} is not authorized to {_WHAT[op]} on {what}",
        )


# --- the HTTP side -------------------------------------------------------------------------


class Need(enum.Enum):
    """What an HTTP route asks of the caller's role."""

    NOTHING = "nothing"
    """Open (``/metrics`` unless authenticateMetricsEndpoint)."""
    AUTHENTICATED = "authenticated"
    SUPER_USER = "super-user"
    TENANT_ADMIN = "tenant admin"
    NAMESPACE = "namespace lookup"
    """Produce or consume granted on the namespace (listing its topics), or tenant admin."""
    TOPIC = "topic"
    """The route's topic operation (``op``), or tenant admin."""


@dataclass(frozen=True, slots=True)
class RouteRule:
    need: Need
    op: TopicOp = TopicOp.ADMIN


_TOPIC_ROUTE: Final = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_SCHEMA_ROUTE: Final = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"

_LOOKUP_GETS: Final = frozenset(
    {
        "", "/stats", "/internalStats", "/partitioned-stats", "/partitioned-internalStats",
        "/lastMessageId", "/partitions",
    }
)  # fmt: skip
"""Topic reads Pulsar allows a role that may look the topic up (GET_STATS, GET_METADATA)."""


_NAMESPACE_ROUTE: Final = "/admin/v2/namespaces/{tenant}/{namespace}"

TOPIC_POLICIES: Final = frozenset(
    {
        "autoSubscriptionCreation", "backlogQuota", "backlogQuotaMap", "compactionThreshold",
        "deduplicationEnabled", "deduplicationSnapshotInterval", "delayedDelivery",
        "dispatchRate", "inactiveTopicPolicies", "maxConsumers",
        "maxConsumersPerSubscription", "maxMessageSize", "maxProducers",
        "maxSubscriptionsPerTopic", "maxUnackedMessagesOnConsumer",
        "maxUnackedMessagesOnSubscription", "messageTTL", "offloadPolicies", "persistence",
        "publishRate", "replication", "replicatorDispatchRate", "retention",
        "schemaCompatibilityStrategy",
        "subscribeRate", "subscriptionDispatchRate", "subscriptionTypesEnabled",
    }
)  # fmt: skip
"""Pulsar's topic policies (``/admin/v2/{domain}/.../{topic}/<policy>``)."""


def refusal_status(method: str, route: str) -> int:
    """The status of an authorization refusal on this route, as Apache Pulsar 4 answers it
    (recorded route by route from Pulsar here: tests/integration/security): 403 where it
    checks a namespace or topic *policy* operation (a namespace's policies, permissions,
    topic list and bundles; a topic's policies; creating and deleting topics and their
    partitions; a topic's bundle), 401 elsewhere (tenants, clusters, brokers, creating,
    deleting and unloading namespaces, schemas, a topic's stats, subscriptions, cursors,
    compaction, offload, termination, permissions and lookup)."""
    if route == _NAMESPACE_ROUTE:
        return 403 if method == "GET" else 401
    if route.startswith(_NAMESPACE_ROUTE + "/"):
        return 401 if route[len(_NAMESPACE_ROUTE) :] in ("/unload", "/{bundle}/unload") else 403
    if route in (
        "/admin/v2/{domain}/{tenant}/{namespace}",
        "/admin/v2/{domain}/{tenant}/{namespace}/partitioned",
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle",
    ):
        return 403
    if route == _TOPIC_ROUTE or route == _TOPIC_ROUTE + "/partitions":
        return 403 if method in ("PUT", "POST", "DELETE") else 401
    if route.startswith(_TOPIC_ROUTE + "/") and route[len(_TOPIC_ROUTE) + 1 :] in TOPIC_POLICIES:
        return 403
    return 401


def route_rule(method: str, route: str, *, authenticate_metrics: bool) -> RouteRule:
    """What ``method`` on the route whose pattern is ``route`` needs (Pulsar's rules: see
    docs/security.md). A route this table does not know needs a super-user, so a new route
    is closed until someone decides otherwise."""
    if route == "/metrics":
        return RouteRule(Need.AUTHENTICATED if authenticate_metrics else Need.NOTHING)
    if route == "/status.html":
        return RouteRule(Need.NOTHING)  # Pulsar's status page: for probes and load balancers
    if route.startswith("/lookup/v2/topic/"):
        if route.endswith("/bundle"):
            return RouteRule(Need.SUPER_USER)  # Pulsar: validateSuperUserAccess
        return RouteRule(Need.TOPIC, TopicOp.LOOKUP)
    if route.startswith("/admin/v2/tenants/{tenant}"):
        # Pulsar (checked against 4.0.7 here): creating a tenant is a super-user's; reading,
        # updating (UPDATE_TENANT) and deleting (DELETE_TENANT) it its admins' too
        return RouteRule(Need.SUPER_USER if method == "PUT" else Need.TENANT_ADMIN)
    if route.startswith("/admin/v3/functions/{tenant}"):
        # Pulsar: the functions API is its tenant's admins' (and super-users')
        return RouteRule(Need.TENANT_ADMIN)
    if route == "/admin/v2/namespaces/{tenant}/{namespace}/topics" and method == "GET":
        return RouteRule(Need.NAMESPACE)  # Pulsar's GET_TOPICS: produce or consume suffices
    if route.startswith("/admin/v2/namespaces/{tenant}/{namespace}") and route.endswith(
        ("/unload", "/split")
    ):
        return RouteRule(Need.SUPER_USER)  # Pulsar: namespace and bundle unload, split
    if route.startswith("/admin/v2/namespaces/{tenant}"):
        return RouteRule(Need.TENANT_ADMIN)
    if route.startswith(_SCHEMA_ROUTE):
        if method == "GET":
            return RouteRule(Need.TOPIC, TopicOp.LOOKUP)
        return RouteRule(Need.TOPIC, TopicOp.PRODUCE if method == "POST" else TopicOp.ADMIN)
    if route in (
        "/admin/v2/{domain}/{tenant}/{namespace}",
        "/admin/v2/{domain}/{tenant}/{namespace}/{bundle}",
        "/admin/v2/{domain}/{tenant}/{namespace}/partitioned",
    ):
        return RouteRule(Need.NAMESPACE if method == "GET" else Need.TENANT_ADMIN)
    if route.startswith(_TOPIC_ROUTE):
        rest = route[len(_TOPIC_ROUTE) :]
        if method == "GET" and rest in _LOOKUP_GETS:
            return RouteRule(Need.TOPIC, TopicOp.LOOKUP)
        if rest == "/subscriptions" or rest.startswith(
            ("/subscription/", "/all_subscription/", "/examinemessage", "/ledger/")
        ):  # Pulsar's PEEK_MESSAGES (examine, get-message-by-id) is a consumer's too
            return RouteRule(Need.TOPIC, TopicOp.CONSUME)
        return RouteRule(Need.TOPIC, TopicOp.ADMIN)
    return RouteRule(Need.SUPER_USER)
