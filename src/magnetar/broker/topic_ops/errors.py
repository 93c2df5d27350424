"""The errors of topic administration, named by how the caller reacts to them.

Why this module exists: the typed topic operations (:mod:`magnetar.broker.topic_ops`)
knows nothing of HTTP, yet its callers must tell "does not exist" from "in use" from "ask
another broker". The admin REST API maps each class to Pulsar's status
(``broker/admin/common.py``); every error carries a ``reason`` worded for the user.
"""

from __future__ import annotations


class TopicAdminError(Exception):
    """Base class: ``reason`` says what was refused and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotFound(TopicAdminError):
    """The topic, namespace, subscription or message does not exist."""


class AlreadyExists(TopicAdminError):
    """What was to be created exists already (or clashes with what exists)."""


class Conflict(TopicAdminError):
    """A record changed concurrently too often; the caller may retry."""


class InvalidName(TopicAdminError):
    """A name (topic, tenant, namespace, bundle) is not valid here."""


class InUse(TopicAdminError):
    """Refused while producers or consumers are attached (unless forced)."""


class NotAllowed(TopicAdminError):
    """The operation does not apply to this kind of topic (stored messages of a
    non-persistent topic)."""


class Invalid(TopicAdminError):
    """The request is well formed but asks for something impossible (shrinking
    partitions, creating a subscription only clients may create)."""


class Precondition(TopicAdminError):
    """The topic is not in a state the operation needs (examining an empty topic)."""


class Unavailable(TopicAdminError):
    """The broker that must answer cannot be reached now; retry later."""


class OwnedElsewhere(TopicAdminError):
    """Another broker owns the topic: ask it, at ``web_service_url``."""

    def __init__(self, web_service_url: str, reason: str = "", *, tls_url: str = "") -> None:
        super().__init__(reason or f"owned by the broker at {web_service_url}")
        self.web_service_url = web_service_url
        self.web_service_url_tls = tls_url
        """The owner's HTTPS URL ("" without one): where an HTTPS client is sent."""


class PeerRefused(TopicAdminError):
    """The broker owning a part of the operation refused it; ``status`` is its answer
    (passed on unchanged)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
