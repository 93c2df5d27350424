"""The Pulsar admin REST API v2 on the broker's HTTP port (issue: admin REST API).

Plugged into the broker's aiohttp app as an extension (``broker.http.build_app``): tenants,
namespaces and their policies, topics, subscriptions and clusters, with Pulsar's paths,
JSON shapes and error statuses (``{"reason": ...}``), so ``pulsar-admin``-style scripts work.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import (
    clusters,
    common,
    enforcement,
    namespaces,
    openapi,
    schemas,
    tenants,
    topics,
)


def extension(app: web.Application) -> None:
    """Register the admin API routes, its error middleware and the policy enforcer on
    ``app``."""
    app.middlewares.append(common.error_middleware)
    app[common.POLICY_CHANGES] = common.PolicyChanges()
    clusters.register(app.router)
    tenants.register(app.router)
    namespaces.register(app.router)
    topics.register(app.router)
    schemas.register(app.router)
    openapi.register(app.router)
    enforcement.register(app)
