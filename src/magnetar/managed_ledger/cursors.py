"""A managed ledger's cursors by name: recovered when it opens, opened and deleted one at a
time.

Why this module exists: the registry of open cursors is one concern of the managed ledger
(``ledger.py``) with its own lock; the cursors themselves are
:class:`~magnetar.managed_ledger.cursor.ManagedCursorImpl`, which see the managed ledger only
through :class:`~magnetar.managed_ledger.cursor.PersistentHost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from magnetar.ledger import errors as ledger_errors
from magnetar.managed_ledger import api, records
from magnetar.managed_ledger.api import Position
from magnetar.managed_ledger.cursor import ManagedCursorImpl, PersistentHost
from magnetar.managed_ledger.storage import storage_error
from magnetar.metadata import api as md
from magnetar.metadata import keys


class CursorRegistry:
    """The open cursors of one managed ledger (``host``), by name."""

    def __init__(self, host: PersistentHost, store: md.MetadataStore, path: records.TopicPath):
        self._host = host
        self._store = store
        self._path = path
        self.by_name: dict[str, ManagedCursorImpl] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Recover every durable cursor stored for the managed ledger."""
        children = await self._store.children(self._path.cursors_key)
        names = [keys.unsegment(n) for n in children]
        recovered = await asyncio.gather(
            *(ManagedCursorImpl.recover(self._host, name) for name in names)
        )
        for cursor in recovered:
            if cursor is not None:
                self.by_name[cursor.name] = cursor

    async def open(
        self,
        name: str,
        *,
        initial_position: api.InitialPosition,
        properties: Mapping[str, int] | None,
    ) -> ManagedCursorImpl:
        """The durable cursor ``name``, created when new; CursorAlreadyExistsError while a
        non-durable one of that name is open."""
        async with self._lock:
            existing = self.by_name.get(name)
            if existing is not None and not existing.closed:
                if not existing.durable:
                    raise api.CursorAlreadyExistsError(f"{name}: a non-durable cursor")
                return existing
            try:
                cursor = await ManagedCursorImpl.open_durable(
                    self._host, name, initial_position=initial_position, properties=properties
                )
            except (ledger_errors.LedgerError, md.MetadataError) as err:
                raise storage_error(err) from err
            self.by_name[name] = cursor
            return cursor

    def new_non_durable(self, name: str, start: Position, *, inclusive: bool) -> ManagedCursorImpl:
        return ManagedCursorImpl.add_non_durable(
            self._host, self.by_name, name, start, inclusive=inclusive
        )

    async def delete(self, name: str) -> None:
        """Delete the cursor (open or only stored); CursorNotFoundError when there is none."""
        async with self._lock:
            cursor = self.by_name.pop(name, None)
            if cursor is None:
                if await self._store.get(self._path.cursor_key(name)) is None:
                    raise api.CursorNotFoundError(f"{self._host.name}: no cursor {name}")
                cursor = await ManagedCursorImpl.recover(self._host, name)
                if cursor is None:
                    return
            try:
                await cursor.destroy()
            except (ledger_errors.LedgerError, md.MetadataError) as err:
                raise storage_error(err) from err

    def forget(self, cursor: ManagedCursorImpl) -> None:
        if self.by_name.get(cursor.name) is cursor:
            del self.by_name[cursor.name]

    def slowest_mark_delete(self) -> Position | None:
        """The lowest mark-delete position of the durable cursors, None without any."""
        found = [c.mark_delete_position for c in self.by_name.values() if c.durable]
        return min(found) if found else None
