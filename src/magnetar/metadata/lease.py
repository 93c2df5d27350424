"""What every metadata-store session shares, whatever keeps its lease alive.

Why this module exists: the etcd and the embedded backends renew their leases differently,
but a session's identity, its lost/closed state and the once-only ``on_lost`` callbacks must
behave the same on both (:class:`magnetar.metadata.api.Session`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class LeaseState:
    """A session's lease id and TTL, whether it is lost or closed, and its loss callbacks."""

    def __init__(self, lease_id: int, ttl: float) -> None:
        self._id = lease_id
        self._ttl = ttl
        self._lost = False
        self._closed = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def id(self) -> int:
        return self._id

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def usable(self) -> bool:
        return not (self._lost or self._closed)

    def on_lost(self, callback: Callable[[], None]) -> None:
        if self._lost:
            callback()
        else:
            self._callbacks.append(callback)

    def _tell_lost(self) -> None:
        """Call every ``on_lost`` callback once (a failing one is logged)."""
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("session %x: on_lost callback failed", self._id)
