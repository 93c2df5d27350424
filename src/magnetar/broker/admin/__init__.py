"""The Pulsar admin REST API v2 on the broker's HTTP port (issue: admin REST API), and the
functions API v3 (``functions.py``).

Plugged into the broker's aiohttp app as an extension (``broker.http.build_app``): tenants,
namespaces and their policies, topics, subscriptions and clusters, with Pulsar's paths,
JSON shapes and error statuses (``{"reason": ...}``), so ``pulsar-admin``-style scripts work.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker import http
from magnetar.broker.admin import (
    bookies,
    broker_stats,
    clusters,
    common,
    functions,
    namespaces,
    openapi,
    permissions,
    remote,
    resource_quotas,
    schemas,
    tenants,
    topic_routes,
    transactions,
)


def extension(app: web.Application) -> None:
    """Register the admin API routes and its error middleware on ``app`` (the policy
    enforcer is the broker service's: :mod:`magnetar.broker.enforcement`)."""
    app.middlewares.append(common.error_middleware)
    if http.SERVICE in app:  # (route-table tests build the app without a service)
        app[remote.PEERS] = remote.HttpPeers.of(app[http.SERVICE].config)
    clusters.register(app.router)
    bookies.register(app.router)
    broker_stats.register(app.router)
    tenants.register(app.router)
    permissions.register(app.router)
    namespaces.register(app.router)
    topic_routes.register(app.router)
    schemas.register(app.router)
    functions.register(app.router)
    transactions.register(app.router)
    resource_quotas.register(app.router)
    openapi.register(app.router)
