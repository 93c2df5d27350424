"""Topics and subscriptions: ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/...``.

The routes of the admin REST API for topics, one module per resource; each handler only
translates HTTP (path, query, body) into a call of the typed topic operations
(``broker/topic_ops/``) and its answer into Pulsar's JSON. Its errors become HTTP statuses
in the admin error middleware (``admin/common.py``); ``OwnedElsewhere`` becomes
``307 Temporary Redirect`` to the owner's web URL, as Pulsar answers.

* :mod:`.lifecycle`: list, create, delete, unload, terminate;
* :mod:`.partitioned`: partitioned topics (create, grow, metadata, delete, list);
* :mod:`.stats`: stats, internalStats, partitioned-stats;
* :mod:`.subscriptions`: list, create, delete, skip, clear backlog, expire, reset;
* :mod:`.messages`: lastMessageId, peeking at a subscription's n-th message;
* :mod:`.policies`: topic-level messageTTL, retention, deduplicationEnabled,
  compactionThreshold;
* :mod:`.compaction`: start a compaction, its status;
* :mod:`.offload`: start an offload to S3, its status (docs/offload.md).

Non-persistent topics exist while a broker serves them: what needs stored messages answers
405 naming the operation; creating a subscription answers Pulsar's 400 (only clients do).
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.topic_routes import (
    compaction,
    lifecycle,
    messages,
    offload,
    partitioned,
    policies,
    stats,
    subscriptions,
)


def register(router: web.UrlDispatcher) -> None:
    """Every topic route, one resource module after the other (a new resource: one module,
    one line here)."""
    lifecycle.register(router)
    partitioned.register(router)
    stats.register(router)
    messages.register(router)
    subscriptions.register(router)
    policies.register(router)
    compaction.register(router)
    offload.register(router)
