"""The admin API's HTTP error, answered with Pulsar's ``{"reason": ...}`` body.

Why this module exists: the request-body checks (:mod:`magnetar.broker.admin.validation`)
and the handlers' shared helpers (:mod:`magnetar.broker.admin.common`) both raise it; neither
imports the other for it.
"""

from __future__ import annotations


class AdminError(Exception):
    """An HTTP error with Pulsar's ``{"reason": ...}`` body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def not_found(what: str) -> AdminError:
    return AdminError(404, f"{what} does not exist")
