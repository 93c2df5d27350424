"""Topic operations as typed calls, with no HTTP in them.

Why this package exists: the admin REST API (``broker/admin/topic_routes/``) and any other caller
(the namespace deletion, in-process tests) need the same operations on topics, partitioned
topics, subscriptions, stored messages, stats and topic-level policies. Here they take a
:class:`~magnetar.broker.topic_ops.scope.Scope` (the broker service, the way to reach other
brokers, whether the call is authoritative) and typed arguments, return plain values or
dataclasses and raise the errors of :mod:`magnetar.broker.topic_ops.errors`; the routes only
translate HTTP to these calls and the errors to statuses.

* :mod:`.scope`: resolving names, existence, ownership (which broker must answer);
* :mod:`.topics`: listing, creating, deleting, unloading and terminating topics;
* :mod:`.partitioned`: partitioned topics (create, grow, delete, metadata);
* :mod:`.subscriptions`: create, delete, reset, skip, clear backlog, expire;
* :mod:`.messages`: the last message id and peeking at a subscription's messages;
* :mod:`.stats`: stats, internal stats, partitioned stats;
* :mod:`.policies`: topic-level policies overriding the namespace's.
"""
