"""A bookie's local storage: journal (group commit) + entry logs + LMDB index.

Program against :class:`api.LedgerStorage`; get one with :func:`open_storage`, then
``await storage.start()`` ... ``await storage.close()``. Knobs: :class:`config.BookieStorageConfig`.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.bookie.storage import api, config

__all__ = ["api", "config", "open_storage"]


def open_storage(
    cfg: config.BookieStorageConfig,
    *,
    on_journal_sync: Callable[[float], None] | None = None,
    on_journal_queue: Callable[[float], None] | None = None,
) -> api.LedgerStorage:
    """The default strategy (DbLedgerStorage: entry logs + LMDB index). Not started yet.
    ``on_journal_sync(seconds)`` observes each group commit (from the journal thread),
    ``on_journal_queue(seconds)`` each add batch's wait in the journal's queue (on the loop)."""
    from magnetar.bookie.storage.db import DbLedgerStorage

    return DbLedgerStorage(cfg, on_journal_sync=on_journal_sync, on_journal_queue=on_journal_queue)
