"""The root of Magnetar's exception tree.

Exceptions are named by how the caller should react: a ``TemporaryError`` may succeed when
retried (a peer is down, a lease is being renewed), a ``PermanentError`` will not (bad input,
a precondition that does not hold). Each layer derives its own named errors from these, and
the edges (protocol ServerError codes, HTTP statuses, gRPC codes) map them in one place.
"""

from __future__ import annotations


class MagnetarError(Exception):
    """Base of every error Magnetar raises on purpose."""


class TemporaryError(MagnetarError):
    """The operation failed for a reason that may pass: retrying can succeed."""


class PermanentError(MagnetarError):
    """The operation can never succeed as asked: do not retry it unchanged."""
